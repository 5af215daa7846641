package secrets

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/codes"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kmsauth"
	"github.com/gantry-dev/gantry/pkg/workload"
)

// authError is an authentication failure: Unauthenticated (401) when credentials are missing or a
// session is not valid, PermissionDenied (403) when credentials were presented and refused
// (Confidant's split).
type authError struct {
	code codes.Code
	msg  string
}

func (e *authError) Error() string { return e.msg }

func unauthenticated(msg string) error { return &authError{code: codes.Unauthenticated, msg: msg} }
func forbidden(msg string) error       { return &authError{code: codes.PermissionDenied, msg: msg} }

// AuthRequest is the authentication material of one call, as the transport received it.
type AuthRequest struct {
	// Authorization is the Authorization header (HTTP Basic carries kmsauth).
	Authorization string
	// AuthFrom and AuthToken are the X-Auth-From / X-Auth-Token headers (kmsauth too).
	AuthFrom, AuthToken string
	// Cookies by name.
	Cookies map[string]string
	// Headers holds the trusted header-authentication headers, by lower-case name.
	Headers map[string]string
	// XSRFToken is the X-XSRF-TOKEN header.
	XSRFToken string
	// Write is set for calls that change state; browser callers must then prove XSRF.
	Write bool
	// ClientCert is the client certificate chain the gateway verified the caller holds the key of
	// (wirekeys.ClientCert); PeerCerts the one a direct gRPC caller presented, when it names a workload.
	ClientCert string
	PeerCerts  []*x509.Certificate
}

// AuthResult is who called, plus cookies to set on the response (a slid session, the XSRF cookie).
type AuthResult struct {
	Principal Principal
	Cookies   []*http.Cookie
}

// authenticator decides who a call comes from: kmsauth (HTTP Basic or X-Auth-*) for services and
// CLI users, else the configured browser login (trusted headers or a session cookie).
type authenticator struct {
	cfg       AuthConfig
	validator *kmsauth.Validator
	sessions  *sessions
	users     map[string]bool // USERS_FILE allow-list; nil when unset
	// linkSessions: without a login module, sessions opened by `gantry login` links are accepted.
	linkSessions bool
	// certs verifies services' client certificates, tokens workload tokens; nil: not accepted.
	certs  *workload.CertVerifier
	tokens *workload.JWTVerifier
	// serviceAllowed, when set, must approve every kmsauth service principal (local grants).
	serviceAllowed func(ctx context.Context, service string) (bool, error)
	// sessionEnded, when set, reports whether a browser session (by sessions.id) was ended by a
	// logout; such a session is refused although its cookie is still valid.
	sessionEnded func(ctx context.Context, id string) (bool, error)
}

func loadUsersFile(path string) (map[string]bool, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("USERS_FILE: %w", err)
	}
	var list []string
	if err := yaml.Unmarshal(data, &list); err != nil {
		var m map[string]any
		if err2 := yaml.Unmarshal(data, &m); err2 != nil {
			return nil, fmt.Errorf("USERS_FILE %s: want a YAML list (or map) of emails: %v", path, err)
		}
		for k := range m {
			list = append(list, k)
		}
	}
	users := map[string]bool{}
	for _, u := range list {
		users[strings.ToLower(strings.TrimSpace(u))] = true
	}
	return users, nil
}

// userAllowed applies USER_EMAIL_SUFFIX and USERS_FILE to a browser user.
func (a *authenticator) userAllowed(email string) bool {
	if a.cfg.UserEmailSuffix != "" && !emailSuffixMatches(email, a.cfg.UserEmailSuffix) {
		return false
	}
	return a.users == nil || a.users[email]
}

// emailSuffixMatches applies USER_EMAIL_SUFFIX. "@example.com" is a plain suffix. A suffix without @
// ("example.com") names a domain: the email's domain must be it or one of its subdomains, so that
// someone@evilexample.com does not pass, as a plain string suffix would let it.
func emailSuffixMatches(email, suffix string) bool {
	if strings.Contains(suffix, "@") {
		return strings.HasSuffix(email, suffix)
	}
	at := strings.LastIndexByte(email, '@')
	if at < 0 {
		return false
	}
	domain, suffix := strings.ToLower(email[at+1:]), strings.ToLower(strings.TrimPrefix(suffix, "."))
	return domain == suffix || strings.HasSuffix(domain, "."+suffix)
}

