package secrets

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/gantry-dev/gantry/pkg/jwtkeys"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/rpcpolicy"
	optionsv1 "github.com/gantry-dev/gantry/proto/gantry/options/v1"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// policies is the access policy of every RPC of the secrets service, as the proto declares it
// (gantry.options.v1.access); TestEveryRPCHasAPolicy keeps it complete.
var policies = rpcpolicy.MustFor(secretsv1.File_secrets_v1_secrets_proto.Services().ByName("SecretsService"))

// errNoPolicy answers a method of the secrets service that has no access policy: fail closed.
var errNoPolicy = status.Error(codes.PermissionDenied, "this method has no access policy")

// HTTPStatusHeader is the response metadata key through which an RPC sets its HTTP status (the
// gateway applies it); used by the browser-facing routes that redirect.
const HTTPStatusHeader = "x-http-code"

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
		Authorization: firstValue(ctx, "authorization"),
		AuthFrom:      firstValue(ctx, "x-auth-from"),
		AuthToken:     firstValue(ctx, "x-auth-token"),
		XSRFToken:     firstValue(ctx, "x-xsrf-token"),
		Cookies:       map[string]string{},
		Headers:       map[string]string{},
		Write:         write,
	}
	for _, line := range metadata.ValueFromIncomingContext(ctx, "cookie") {
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
		policy, ok := table.Lookup(info.FullMethod)
		if !ok {
			s.logger.Error("refused a method without an access policy", zap.String("method", info.FullMethod))
			return nil, errNoPolicy
		}
		switch policy.Access {
		case optionsv1.Access_ACCESS_PUBLIC:
			return handler(ctx, req)
		case optionsv1.Access_ACCESS_AUTHENTICATED, optionsv1.Access_ACCESS_AUTHENTICATED_WRITE:
			res, err := s.svc.Authenticate(ctx, s.authRequest(ctx, policy.Access == optionsv1.Access_ACCESS_AUTHENTICATED_WRITE))
			if err != nil {
				refused := s.fail(err)
				s.auditRefusedAuthentication(info.FullMethod, req, err, refused)
				return nil, refused
			}
			setCookies(ctx, res.Cookies)
			ctx = WithPrincipal(ctx, res.Principal)
			// Every call that changes state (the proto's authenticated writes) counts against the
			// caller's write rate, before any of its work is done.
			if policy.Access == optionsv1.Access_ACCESS_AUTHENTICATED_WRITE {
				if err := s.svc.AdmitWrite(ctx); err != nil {
					retryAfterHeader(ctx, err)
					return nil, s.fail(err)
				}
			}
			return handler(ctx, req)
		default:
			s.logger.Error("refused a method whose access policy the secrets service does not enforce",
				zap.String("method", info.FullMethod), zap.String("access", policy.Access.String()))
			return nil, errNoPolicy
		}
	}
}

// refusalAuditBurst is how many refused authentications the audit log records per second: enough to
// see who is knocking, too few for a flood of requests without credentials to flood the log.
const refusalAuditBurst = 10

// auditFieldLimit bounds the client-supplied text (a requested id, a claimed email or user type quoted
// in a reason) that a refused, unauthenticated request can put on the audit log.
const auditFieldLimit = 200

// refusalLimiter lets refusalAuditBurst entries through per second of its clock and counts the others,
// so the next entry let through can say how many were left out.
type refusalLimiter struct {
	mu         sync.Mutex
	now        func() time.Time // nil: time.Now
	second     int64
	logged     int
	suppressed int64
}

// allow tells whether an entry may be logged now and, if so, how many were suppressed since the last.
func (l *refusalLimiter) allow() (suppressedBefore int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now
	if l.now != nil {
		now = l.now
	}
	if second := now().Unix(); second != l.second {
		l.second, l.logged = second, 0
	}
	if l.logged >= refusalAuditBurst {
		l.suppressed++
		return 0, false
	}
	l.logged++
	suppressedBefore, l.suppressed = l.suppressed, 0
	return suppressedBefore, true
}

// auditRefusedAuthentication records a call refused before there is a principal: credentials missing,
// refused (a bad kmsauth token, an email outside the allow-list) or without the XSRF proof. The entry
// has the method, the requested id when the request names one, and the reason in the server's words;
// never the credentials or the request body. Failures to decide (a KMS that cannot be asked) are not
// refusals and are logged where they happen.
func (s *Server) auditRefusedAuthentication(method string, req any, err, refused error) {
	var authErr *authError
	if !errors.As(err, &authErr) {
		return
	}
	suppressedBefore, ok := s.refusalAudit.allow()
	if !ok {
		return
	}
	fields := []zap.Field{zap.String("principal", ""), zap.String("action", method), zap.String("result", "denied"),
		zap.String("code", status.Code(refused).String()), zap.String("reason", truncateForAudit(authErr.msg))}
	if named, ok := req.(interface{ GetId() string }); ok && named.GetId() != "" {
		fields = append(fields, zap.String("id", truncateForAudit(named.GetId())))
	}
	if suppressedBefore > 0 {
		fields = append(fields, zap.Int64("suppressed", suppressedBefore))
	}
	s.svc.audit.Info("audit", fields...)
}

func truncateForAudit(text string) string {
	if len(text) <= auditFieldLimit {
		return text
	}
	return strings.ToValidUTF8(text[:auditFieldLimit], "") + "…"
}

// retryAfterHeader sends a rate limit's wait as response metadata, which the gateway turns into the
// HTTP Retry-After header of the 429.
func retryAfterHeader(ctx context.Context, err error) {
	var limited *RateLimitedError
	if errors.As(err, &limited) {
		_ = grpc.SetHeader(ctx, metadata.Pairs("retry-after", strconv.Itoa(limited.RetryAfterSeconds())))
	}
}

func setCookies(ctx context.Context, cookies []*http.Cookie) {
	if len(cookies) == 0 {
		return
	}
	md := metadata.MD{}
	for _, c := range cookies {
		md.Append("set-cookie", c.String())
	}
	_ = grpc.SetHeader(ctx, md)
}

// webResponse sends a browser answer through the gateway: status, Location and cookies as response
// metadata, the body as HttpBody.
func webResponse(ctx context.Context, r *WebResponse) *httpbody.HttpBody {
	md := metadata.Pairs(HTTPStatusHeader, strconv.Itoa(r.Status))
	if r.Location != "" {
		md.Append("location", r.Location)
	}
	for _, c := range r.Cookies {
		md.Append("set-cookie", c.String())
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
	r, err := s.svc.SAMLConsume(s.authRequest(ctx, false), req.GetSamlResponse(), req.GetRelayState())
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
