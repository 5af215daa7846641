package secrets

import (
	"context"
	"strconv"
	"strings"

	"go.uber.org/zap"
	"google.golang.org/grpc/metadata"

	"github.com/gantry-dev/gantry/pkg/audit"
	"github.com/gantry-dev/gantry/pkg/wirekeys"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// Server is the gRPC transport of the secrets service: each handler converts the request, calls the
// domain Service, maps its error with toStatus and converts the answer. No business rules live here.
//
// It embeds UnsafeSecretsServiceServer, not the Unimplemented server: every RPC exists, so an RPC
// added to the proto without a handler fails to compile instead of answering 501 at run time.
type Server struct {
	secretsv1.UnsafeSecretsServiceServer
	svc    *Service
	logger *zap.Logger
	// refusalAudit bounds the audit entries of refused authentications (see auditRefusedAuthentication).
	refusalAudit audit.RefusalLimiter
}

var _ secretsv1.SecretsServiceServer = (*Server)(nil)

// NewServer returns the gRPC server of svc.
func NewServer(svc *Service, logger *zap.Logger) *Server {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Server{svc: svc, logger: logger}
}

func (s *Server) fail(err error) error { return toStatus(s.logger, err) }

// expectedRevision reads the optional If-Match of a write: a revision number, bare or as an entity
// tag in double quotes (If-Match: 3 or If-Match: "3"). Anything else is refused rather than ignored,
// so a caller relying on the precondition never writes without it.
func expectedRevision(ctx context.Context) (ExpectedRevision, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	values := md.Get(wirekeys.IfMatch)
	if len(values) == 0 {
		return 0, nil
	}
	bad := invalid("If-Match must be one revision number, e.g. If-Match: 3 (or \"3\")")
	if len(values) > 1 {
		return 0, bad
	}
	v := strings.TrimSpace(values[0])
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 1 {
		return 0, bad
	}
	return ExpectedRevision(n), nil
}

// ListCredentials implements secretsv1.SecretsServiceServer.
func (s *Server) ListCredentials(ctx context.Context, req *secretsv1.ListCredentialsRequest) (*secretsv1.ListCredentialsResponse, error) {
	views, next, err := s.svc.ListCredentials(ctx, optInt32(req.GetLimit()), pageToken(req.GetNextPage(), req.GetPage()), req.GetNamePrefix())
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.ListCredentialsResponse{Credentials: credentialsToPB(views, false), NextPage: nextPage(next)}, nil
}

func credentialInput(name *string, pairs, metadata map[string]any, enabled *bool, doc *string) CredentialInput {
	return CredentialInput{Name: name, Pairs: pairs, Metadata: metadata, Enabled: enabled, Documentation: doc}
}

// CreateCredential implements secretsv1.SecretsServiceServer.
func (s *Server) CreateCredential(ctx context.Context, req *secretsv1.CreateCredentialRequest) (*secretsv1.CreateCredentialResponse, error) {
	name, doc := req.GetName(), req.GetDocumentation()
	in := credentialInput(&name, structMap(req.GetCredentialPairs()), structMap(req.GetMetadata()), optBool(req.GetEnabled()), &doc)
	in.Tags, in.TagsSet = req.GetTags(), true
	view, err := s.svc.CreateCredential(ctx, in)
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.CreateCredentialResponse{Credential: credentialToPB(view)}, nil
}

// GetCredential implements secretsv1.SecretsServiceServer.
func (s *Server) GetCredential(ctx context.Context, req *secretsv1.GetCredentialRequest) (*secretsv1.GetCredentialResponse, error) {
	view, err := s.svc.GetCredential(ctx, req.GetId(), req.GetMetadataOnly())
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.GetCredentialResponse{Credential: credentialToPB(view)}, nil
}

// UpdateCredential implements secretsv1.SecretsServiceServer.
func (s *Server) UpdateCredential(ctx context.Context, req *secretsv1.UpdateCredentialRequest) (*secretsv1.UpdateCredentialResponse, error) {
	in := credentialInput(optStr(req.GetName()), structMap(req.GetCredentialPairs()), structMap(req.GetMetadata()),
		optBool(req.GetEnabled()), optStr(req.GetDocumentation()))
	if req.GetTags() != nil {
		tags, err := tagsFromList(req.GetTags())
		if err != nil {
			return nil, s.fail(err)
		}
		in.Tags, in.TagsSet = tags, true
	}
	in.Restoring = req.GetRevision().GetValue() != 0
	expect, err := expectedRevision(ctx)
	if err != nil {
		return nil, s.fail(err)
	}
	in.Expect = expect
	in.Intent = ChangeIntent{Reason: req.GetChangeReason(), BreakGlass: req.GetBreakGlass()}
	view, err := s.svc.UpdateCredential(ctx, req.GetId(), in)
	if held := s.held(ctx, err); held != nil {
		return &secretsv1.UpdateCredentialResponse{ChangeRequest: held}, nil
	}
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.UpdateCredentialResponse{Credential: credentialToPB(view)}, nil
}

// RevertCredential implements secretsv1.SecretsServiceServer.
func (s *Server) RevertCredential(ctx context.Context, req *secretsv1.RevertCredentialRequest) (*secretsv1.RevertCredentialResponse, error) {
	expect, err := expectedRevision(ctx)
	if err != nil {
		return nil, s.fail(err)
	}
	view, err := s.svc.RevertCredential(ctx, req.GetId(), req.GetToRevision(), expect, ChangeIntent{Reason: req.GetChangeReason(), BreakGlass: req.GetBreakGlass()})
	if held := s.held(ctx, err); held != nil {
		return &secretsv1.RevertCredentialResponse{ChangeRequest: held}, nil
	}
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.RevertCredentialResponse{Credential: credentialToPB(view)}, nil
}

// DiffCredential implements secretsv1.SecretsServiceServer.
func (s *Server) DiffCredential(ctx context.Context, req *secretsv1.DiffCredentialRequest) (*secretsv1.DiffCredentialResponse, error) {
	d, err := s.svc.DiffCredential(ctx, req.GetId(), req.GetOldRevision(), req.GetNewRevision())
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.DiffCredentialResponse{Changes: credentialDiffToPB(d)}, nil
}

// ListCredentialServices implements secretsv1.SecretsServiceServer.
func (s *Server) ListCredentialServices(ctx context.Context, req *secretsv1.ListCredentialServicesRequest) (*secretsv1.ListCredentialServicesResponse, error) {
	ids, err := s.svc.CredentialServices(ctx, req.GetId())
	if err != nil {
		return nil, s.fail(err)
	}
	if ids == nil {
		ids = []string{}
	}
	return &secretsv1.ListCredentialServicesResponse{Services: ids}, nil
}

// ArchiveCredential implements secretsv1.SecretsServiceServer.
func (s *Server) ArchiveCredential(ctx context.Context, req *secretsv1.ArchiveCredentialRequest) (*secretsv1.ArchiveCredentialResponse, error) {
	result, err := s.svc.ArchiveCredential(ctx, req.GetId(), req.GetForce(), ChangeIntent{Reason: req.GetChangeReason(), BreakGlass: req.GetBreakGlass()})
	if held := s.held(ctx, err); held != nil {
		return &secretsv1.ArchiveCredentialResponse{ChangeRequest: held}, nil
	}
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.ArchiveCredentialResponse{Result: result}, nil
}

// ListCredentialArchive implements secretsv1.SecretsServiceServer.
func (s *Server) ListCredentialArchive(ctx context.Context, req *secretsv1.ListCredentialArchiveRequest) (*secretsv1.ListCredentialArchiveResponse, error) {
	views, next, err := s.svc.ListCredentialArchive(ctx, optInt32(req.GetLimit()), req.GetNextPage())
	if err != nil {
		return nil, s.fail(err)
	}
	out := make([]*secretsv1.ArchivedCredential, len(views))
	for i, v := range views {
		out[i] = &secretsv1.ArchivedCredential{Credential: credentialToPB(v.CredentialView), ArchivedDate: FormatTime(v.ArchivedAt)}
	}
	return &secretsv1.ListCredentialArchiveResponse{Credentials: out, NextPage: nextPage(next)}, nil
}

// ListArchivedCredentials implements secretsv1.SecretsServiceServer.
func (s *Server) ListArchivedCredentials(ctx context.Context, req *secretsv1.ListArchivedCredentialsRequest) (*secretsv1.ListArchivedCredentialsResponse, error) {
	views, next, err := s.svc.ListArchivedCredentials(ctx, optInt32(req.GetLimit()), pageToken(req.GetNextPage(), req.GetPage()))
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.ListArchivedCredentialsResponse{Revisions: credentialsToPB(views, true), NextPage: nextPage(next)}, nil
}

// ListCredentialRevisions implements secretsv1.SecretsServiceServer.
func (s *Server) ListCredentialRevisions(ctx context.Context, req *secretsv1.ListCredentialRevisionsRequest) (*secretsv1.ListCredentialRevisionsResponse, error) {
	views, next, err := s.svc.ListCredentialRevisions(ctx, req.GetId(), optInt32(req.GetLimit()), pageToken(req.GetNextPage(), req.GetPage()))
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.ListCredentialRevisionsResponse{Revisions: credentialsToPB(views, true), NextPage: nextPage(next)}, nil
}

// ListServices implements secretsv1.SecretsServiceServer.
func (s *Server) ListServices(ctx context.Context, req *secretsv1.ListServicesRequest) (*secretsv1.ListServicesResponse, error) {
	views, next, err := s.svc.ListServices(ctx, optInt32(req.GetLimit()), pageToken(req.GetNextPage(), req.GetPage()))
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.ListServicesResponse{Services: servicesToPB(views, false), NextPage: nextPage(next)}, nil
}

// GetService implements secretsv1.SecretsServiceServer.
func (s *Server) GetService(ctx context.Context, req *secretsv1.GetServiceRequest) (*secretsv1.GetServiceResponse, error) {
	view, err := s.svc.GetService(ctx, req.GetId(), req.GetMetadataOnly())
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.GetServiceResponse{Service: serviceToPB(view, false, true)}, nil
}

// serviceFields checks an update mask of PutService: the fields a write may set, by proto name. The
// path id and the mask itself may be named (the gateway names every key of a body, and clients such as
// python-confidant-client send "id"); they set nothing.
func serviceFields(paths []string) (map[string]bool, error) {
	fields := map[string]bool{}
	for _, p := range paths {
		switch p {
		case "credentials", "blind_credentials", "enabled", "account":
			fields[p] = true
		case "id", "update_mask", "change_reason", "break_glass":
		default:
			return nil, invalid("update_mask names %q, which is not a field of a service", p)
		}
	}
	return fields, nil
}

// PutService implements secretsv1.SecretsServiceServer.
func (s *Server) PutService(ctx context.Context, req *secretsv1.PutServiceRequest) (*secretsv1.PutServiceResponse, error) {
	expect, err := expectedRevision(ctx)
	if err != nil {
		return nil, s.fail(err)
	}
	in := ServiceInput{
		Credentials: req.GetCredentials(), BlindCredentials: req.GetBlindCredentials(),
		Enabled: optBool(req.GetEnabled()), Account: optStr(req.GetAccount()), Expect: expect,
		Intent: ChangeIntent{Reason: req.GetChangeReason(), BreakGlass: req.GetBreakGlass()},
	}
	if mask := req.GetUpdateMask(); mask != nil {
		if in.Fields, err = serviceFields(mask.GetPaths()); err != nil {
			return nil, s.fail(err)
		}
	}
	view, err := s.svc.PutService(ctx, req.GetId(), in)
	if held := s.held(ctx, err); held != nil {
		return &secretsv1.PutServiceResponse{ChangeRequest: held}, nil
	}
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.PutServiceResponse{Service: serviceToPB(view, false, true)}, nil
}

// RevertService implements secretsv1.SecretsServiceServer.
func (s *Server) RevertService(ctx context.Context, req *secretsv1.RevertServiceRequest) (*secretsv1.RevertServiceResponse, error) {
	expect, err := expectedRevision(ctx)
	if err != nil {
		return nil, s.fail(err)
	}
	view, err := s.svc.RevertService(ctx, req.GetId(), req.GetToRevision(), expect, ChangeIntent{Reason: req.GetChangeReason(), BreakGlass: req.GetBreakGlass()})
	if held := s.held(ctx, err); held != nil {
		return &secretsv1.RevertServiceResponse{ChangeRequest: held}, nil
	}
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.RevertServiceResponse{Service: serviceToPB(view, false, true)}, nil
}

// DiffService implements secretsv1.SecretsServiceServer.
func (s *Server) DiffService(ctx context.Context, req *secretsv1.DiffServiceRequest) (*secretsv1.DiffServiceResponse, error) {
	d, err := s.svc.DiffService(ctx, req.GetId(), req.GetOldRevision(), req.GetNewRevision())
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.DiffServiceResponse{Changes: serviceDiffToPB(d)}, nil
}

// ListArchivedServices implements secretsv1.SecretsServiceServer.
func (s *Server) ListArchivedServices(ctx context.Context, req *secretsv1.ListArchivedServicesRequest) (*secretsv1.ListArchivedServicesResponse, error) {
	views, next, err := s.svc.ListArchivedServices(ctx, optInt32(req.GetLimit()), pageToken(req.GetNextPage(), req.GetPage()))
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.ListArchivedServicesResponse{Services: servicesToPB(views, true), NextPage: nextPage(next)}, nil
}

// ListServiceRevisions implements secretsv1.SecretsServiceServer.
func (s *Server) ListServiceRevisions(ctx context.Context, req *secretsv1.ListServiceRevisionsRequest) (*secretsv1.ListServiceRevisionsResponse, error) {
	views, next, err := s.svc.ListServiceRevisions(ctx, req.GetId(), optInt32(req.GetLimit()), pageToken(req.GetNextPage(), req.GetPage()))
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.ListServiceRevisionsResponse{Revisions: servicesToPB(views, true), NextPage: nextPage(next)}, nil
}

// GetClientConfig implements secretsv1.SecretsServiceServer.
func (s *Server) GetClientConfig(ctx context.Context, _ *secretsv1.GetClientConfigRequest) (*secretsv1.GetClientConfigResponse, error) {
	return clientConfigToPB(s.svc.GetClientConfig(ctx)), nil
}

// GenerateValue implements secretsv1.SecretsServiceServer.
func (s *Server) GenerateValue(ctx context.Context, _ *secretsv1.GenerateValueRequest) (*secretsv1.GenerateValueResponse, error) {
	v, err := s.svc.GenerateValue(ctx)
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.GenerateValueResponse{Value: v}, nil
}
