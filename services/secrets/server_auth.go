package secrets

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/gantry-dev/gantry/pkg/audit"
	"github.com/gantry-dev/gantry/pkg/jwtkeys"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/rpcerr"
	"github.com/gantry-dev/gantry/pkg/rpcpolicy"
	"github.com/gantry-dev/gantry/pkg/wirekeys"
	optionsv1 "github.com/gantry-dev/gantry/proto/gantry/options/v1"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// policies is the access policy of every RPC of the secrets service, as the proto declares it
// (gantry.options.v1.access); TestEveryRPCHasAPolicy keeps it complete.
var policies = rpcpolicy.MustFor(secretsv1.File_secrets_v1_secrets_proto.Services().ByName("SecretsService"))

// errNoPolicy answers a method of the secrets service that has no access policy: fail closed.
var errNoPolicy = status.Error(codes.PermissionDenied, "this method has no access policy")

// firstValue reads one metadata key of ctx in place: metadata.FromIncomingContext would copy the
// whole metadata on every call.
func firstValue(ctx context.Context, key string) string {
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// authRequest collects the authentication material of a call from its metadata (the gateway forwards
// the HTTP headers under their lower-case names).
func (s *Server) authRequest(ctx context.Context, write bool) AuthRequest {
	req := AuthRequest{
		Authorization: firstValue(ctx, wirekeys.Authorization),
		AuthFrom:      firstValue(ctx, wirekeys.AuthFrom),
		AuthToken:     firstValue(ctx, wirekeys.AuthToken),
		XSRFToken:     firstValue(ctx, wirekeys.XSRFToken),
		Cookies:       map[string]string{},
		Headers:       map[string]string{},
		Write:         write,
		ClientCert:    firstValue(ctx, wirekeys.ClientCert),
	}
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.VerifiedChains) > 0 {
			req.PeerCerts = peerWorkloadCerts(info.State.PeerCertificates)
		}
	}
	for _, line := range metadata.ValueFromIncomingContext(ctx, wirekeys.Cookie) {
		cookies, _ := http.ParseCookie(line)
		for _, c := range cookies {
			req.Cookies[c.Name] = c.Value
		}
	}
	for _, h := range s.svc.cfg.Auth.headerNames() {
		req.Headers[h] = firstValue(ctx, h)
	}
	return req
}

// AuthInterceptor enforces the declared policy of every call of the secrets service, REST through the
// gateway and gRPC alike, before dispatch: public methods pass, the others authenticate (writes with
// the browser's XSRF proof) and put the principal in the context; a method without a policy is
// refused. Calls to other services on the server (health, reflection) are not the secrets API.
func (s *Server) AuthInterceptor() grpc.UnaryServerInterceptor {
	return s.authInterceptor(policies)
}