func (a *authenticator) authenticate(ctx context.Context, req AuthRequest) (*AuthResult, error) {
	if !a.cfg.UseAuth {
		return &AuthResult{Principal: AnonymousPrincipal}, nil
	}
	if kinds := a.credentialKinds(req); len(kinds) > 1 {
		return nil, &authError{code: codes.InvalidArgument, msg: "the request carries more than one kind of credential (" +
			strings.Join(kinds, ", ") + "): send one, so that who calls is never decided by an order of precedence"}
	}
	if scheme, value, ok := strings.Cut(req.Authorization, " "); ok && strings.EqualFold(scheme, "basic") {
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(value))
		if err != nil {
			return nil, forbidden("Authorization header is not valid HTTP Basic")
		}
		user, token, _ := strings.Cut(string(raw), ":")
		if user == "" {
			return nil, forbidden("kmsauth username is missing")
		}
		return a.kmsauth(ctx, user, token)
	}
	if token, ok := bearerJWT(req.Authorization); ok {
		return a.bearer(ctx, token)
	}
	if req.AuthFrom != "" || req.AuthToken != "" {
		if req.AuthFrom == "" || req.AuthToken == "" {
			return nil, forbidden("X-Auth-From and X-Auth-Token must be sent together")
		}
		return a.kmsauth(ctx, req.AuthFrom, req.AuthToken)
	}
	if req.ClientCert != "" || len(req.PeerCerts) > 0 {
		return a.clientCert(req)
	}
	// The same decision the gateway makes before it reads a body (MissingCredentialCheck): a call
	// without any credential is refused here with exactly the answer the gateway gives it.
	if err := a.missingCredential(req); err != nil {
		return nil, err
	}
	switch a.cfg.UserAuthModule {
	case "header":
		return a.header(req)
	case "saml", "oidc":
		return a.session(ctx, req)
	}
	return a.session(ctx, req) // missingCredential let it through: link sessions and a session cookie
}

// credentialKinds names the kinds of credential a call carries: HTTP Basic (kmsauth), a Bearer
// token, X-Auth-From/X-Auth-Token (kmsauth), a client certificate, a session cookie. A call with two
// is refused (400) rather than authenticated by whichever one an order of precedence prefers: two
// credentials of different callers in one request are a confused client or an attempt to make a log,
// a proxy or a policy see one identity while the server acts on another. The header login's proxy
// headers are not the caller's and do not count.
func (a *authenticator) credentialKinds(req AuthRequest) []string {
	var kinds []string
	scheme, _, _ := strings.Cut(req.Authorization, " ")
	switch {
	case strings.EqualFold(scheme, "basic"):
		kinds = append(kinds, "HTTP Basic")
	case strings.EqualFold(scheme, "bearer"):
		kinds = append(kinds, "Bearer token")
	}
	if req.AuthFrom != "" || req.AuthToken != "" {
		kinds = append(kinds, "X-Auth-From/X-Auth-Token")
	}
	if req.ClientCert != "" || len(req.PeerCerts) > 0 {
		kinds = append(kinds, "client certificate")
	}
	if req.Cookies[a.cfg.SessionCookieName] != "" {
		kinds = append(kinds, "session cookie")
	}
	return kinds
}

// The refusals of a call that carries no credential at all, one per browser login module.
const (
	msgNoProxyHeaders = "not authenticated: the authenticating proxy sent no user headers"
	msgNoSession      = "not authenticated: log in at /v1/login"
	msgNoCredential   = "authentication required: send a kmsauth token (HTTP Basic 2/<user_type>/<from>:<token>), a workload token (Bearer) or a service's client certificate"
)

// missingCredential returns the refusal of a call that carries no credential at all (no HTTP Basic,
// no X-Auth-*, nor what the browser login reads: its proxy headers or a session cookie), and nil for
// a call that carries something to verify. It needs no key, no KMS and no store, so the gateway can
// ask it before reading a request's body.
func (a *authenticator) missingCredential(req AuthRequest) error {
	if !a.cfg.UseAuth {
		return nil
	}
	if scheme, _, ok := strings.Cut(req.Authorization, " "); ok && strings.EqualFold(scheme, "basic") {
		return nil
	}
	if _, ok := bearerJWT(req.Authorization); ok {
		return nil
	}
	if req.AuthFrom != "" || req.AuthToken != "" || req.ClientCert != "" || len(req.PeerCerts) > 0 {
		return nil
	}
	hasSession := req.Cookies[a.cfg.SessionCookieName] != ""
	switch a.cfg.UserAuthModule {
	case "header":
		if req.Headers[strings.ToLower(a.cfg.HeaderUsername)] == "" || strings.TrimSpace(req.Headers[strings.ToLower(a.cfg.HeaderEmail)]) == "" {
			return unauthenticated(msgNoProxyHeaders)
		}
		return nil
	case "saml", "oidc":
		if !hasSession {
			return unauthenticated(msgNoSession)
		}
		return nil
	}
	if a.linkSessions && hasSession {
		return nil
	}
	return unauthenticated(msgNoCredential)
}

