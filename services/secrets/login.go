package secrets

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/audit"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/loginlink"
	"github.com/gantry-dev/gantry/services/secrets/userauth"
)

// loginModules are the browser identity providers of USER_AUTH_MODULE=saml or oidc.
type loginModules struct {
	saml *userauth.SAML
	oidc *userauth.OIDC
}

// cookieSecret derives the key of the login flows' own short-lived cookies from SESSION_SECRET.
func cookieSecret(sessionSecret string) []byte {
	sum := sha256.Sum256([]byte("gantry userauth v1\x00" + sessionSecret))
	return sum[:]
}

func newLoginModules(ctx context.Context, a AuthConfig, logger *zap.Logger) (loginModules, error) {
	var m loginModules
	var err error
	switch a.UserAuthModule {
	case "saml":
		m.saml, err = userauth.NewSAML(userauth.SAMLConfig{
			URLRoot: a.SAMLURLRoot, SPCertPEM: []byte(a.SAMLSPCert), SPKeyPEM: []byte(a.SAMLSPKey),
			IdPEntityID: a.SAMLIdPEntityID, IdPSSOURL: a.SAMLIdPSSOURL, IdPSLOURL: a.SAMLIdPSLOURL,
			IdPCertPEM: []byte(a.SAMLIdPCert), WantAssertionsSigned: a.SAMLWantAssertionsSigned, Debug: a.SAMLDebug,
			CookieSecret: cookieSecret(a.SessionSecret), CookieSecure: a.SecureCookies,
		}, logger.Named("saml"))
	case "oidc":
		redirect := a.OIDCRedirectURL
		if redirect == "" {
			redirect = strings.TrimRight(a.SAMLURLRoot, "/") + "/v1/login"
		}
		m.oidc, err = userauth.NewOIDC(ctx, userauth.OIDCConfig{
			IssuerURL: a.OIDCIssuerURL, ClientID: a.OIDCClientID, ClientSecret: a.OIDCClientSecret, RedirectURL: redirect,
			EmailSuffix: strings.TrimPrefix(a.UserEmailSuffix, "@"), CookieSecret: cookieSecret(a.SessionSecret), CookieSecure: a.SecureCookies,
		}, logger.Named("oidc"))
	}
	return m, err
}

func fromUserauth(r *userauth.Response) *WebResponse {
	return &WebResponse{Status: r.Status, Location: r.Location, Cookies: r.SetCookies, ContentType: r.ContentType, Body: r.Body}
}

func loginFailed(err error) error {
	if errors.Is(err, userauth.ErrNotAuthenticated) {
		return unauthenticated("login failed: the identity provider's answer was not accepted")
	}
	return err
}

// finishLogin starts a session for a user the identity provider vouched for and sends the browser on.
func (s *Service) finishLogin(ctx context.Context, user *userauth.User, location string, extra ...*http.Cookie) (*WebResponse, error) {
	cookies, err := s.auth.login(user.Email, user.FirstName, user.LastName)
	if err != nil {
		return nil, err
	}
	module := s.cfg.Auth.UserAuthModule
	if s.links != nil {
		module = "login link"
	}
	// A login changes no stored secret: it is recorded, and goes on when the trail is down.
	r := audit.CallFrom(ctx).Record(audit.Allowed)
	r.Principal, r.PrincipalType, r.AuthType = strings.ToLower(user.Email), "user", module
	r.Action, r.Resource = "login", "session"
	_ = s.audit.Write(r)
	audit.CallFrom(ctx).Conclude()
	return &WebResponse{Status: http.StatusFound, Location: location, Cookies: append(cookies, extra...)}, nil
}

// Logout ends the caller's browser session on every replica: the session is recorded in the store
// as ended until its absolute expiry (plus the clock-skew margin of login links), so its cookie is
// refused from then on even if it was copied, and the session and XSRF cookies are cleared. Without a
// valid session it only clears the cookies: logging out twice is not an error. A store that cannot
// record the end fails the call (503) and keeps the cookies, so the user can try again.
func (s *Service) Logout(ctx context.Context, req AuthRequest) (*WebResponse, error) {
	sess, err := s.auth.sessions.decode(req.Cookies[s.cfg.Auth.SessionCookieName])
	if err == nil && !s.auth.sessions.checkXSRF(req.XSRFToken, sess.Email, sess.Issued) {
		// Logging out is a write like any other: a page of another site that posts to /v1/logout
		// sends the session cookie (SameSite=Lax allows a top-level POST) but cannot read the XSRF
		// cookie to echo it.
		return nil, unauthenticated("XSRF token missing or invalid: echo the " + s.auth.sessions.xsrfCookie + " cookie in X-XSRF-TOKEN")
	}
	ended := err == nil && s.store != nil
	if ended {
		until := time.Unix(sess.MaxExpiry, 0).Add(loginlink.ClockSkewMargin)
		if _, err := s.store.ClaimLoginNonce(ctx, endedSessionKey(s.auth.sessions.id(sess)), until); err != nil {
			return nil, fmt.Errorf("end the session: %w", err)
		}
		// Like a login, a logout changes no stored secret: recorded, and it goes on when the trail is down.
		r := audit.CallFrom(ctx).Record(audit.Allowed)
		r.Principal, r.PrincipalType, r.AuthType = sess.Email, "user", "session"
		r.Action, r.Resource = "logout", "session"
		_ = s.audit.Write(r)
		audit.CallFrom(ctx).Conclude()
	}
	expired := func(name string, httpOnly bool) *http.Cookie {
		return &http.Cookie{Name: name, Value: "", Path: "/", MaxAge: -1, HttpOnly: httpOnly, Secure: s.auth.sessions.secure, SameSite: http.SameSiteLaxMode}
	}
	body, _ := json.Marshal(map[string]bool{"logged_out": true, "session_ended": ended})
	return &WebResponse{Status: http.StatusOK, ContentType: "application/json", Body: append(body, '\n'),
		Cookies: []*http.Cookie{expired(s.cfg.Auth.SessionCookieName, true), expired(s.auth.sessions.xsrfCookie, false)}}, nil
}