func (s *Server) authInterceptor(table rpcpolicy.Table) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !strings.HasPrefix(info.FullMethod, "/"+secretsv1.SecretsService_ServiceDesc.ServiceName+"/") {
			return handler(ctx, req)
		}
		call := audit.GRPCCall(ctx, auditService, info.FullMethod)
		ctx = audit.WithCall(ctx, call)
		policy, ok := table.Lookup(info.FullMethod)
		if !ok {
			s.logger.Error("refused a method without an access policy", zap.String("method", info.FullMethod))
			return nil, errNoPolicy
		}
		switch policy.Access {
		case optionsv1.Access_ACCESS_PUBLIC:
			resp, err := handler(ctx, req)
			// A refused login (a used login link, an identity provider's answer not accepted) is an
			// authentication failure like any other; it needs no credentials, so it is flood-limited.
			if code := status.Code(err); (code == codes.Unauthenticated || code == codes.PermissionDenied) && !call.Concluded() {
				if suppressed, ok := s.refusalAudit.Allow(); ok {
					_ = s.auditWrite(call, req, Principal{}, audit.Denied, err, suppressed)
				}
			}
			return resp, err
		case optionsv1.Access_ACCESS_AUTHENTICATED, optionsv1.Access_ACCESS_AUTHENTICATED_WRITE:
			write := policy.Access == optionsv1.Access_ACCESS_AUTHENTICATED_WRITE
			res, err := s.authenticateCall(ctx, call, req, write)
			if err != nil {
				return nil, err
			}
			setCookies(ctx, res.Cookies)
			ctx = WithPrincipal(ctx, res.Principal)
			if !write {
				resp, err := handler(ctx, req)
				if status.Code(err) == codes.PermissionDenied {
					s.svc.countAuthzDenied()
				}
				return resp, err
			}
			// Every call that changes state (the proto's authenticated writes) counts against the
			// caller's write rate, before any of its work is done.
			if err := s.svc.AdmitWrite(ctx); err != nil {
				retryAfterHeader(ctx, err)
				refused := s.fail(err)
				// A principal past its rate can send refusals as fast as the network allows: they
				// share the flood limit of refused authentications.
				if suppressed, ok := s.refusalAudit.Allow(); ok {
					_ = s.auditWrite(call, req, res.Principal, audit.Denied, refused, suppressed)
				}
				return nil, refused
			}
			// The trail is a precondition of every write (Vault's rule): the pending record is
			// written before the handler can change anything, and the write is refused when no
			// audit sink takes it. Its outcome follows: the domain's record of the change (or
			// denial), else the transport's below.
			if err := s.auditWrite(call, req, res.Principal, audit.Pending, nil); err != nil {
				return nil, errAuditUnavailable
			}
			resp, err := handler(ctx, req)
			if status.Code(err) == codes.PermissionDenied {
				s.svc.countAuthzDenied()
			}
			if !call.Concluded() {
				outcome := audit.Allowed
				if err != nil {
					outcome = audit.Failed
				}
				_ = s.auditWrite(call, req, res.Principal, outcome, err)
			}
			return resp, err
		default:
			s.logger.Error("refused a method whose access policy the secrets service does not enforce",
				zap.String("method", info.FullMethod), zap.String("access", policy.Access.String()))
			return nil, errNoPolicy
		}
	}
}

// authenticateCall authenticates a call of a method whose policy needs a caller (write: the
// browser's XSRF proof too), and answers a refusal as the gRPC status the caller gets, audited
// against call.
func (s *Server) authenticateCall(ctx context.Context, call *audit.Call, req any, write bool) (*AuthResult, error) {
	res, err := s.svc.Authenticate(ctx, s.authRequest(ctx, write))
	if err != nil {
		refused := s.fail(err)
		s.auditRefusedAuthentication(call, req, err, refused)
		return nil, refused
	}
	return res, nil
}

// CheckCallCredentials implements secretsv1.SecretsServiceServer: the authentication of the method
// the request names, decided exactly as AuthInterceptor decides it for a call of that method (the
// same metadata, the same refusal, audited as a refused call of that method), without running the
// method, counting a write against the caller's rate or setting cookies. The gateway asks it before
// reading a large body. A method the service does not know, or this one, is a bad request.
func (s *Server) CheckCallCredentials(ctx context.Context, req *secretsv1.CheckCallCredentialsRequest) (*secretsv1.CheckCallCredentialsResponse, error) {
	// The check itself is not a call worth a record: a refusal is recorded as the named method's.
	audit.CallFrom(ctx).Conclude()
	method := req.GetFullMethod()
	policy, ok := policies.Lookup(method)
	if !ok || method == secretsv1.SecretsService_CheckCallCredentials_FullMethodName {
		return nil, status.Error(codes.InvalidArgument, "full_method names no method of the secrets service to check")
	}
	switch policy.Access {
	case optionsv1.Access_ACCESS_PUBLIC:
		return &secretsv1.CheckCallCredentialsResponse{}, nil
	case optionsv1.Access_ACCESS_AUTHENTICATED, optionsv1.Access_ACCESS_AUTHENTICATED_WRITE:
		call := audit.GRPCCall(ctx, auditService, method)
		if _, err := s.authenticateCall(ctx, call, nil, policy.Access == optionsv1.Access_ACCESS_AUTHENTICATED_WRITE); err != nil {
			return nil, err
		}
		return &secretsv1.CheckCallCredentialsResponse{}, nil
	}
	return nil, errNoPolicy
}