func (a *authenticator) kmsauth(ctx context.Context, username, token string) (*AuthResult, error) {
	if token == "" {
		return nil, forbidden("kmsauth token is missing")
	}
	id, err := a.validator.Validate(ctx, username, token)
	switch {
	case errors.Is(err, kmsauth.ErrUnavailable):
		return nil, fmt.Errorf("%w: %v", errUnavailable, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return nil, err
	case err != nil:
		return nil, forbidden("invalid kmsauth token: " + strings.TrimPrefix(err.Error(), "kmsauth: "))
	}
	if id.UserType == "service" && a.serviceAllowed != nil {
		// Asked on every request, after the token cache: a grant recorded since (by any replica)
		// counts at once, and a failed check refuses the request (503 or 500), never the service.
		ok, err := a.serviceAllowed(ctx, id.From)
		if err != nil {
			return nil, fmt.Errorf("check the grants of service %s: %w", id.From, err)
		}
		if !ok {
			return nil, forbidden(fmt.Sprintf("service %s holds no grant on the auth key", id.From))
		}
	}
	return &AuthResult{Principal: Principal{Name: id.From, Type: id.UserType, AuthType: "kms", Account: id.Account}}, nil
}

func (a *authenticator) header(req AuthRequest) (*AuthResult, error) {
	username := req.Headers[strings.ToLower(a.cfg.HeaderUsername)]
	email := strings.ToLower(strings.TrimSpace(req.Headers[strings.ToLower(a.cfg.HeaderEmail)]))
	if username == "" || email == "" {
		return nil, unauthenticated(msgNoProxyHeaders)
	}
	if !a.userAllowed(email) {
		return nil, forbidden(email + " is not allowed to use this service")
	}
	p := Principal{Name: email, Type: "user", AuthType: "header"}
	if req.Write && !a.sessions.checkHeaderXSRF(req.XSRFToken, email) {
		return nil, unauthenticated("XSRF token missing, expired or invalid: echo the " + a.sessions.xsrfCookie + " cookie in X-XSRF-TOKEN")
	}
	return &AuthResult{Principal: p, Cookies: []*http.Cookie{a.sessions.headerXSRFCookie(email)}}, nil
}

func (a *authenticator) session(ctx context.Context, req AuthRequest) (*AuthResult, error) {
	value := req.Cookies[a.cfg.SessionCookieName]
	if value == "" {
		return nil, unauthenticated(msgNoSession)
	}
	sess, err := a.sessions.decode(value)
	if err != nil {
		return nil, unauthenticated("session expired or invalid: log in again at /v1/login")
	}
	if a.sessionEnded != nil {
		// Asked on every request: a logout through any replica ends the session everywhere at
		// once. A store that cannot answer refuses the request (503), never accepts it.
		ended, err := a.sessionEnded(ctx, a.sessions.id(sess))
		if err != nil {
			return nil, fmt.Errorf("check whether the session was ended: %w", err)
		}
		if ended {
			return nil, unauthenticated("session ended (logged out): log in again at /v1/login")
		}
	}
	if !a.userAllowed(sess.Email) {
		return nil, forbidden(sess.Email + " is not allowed to use this service")
	}
	if req.Write && !a.sessions.checkXSRF(req.XSRFToken, sess.Email, sess.Issued) {
		return nil, unauthenticated("XSRF token missing or invalid: echo the " + a.sessions.xsrfCookie + " cookie in X-XSRF-TOKEN")
	}
	a.sessions.slide(sess)
	return &AuthResult{
		Principal: Principal{Name: sess.Email, Type: "user", AuthType: "session"},
		Cookies:   []*http.Cookie{a.sessions.cookie(sess), a.sessions.xsrfCookieFor(sess.Email, sess.Issued)},
	}, nil
}

// login finishes a browser login: the session and XSRF cookies for the user.
func (a *authenticator) login(email, first, last string) ([]*http.Cookie, error) {
	email = strings.ToLower(strings.TrimSpace(email))
	if email == "" {
		return nil, unauthenticated("the identity provider sent no email")
	}
	if !a.userAllowed(email) {
		return nil, forbidden(email + " is not allowed to use this service")
	}
	sess := a.sessions.start(email, first, last)
	return []*http.Cookie{a.sessions.cookie(sess), a.sessions.xsrfCookieFor(email, sess.Issued)}, nil
}

// headerNames lists the trusted headers header authentication reads, for the gateway to forward.
func (c AuthConfig) headerNames() []string {
	var out []string
	for _, h := range []string{c.HeaderUsername, c.HeaderEmail, c.HeaderFirstName, c.HeaderLastName} {
		if h != "" && !slices.Contains(out, strings.ToLower(h)) {
			out = append(out, strings.ToLower(h))
		}
	}
	return out
}

// ForwardHeaders lists the request headers the gateway must pass to the secrets service for the
// configured browser login.
func (c Config) ForwardHeaders() []string {
	if c.Auth.UserAuthModule != "header" {
		return nil
	}
	return c.Auth.headerNames()
}

func newAuthenticator(ctx context.Context, cfg Config, provider kms.Provider) (*authenticator, error) {
	a := &authenticator{cfg: cfg.Auth, sessions: newSessions(cfg.Auth, cfg.XSRFCookieName)}
	if !cfg.Auth.UseAuth {
		return a, nil
	}
	if cfg.Auth.SessionSecret == "" && cfg.Auth.UserAuthModule != "null" {
		return nil, errors.New("SESSION_SECRET: required for browser login")
	}
	var err error
	if a.users, err = loadUsersFile(cfg.Auth.UsersFile); err != nil {
		return nil, err
	}
	a.validator, err = kmsauth.NewValidator(ctx, provider, kmsauth.Config{
		To: cfg.Auth.AuthContext, AuthKey: cfg.Auth.AuthKey, ScopedAuthKeys: cfg.ScopedAuthKeys,
		UserAuthKey: cfg.Auth.UserAuthKey, MaxLifetime: cfg.Auth.AuthTokenMaxLifetime,
		MinVersion: cfg.Auth.MinTokenVersion, MaxVersion: cfg.Auth.MaxTokenVersion,
		UserTypes: cfg.Auth.UserTypes, CacheSize: cfg.Auth.TokenCacheSize,
	})
	if err != nil {
		return nil, err
	}
	identities := cfg.Auth.WorkloadIdentityFile
	if identities == "" {
		identities = cfg.ACLPolicyFile
	}
	if a.tokens, err = LoadWorkloadIdentities(identities, cfg.Auth.WorkloadJWKSTimeout); err != nil {
		return nil, err
	}
	return a, nil
}

// Authenticate decides who makes a call.
func (s *Service) Authenticate(ctx context.Context, req AuthRequest) (*AuthResult, error) {
	res, err := s.auth.authenticate(ctx, req)
	if s.stats != nil {
		result := "success"
		if err != nil {
			res, result = nil, "failure"
		}
		s.stats.Counter("secrets.authn." + s.auth.authnMethod(req, res) + "." + result).Inc()
	}
	return res, err
}

// countAuthzDenied counts an authenticated call that access control refused.
func (s *Service) countAuthzDenied() {
	if s.stats != nil {
		s.stats.Counter(statAuthzDenied).Inc()
	}
}

// WebResponse is an answer for a browser: a status, where to go, cookies, and a body.
type WebResponse struct {
	Status      int
	Location    string
	Cookies     []*http.Cookie
	ContentType string
	Body        []byte
}

// Login runs the configured browser login for /v1/login.
func (s *Service) Login(ctx context.Context, req AuthRequest, query url.Values) (*WebResponse, error) {
	switch s.cfg.Auth.UserAuthModule {
	case "oidc":
		return s.loginOIDC(ctx, req, query)
	case "header":
		res, err := s.auth.header(AuthRequest{Headers: req.Headers})
		if err != nil {
			return nil, err
		}
		return &WebResponse{Status: http.StatusFound, Location: "/", Cookies: res.Cookies}, nil
	case "saml":
		return &WebResponse{Status: http.StatusFound, Location: "/v1/saml/login"}, nil
	}
	if s.links != nil && query.Get("code") != "" {
		return s.loginLink(ctx, query.Get("code"))
	}
	if s.links != nil {
		return nil, unauthenticated("log in with a link from `gantry login --user <email>`, run where the data folder is")
	}
	return nil, invalid("browser login is not configured (USER_AUTH_MODULE=%s); authenticate with a kmsauth token", s.cfg.Auth.UserAuthModule)
}

// UserEmail returns the email of a user caller, or nil for services.
func (s *Service) UserEmail(ctx context.Context) *string {
	p := PrincipalFrom(ctx)
	if p.Type != "user" {
		return nil
	}
	return &p.Name
}