// LoginOIDC runs both steps of the OIDC code flow on /v1/login.
func (s *Service) loginOIDC(ctx context.Context, req AuthRequest, query url.Values) (*WebResponse, error) {
	resp, user, err := s.login.oidc.LoginContext(ctx, userauth.Request{Method: http.MethodGet, Path: "/v1/login", Query: query, Cookies: req.Cookies})
	if err != nil {
		return nil, loginFailed(err)
	}
	if user == nil {
		return fromUserauth(resp), nil
	}
	var clear []*http.Cookie
	if resp != nil {
		clear = resp.SetCookies
	}
	return s.finishLogin(ctx, user, "/", clear...)
}

var errSAMLOff = &notFoundError{msg: "SAML login is not configured (USER_AUTH_MODULE=saml)"}

// SAMLMetadata returns the service-provider metadata.
func (s *Service) SAMLMetadata() (*WebResponse, error) {
	if s.login.saml == nil {
		return nil, errSAMLOff
	}
	return fromUserauth(s.login.saml.Metadata()), nil
}

// SAMLLogin redirects to the identity provider.
func (s *Service) SAMLLogin(req AuthRequest, next string) (*WebResponse, error) {
	if s.login.saml == nil {
		return nil, errSAMLOff
	}
	resp, err := s.login.saml.Login(userauth.Request{Method: http.MethodGet, Path: "/v1/saml/login", Query: url.Values{"next": {next}}, Cookies: req.Cookies})
	if err != nil {
		return nil, loginFailed(err)
	}
	return fromUserauth(resp), nil
}

// SAMLConsume checks the identity provider's assertion and starts a session.
func (s *Service) SAMLConsume(ctx context.Context, req AuthRequest, samlResponse, relayState string) (*WebResponse, error) {
	if s.login.saml == nil {
		return nil, errSAMLOff
	}
	user, relay, err := s.login.saml.Consume(userauth.Request{Method: http.MethodPost, Path: "/v1/saml/consume",
		Form: url.Values{"SAMLResponse": {samlResponse}, "RelayState": {relayState}}, Cookies: req.Cookies})
	if err != nil {
		return nil, loginFailed(err)
	}
	return s.finishLogin(ctx, user, relay, s.login.saml.ExpireRequestCookie())
}

// SAMLLogout ends the session and runs single logout.
func (s *Service) SAMLLogout(req AuthRequest, query url.Values) (*WebResponse, error) {
	if s.login.saml == nil {
		return nil, errSAMLOff
	}
	var resp *userauth.Response
	var err error
	if sess, decodeErr := s.auth.sessions.decode(req.Cookies[s.cfg.Auth.SessionCookieName]); decodeErr == nil && query.Get("SAMLResponse") == "" && query.Get("SAMLRequest") == "" {
		resp, err = s.login.saml.LogoutUser(userauth.Request{Method: http.MethodGet, Path: "/v1/saml/logout", Query: query, Cookies: req.Cookies},
			&userauth.User{Email: sess.Email, FirstName: sess.FirstName, LastName: sess.LastName})
	} else {
		resp, err = s.login.saml.Logout(userauth.Request{Method: http.MethodGet, Path: "/v1/saml/logout", Query: query, Cookies: req.Cookies})
	}
	if err != nil {
		return nil, loginFailed(err)
	}
	out := fromUserauth(resp)
	out.Cookies = append(out.Cookies, &http.Cookie{Name: s.cfg.Auth.SessionCookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true})
	return out, nil
}

// SAMLDebug shows the session's user, only with SAML_DEBUG.
func (s *Service) SAMLDebug(ctx context.Context, req AuthRequest) (*WebResponse, error) {
	if s.login.saml == nil {
		return nil, errSAMLOff
	}
	p := PrincipalFrom(ctx)
	resp, err := s.login.saml.Debug(userauth.Request{Method: http.MethodGet, Path: "/v1/saml/debug", Cookies: req.Cookies}, &userauth.User{Email: p.Name})
	if err != nil {
		return nil, err
	}
	return fromUserauth(resp), nil
}

// loginLink redeems a one-time link of `gantry login` (the default configuration, USER_AUTH_MODULE
// null): the same signed session and XSRF cookies as the other logins, then the web UI. The code is
// never logged or echoed (the gateway's access log drops query strings).
func (s *Service) loginLink(ctx context.Context, code string) (*WebResponse, error) {
	email, err := s.links.Redeem(ctx, code)
	switch {
	case errors.Is(err, loginlink.ErrInvalid):
		return nil, unauthenticated(strings.TrimPrefix(err.Error(), "loginlink: ") + "; run gantry login again for a new link")
	case errors.Is(err, kms.ErrUnavailable):
		return nil, fmt.Errorf("%w: %v", errUnavailable, err)
	case err != nil:
		return nil, err
	}
	return s.finishLogin(ctx, &userauth.User{Email: email}, "/")
}