// auditService is the service name of the secrets service's audit records.
const auditService = "secrets"

// errAuditUnavailable answers a write while no audit sink can be written: 503, nothing changed.
var errAuditUnavailable = rpcerr.DependencyUnavailable(
	"the audit trail cannot be written: writes are refused until it can (and reads of secret values); nothing was changed", "audit")

// auditWrite records a write call the transport decides about (its pending record, a rate-limit
// refusal, or an outcome the domain did not record): the RPC's name as action, the requested id as
// resource, and for a refusal or failure the gRPC code (the message only for refusals: a failure's
// message may quote the request).
func (s *Server) auditWrite(call *audit.Call, req any, p Principal, outcome audit.Outcome, callErr error, suppressed ...int64) error {
	r := principalRecord(call.Record(outcome), p)
	if len(suppressed) > 0 {
		r.Suppressed = suppressed[0]
	}
	r.Action = call.Method[strings.LastIndexByte(call.Method, '/')+1:]
	r.Resource = resourceOfMethod(r.Action)
	if named, ok := req.(interface{ GetId() string }); ok {
		r.ResourceID = named.GetId()
	}
	if callErr != nil {
		st := status.Convert(callErr)
		r.Code = st.Code().String()
		if outcome == audit.Denied {
			r.Reason = st.Message()
		}
	}
	if outcome != audit.Pending {
		call.Conclude()
	}
	return s.svc.audit.Write(r)
}

// resourceOfMethod names the kind of resource a write RPC acts on.
func resourceOfMethod(rpc string) string {
	switch {
	case strings.Contains(rpc, "Credential"):
		return ResourceCredential
	case strings.Contains(rpc, "Service"), strings.Contains(rpc, "Grants"):
		return ResourceService
	case strings.Contains(rpc, "Certificate"):
		return ResourceCertificate
	case strings.Contains(rpc, "Login"), strings.Contains(rpc, "Saml"):
		return "session"
	}
	return ""
}

// auditRefusedAuthentication records a call refused before there is a principal: credentials missing,
// refused (a bad kmsauth token, an email outside the allow-list) or without the XSRF proof. The record
// has the method, the requested id when the request names one, and the reason in the server's words;
// never the credentials or the request body. Refusals need no credentials to cause, so past a burst
// per second they are counted rather than written (the next record says how many). Failures to decide
// (a KMS that cannot be asked) are not refusals and are logged where they happen.
func (s *Server) auditRefusedAuthentication(call *audit.Call, req any, err, refused error) {
	var authErr *authError
	if !errors.As(err, &authErr) {
		return
	}
	suppressedBefore, ok := s.refusalAudit.Allow()
	if !ok {
		return
	}
	r := call.Record(audit.Denied)
	r.Action = call.Method[strings.LastIndexByte(call.Method, '/')+1:]
	r.Resource = resourceOfMethod(r.Action)
	r.Code, r.Reason, r.Suppressed = status.Code(refused).String(), authErr.msg, suppressedBefore
	if named, ok := req.(interface{ GetId() string }); ok {
		r.ResourceID = named.GetId()
	}
	call.Conclude()
	_ = s.svc.audit.Write(r)
}

// retryAfterHeader sends a rate limit's wait as response metadata, which the gateway turns into the
// HTTP Retry-After header of the 429.
func retryAfterHeader(ctx context.Context, err error) {
	var limited *RateLimitedError
	if errors.As(err, &limited) {
		_ = grpc.SetHeader(ctx, metadata.Pairs(wirekeys.RetryAfter, strconv.Itoa(limited.RetryAfterSeconds())))
	}
}

func setCookies(ctx context.Context, cookies []*http.Cookie) {
	if len(cookies) == 0 {
		return
	}
	md := metadata.MD{}
	for _, c := range cookies {
		md.Append(wirekeys.SetCookie, c.String())
	}
	_ = grpc.SetHeader(ctx, md)
}

// webResponse sends a browser answer through the gateway: status, Location and cookies as response
// metadata, the body as HttpBody.
func webResponse(ctx context.Context, r *WebResponse) *httpbody.HttpBody {
	md := metadata.Pairs(wirekeys.HTTPCode, strconv.Itoa(r.Status))
	if r.Location != "" {
		md.Append(wirekeys.Location, r.Location)
	}
	for _, c := range r.Cookies {
		md.Append(wirekeys.SetCookie, c.String())
	}
	_ = grpc.SetHeader(ctx, md)
	ct := r.ContentType
	if ct == "" {
		ct = "text/plain; charset=utf-8"
	}
	return &httpbody.HttpBody{ContentType: ct, Data: r.Body}
}

// Login implements secretsv1.SecretsServiceServer.
func (s *Server) Login(ctx context.Context, req *secretsv1.LoginRequest) (*httpbody.HttpBody, error) {
	query := url.Values{}
	for k, v := range map[string]string{"code": req.GetCode(), "state": req.GetState(), "error": req.GetError()} {
		if v != "" {
			query.Set(k, v)
		}
	}
	r, err := s.svc.Login(ctx, s.authRequest(ctx, false), query)
	if err != nil {
		return nil, s.fail(err)
	}
	return webResponse(ctx, r), nil
}

// Logout implements secretsv1.SecretsServiceServer.
func (s *Server) Logout(ctx context.Context, _ *secretsv1.LogoutRequest) (*httpbody.HttpBody, error) {
	r, err := s.svc.Logout(ctx, s.authRequest(ctx, false))
	return s.web(ctx, r, err)
}

// GetUserEmail implements secretsv1.SecretsServiceServer.
func (s *Server) GetUserEmail(ctx context.Context, _ *secretsv1.GetUserEmailRequest) (*secretsv1.GetUserEmailResponse, error) {
	return &secretsv1.GetUserEmailResponse{Email: optString(s.svc.UserEmail(ctx))}, nil
}

func jwkToPB(k jwtkeys.JWK) *secretsv1.JsonWebKey {
	return &secretsv1.JsonWebKey{Kty: k.Kty, Kid: k.Kid, N: k.N, E: k.E, Alg: k.Alg}
}

// GetJwks implements secretsv1.SecretsServiceServer.
func (s *Server) GetJwks(ctx context.Context, req *secretsv1.GetJwksRequest) (*secretsv1.GetJwksResponse, error) {
	set, err := s.svc.GetJwks(ctx, req.GetEnvironment())
	if err != nil {
		return nil, s.fail(err)
	}
	resp := &secretsv1.GetJwksResponse{Kty: set.Active.Kty, Kid: set.Active.Kid, N: set.Active.N, E: set.Active.E, Alg: set.Active.Alg,
		Keys: make([]*secretsv1.JsonWebKey, len(set.All))}
	for i, k := range set.All {
		resp.Keys[i] = jwkToPB(k)
	}
	return resp, nil
}

// GetJwt implements secretsv1.SecretsServiceServer.
func (s *Server) GetJwt(ctx context.Context, req *secretsv1.GetJwtRequest) (*secretsv1.GetJwtResponse, error) {
	token, err := s.svc.GetJwt(ctx, req.GetId(), req.GetEnvironment(), time.Duration(req.GetExpiry())*time.Second)
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.GetJwtResponse{Token: token}, nil
}

func grantsToPB(st kms.GrantState) *secretsv1.GrantState {
	return &secretsv1.GrantState{EncryptGrant: st.Encrypt, DecryptGrant: st.Decrypt}
}

// PutGrants implements secretsv1.SecretsServiceServer.
func (s *Server) PutGrants(ctx context.Context, req *secretsv1.PutGrantsRequest) (*secretsv1.PutGrantsResponse, error) {
	st, err := s.svc.PutGrants(ctx, req.GetId())
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.PutGrantsResponse{Id: req.GetId(), Grants: grantsToPB(st)}, nil
}

// GetGrants implements secretsv1.SecretsServiceServer.
func (s *Server) GetGrants(ctx context.Context, req *secretsv1.GetGrantsRequest) (*secretsv1.GetGrantsResponse, error) {
	st, err := s.svc.GetGrants(ctx, req.GetId())
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.GetGrantsResponse{Id: req.GetId(), Grants: grantsToPB(st)}, nil
}

// ListRoles implements secretsv1.SecretsServiceServer.
func (s *Server) ListRoles(ctx context.Context, _ *secretsv1.ListRolesRequest) (*secretsv1.ListRolesResponse, error) {
	roles, err := s.svc.ListRoles(ctx)
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.ListRolesResponse{Roles: roles}, nil
}

func (s *Server) web(ctx context.Context, r *WebResponse, err error) (*httpbody.HttpBody, error) {
	if err != nil {
		return nil, s.fail(err)
	}
	return webResponse(ctx, r), nil
}

// GetSamlMetadata implements secretsv1.SecretsServiceServer.
func (s *Server) GetSamlMetadata(ctx context.Context, _ *secretsv1.GetSamlMetadataRequest) (*httpbody.HttpBody, error) {
	r, err := s.svc.SAMLMetadata()
	return s.web(ctx, r, err)
}

// SamlLogin implements secretsv1.SecretsServiceServer.
func (s *Server) SamlLogin(ctx context.Context, req *secretsv1.SamlLoginRequest) (*httpbody.HttpBody, error) {
	r, err := s.svc.SAMLLogin(s.authRequest(ctx, false), req.GetRelayState())
	return s.web(ctx, r, err)
}

// ConsumeSamlAssertion implements secretsv1.SecretsServiceServer.
func (s *Server) ConsumeSamlAssertion(ctx context.Context, req *secretsv1.ConsumeSamlAssertionRequest) (*httpbody.HttpBody, error) {
	r, err := s.svc.SAMLConsume(ctx, s.authRequest(ctx, false), req.GetSamlResponse(), req.GetRelayState())
	return s.web(ctx, r, err)
}

// SamlLogout implements secretsv1.SecretsServiceServer.
func (s *Server) SamlLogout(ctx context.Context, req *secretsv1.SamlLogoutRequest) (*httpbody.HttpBody, error) {
	query := url.Values{}
	for k, v := range map[string]string{"SAMLResponse": req.GetSamlResponse(), "SAMLRequest": req.GetSamlRequest(),
		"RelayState": req.GetRelayState(), "SigAlg": req.GetSigAlg(), "Signature": req.GetSignature()} {
		if v != "" {
			query.Set(k, v)
		}
	}
	r, err := s.svc.SAMLLogout(s.authRequest(ctx, false), query)
	return s.web(ctx, r, err)
}

// GetSamlDebug implements secretsv1.SecretsServiceServer. Its JSON answer comes from the SAML module.
func (s *Server) GetSamlDebug(ctx context.Context, _ *secretsv1.GetSamlDebugRequest) (*secretsv1.GetSamlDebugResponse, error) {
	r, err := s.svc.SAMLDebug(ctx, s.authRequest(ctx, false))
	if err != nil {
		return nil, s.fail(err)
	}
	if r.Status != http.StatusOK {
		return nil, s.fail(forbidden("SAML debugging is off (SAML_DEBUG)"))
	}
	var body struct {
		Session map[string]any `json:"session"`
		Headers map[string]any `json:"headers"`
	}
	_ = json.Unmarshal(r.Body, &body)
	session, _ := structpb.NewStruct(body.Session)
	headers, _ := structpb.NewStruct(body.Headers)
	return &secretsv1.GetSamlDebugResponse{Session: session, Headers: headers}, nil
}

// GetCaller implements secretsv1.SecretsServiceServer.
func (s *Server) GetCaller(ctx context.Context, _ *secretsv1.GetCallerRequest) (*secretsv1.GetCallerResponse, error) {
	p := PrincipalFrom(ctx)
	return &secretsv1.GetCallerResponse{Principal: p.Name, PrincipalType: p.Type, AuthType: p.AuthType}, nil
}
