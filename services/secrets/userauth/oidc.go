package userauth

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"go.uber.org/zap"
	"golang.org/x/oauth2"

	"github.com/gantry-dev/gantry/pkg/logging"
)

const (
	// OIDCStateCookie carries the state, nonce and PKCE verifier of a login in progress, so the
	// callback can prove it completes a login this browser started.
	OIDCStateCookie = "gantry_oidc_state"
	// oidcStateTTL bounds how long the user may spend at the provider's consent screen.
	oidcStateTTL = 10 * time.Minute
	// defaultIssuerURL keeps Confidant's "google" module working with only client credentials.
	defaultIssuerURL = "https://accounts.google.com"
	// defaultOIDCTimeout bounds provider round trips when the caller supplies neither an HTTP
	// client nor a context deadline.
	defaultOIDCTimeout = 30 * time.Second
)

// OIDCConfig configures the OpenID Connect login (Confidant's "google" user auth module).
type OIDCConfig struct {
	IssuerURL    string       // OIDC_ISSUER_URL; default https://accounts.google.com
	ClientID     string       // GOOGLE_OAUTH_CLIENT_ID
	ClientSecret string       // GOOGLE_OAUTH_CONSUMER_SECRET
	RedirectURL  string       // <URLRoot>/v1/login, registered with the provider
	Scopes       []string     // default: openid email profile
	EmailSuffix  string       // optional domain restriction, e.g. "example.com"; empty admits any
	CookieSecret []byte       // HMAC key for the state cookie (>= 32 bytes)
	CookieSecure bool         // mark the state cookie Secure
	HTTPClient   *http.Client // for discovery, JWKS and token exchange; nil uses a default client
}

// OIDC is an OpenID Connect relying party for browser login (authorization code flow with PKCE).
// It is safe for concurrent use.
type OIDC struct {
	oauth        oauth2.Config
	verifier     *oidc.IDTokenVerifier
	client       *http.Client
	emailDomain  string // "@example.com", lower case; empty admits any
	cookies      cookieSigner
	cookiePath   string
	cookieSecure bool
	logger       *zap.Logger
	rejections   *logging.Sampler // login rejections, sampled
	now          func() time.Time
}

// NewOIDC validates cfg and discovers the provider's endpoints and keys. ctx bounds discovery
// only. Errors name the Confidant setting at fault.
func NewOIDC(ctx context.Context, cfg OIDCConfig, logger *zap.Logger) (*OIDC, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	issuer := cfg.IssuerURL
	if issuer == "" {
		issuer = defaultIssuerURL
	}
	if _, err := parseAbsoluteURL(issuer); err != nil {
		return nil, fmt.Errorf("userauth: OIDC_ISSUER_URL %q: %w", issuer, err)
	}
	if cfg.ClientID == "" {
		return nil, errors.New("userauth: GOOGLE_OAUTH_CLIENT_ID is required")
	}
	if cfg.ClientSecret == "" {
		return nil, errors.New("userauth: GOOGLE_OAUTH_CONSUMER_SECRET is required")
	}
	redirectURL, err := parseAbsoluteURL(cfg.RedirectURL)
	if err != nil {
		return nil, fmt.Errorf("userauth: OIDC redirect URL %q: %w", cfg.RedirectURL, err)
	}
	signer, err := newCookieSigner(cfg.CookieSecret)
	if err != nil {
		return nil, fmt.Errorf("userauth: OIDC state cookie: %w", err)
	}
	scopes := cfg.Scopes
	if len(scopes) == 0 {
		scopes = []string{oidc.ScopeOpenID, "email", "profile"}
	}
	hasOpenID := false
	for _, s := range scopes {
		hasOpenID = hasOpenID || s == oidc.ScopeOpenID
	}
	if !hasOpenID {
		// Without it the provider returns no ID token and every login would fail obscurely.
		return nil, fmt.Errorf("userauth: OIDC scopes %q must include %q", scopes, oidc.ScopeOpenID)
	}
	domain := strings.ToLower(strings.TrimSpace(cfg.EmailSuffix))
	if domain != "" && !strings.HasPrefix(domain, "@") {
		// Anchor the suffix at the '@' so "example.com" does not admit "alice@evilexample.com".
		domain = "@" + domain
	}

	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: defaultOIDCTimeout}
	}
	provider, err := oidc.NewProvider(oidc.ClientContext(ctx, client), issuer)
	if err != nil {
		return nil, fmt.Errorf("userauth: OIDC_ISSUER_URL %q: discovery: %w", issuer, err)
	}

	cookiePath := redirectURL.Path
	if cookiePath == "" {
		cookiePath = "/"
	}
	o := &OIDC{
		oauth: oauth2.Config{
			ClientID:     cfg.ClientID,
			ClientSecret: cfg.ClientSecret,
			Endpoint:     provider.Endpoint(),
			RedirectURL:  redirectURL.String(),
			Scopes:       scopes,
		},
		verifier:     provider.Verifier(&oidc.Config{ClientID: cfg.ClientID}),
		client:       client,
		emailDomain:  domain,
		cookies:      signer,
		cookiePath:   cookiePath,
		cookieSecure: cfg.CookieSecure,
		logger:       logger,
		rejections:   logging.NewSampler(logger, 0, 0),
		now:          time.Now,
	}
	logger.Info("oidc login configured",
		zap.String("issuer", issuer),
		zap.String("redirect_url", o.oauth.RedirectURL),
		zap.Strings("scopes", scopes),
		zap.String("email_domain", domain))
	return o, nil
}

// oidcState is what the state cookie binds to the browser. None of it is secret from the browser
// itself; the signature only stops it from being forged or swapped.
type oidcState struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
}

// Login serves Confidant's /v1/login for both steps of the authorization code flow; it is
// LoginContext with a background context bounded by a default timeout.
func (o *OIDC) Login(req Request) (*Response, *User, error) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultOIDCTimeout)
	defer cancel()
	return o.LoginContext(ctx, req)
}

// LoginContext serves both steps of the authorization code flow on one route. Without "code" in
// the query it returns a 302 to the provider and a state cookie (resp, nil, nil). With
// "code"+"state" it checks the state cookie, exchanges the code, verifies the ID token and
// returns the user together with a Response whose only content is the cookie that clears the
// state (Status 0); the caller then starts its session and redirects. Every rejection wraps
// ErrNotAuthenticated; other errors are server or provider faults.
func (o *OIDC) LoginContext(ctx context.Context, req Request) (*Response, *User, error) {
	if code := req.Query.Get("error"); code != "" {
		return nil, nil, o.reject("provider returned error "+sanitizeErrorCode(code), nil)
	}
	code := req.Query.Get("code")
	if code == "" {
		resp, err := o.start()
		return resp, nil, err
	}
	user, err := o.finish(ctx, req, code)
	if err != nil {
		return nil, nil, err
	}
	return &Response{SetCookies: []*http.Cookie{expiredCookie(OIDCStateCookie, o.cookiePath, o.cookieSecure, http.SameSiteLaxMode)}}, user, nil
}

func (o *OIDC) start() (*Response, error) {
	now := o.now()
	st := oidcState{Verifier: oauth2.GenerateVerifier()}
	var err error
	if st.State, err = randomToken(); err != nil {
		return nil, err
	}
	if st.Nonce, err = randomToken(); err != nil {
		return nil, err
	}
	value, err := o.cookies.seal(OIDCStateCookie, st, now.Add(oidcStateTTL))
	if err != nil {
		return nil, fmt.Errorf("userauth: oidc: seal state cookie: %w", err)
	}
	loc := o.oauth.AuthCodeURL(st.State, oidc.Nonce(st.Nonce), oauth2.S256ChallengeOption(st.Verifier))
	return &Response{
		Status:   http.StatusFound,
		Location: loc,
		// Lax suffices: the provider returns the browser with a top-level GET navigation.
		SetCookies: []*http.Cookie{flowCookie(OIDCStateCookie, value, o.cookiePath, oidcStateTTL, o.cookieSecure, http.SameSiteLaxMode)},
	}, nil
}

func (o *OIDC) finish(ctx context.Context, req Request, code string) (*User, error) {
	var st oidcState
	if err := o.cookies.open(OIDCStateCookie, req.Cookies[OIDCStateCookie], o.now(), &st); err != nil {
		return nil, o.reject("no login in progress in this browser", err)
	}
	state := req.Query.Get("state")
	if state == "" || subtle.ConstantTimeCompare([]byte(state), []byte(st.State)) != 1 {
		return nil, o.reject("state mismatch", nil)
	}

	ctx = context.WithValue(ctx, oauth2.HTTPClient, o.client)
	tok, err := o.oauth.Exchange(ctx, code, oauth2.VerifierOption(st.Verifier))
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.Response != nil && re.Response.StatusCode >= 400 && re.Response.StatusCode < 500 {
			// The provider refused the code (reused, expired, forged, wrong verifier): the
			// browser's fault. Only the RFC 6749 error code is reported, never the body.
			return nil, o.reject("code exchange refused: "+sanitizeErrorCode(re.ErrorCode), nil)
		}
		return nil, fmt.Errorf("userauth: oidc: code exchange: %w", scrubExchangeError(err))
	}
	rawID, ok := tok.Extra("id_token").(string)
	if !ok || rawID == "" {
		return nil, o.reject("token response has no id_token", nil)
	}
	idTok, err := o.verifier.Verify(ctx, rawID)
	if err != nil {
		return nil, o.reject("id_token rejected", err)
	}
	if idTok.Nonce == "" || subtle.ConstantTimeCompare([]byte(idTok.Nonce), []byte(st.Nonce)) != 1 {
		return nil, o.reject("id_token nonce mismatch", nil)
	}
	if idTok.AccessTokenHash != "" {
		if err := idTok.VerifyAccessToken(tok.AccessToken); err != nil {
			return nil, o.reject("id_token at_hash mismatch", nil)
		}
	}

	var claims struct {
		Email         string    `json:"email"`
		EmailVerified *flexBool `json:"email_verified"`
		GivenName     string    `json:"given_name"`
		FamilyName    string    `json:"family_name"`
	}
	if err := idTok.Claims(&claims); err != nil {
		return nil, o.reject("id_token claims malformed", err)
	}
	email := strings.TrimSpace(claims.Email)
	if email == "" {
		return nil, o.reject("id_token carries no email (is the email scope granted?)", nil)
	}
	// Providers that omit the claim vouch for the address by policy; one that says false has not
	// verified it, and an unverified address must not become an identity.
	if claims.EmailVerified != nil && !bool(*claims.EmailVerified) {
		return nil, o.reject("email address not verified by the provider", nil)
	}
	if o.emailDomain != "" && !strings.HasSuffix(strings.ToLower(email), o.emailDomain) {
		return nil, o.reject("email outside the allowed domain", nil)
	}
	o.logger.Info("oidc login succeeded", zap.String("email", email))
	return &User{Email: email, FirstName: claims.GivenName, LastName: claims.FamilyName}, nil
}

func (o *OIDC) reject(reason string, detail error) error {
	fields := []zap.Field{zap.String("reason", reason)}
	if detail != nil {
		fields = append(fields, logging.Untrusted("detail", detail.Error()))
	}
	// Anyone can post a forged login: rejections are sampled, and their detail (which may quote
	// what was posted) cut.
	o.rejections.Info("oidc.login_rejected", "oidc login rejected", fields...)
	if detail != nil {
		return fmt.Errorf("%w: oidc: %s: %v", ErrNotAuthenticated, reason, detail)
	}
	return fmt.Errorf("%w: oidc: %s", ErrNotAuthenticated, reason)
}

// scrubExchangeError drops the response body oauth2 attaches to token endpoint failures, which may
// echo credentials or tokens, keeping only the status and error code.
func scrubExchangeError(err error) error {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) {
		return err
	}
	status := 0
	if re.Response != nil {
		status = re.Response.StatusCode
	}
	return fmt.Errorf("token endpoint status %d, error %s", status, sanitizeErrorCode(re.ErrorCode))
}

// sanitizeErrorCode keeps an OAuth error code printable and short: it comes from the query string
// or the provider and ends up in logs and error messages.
func sanitizeErrorCode(code string) string {
	var b strings.Builder
	for _, r := range code {
		if b.Len() >= 64 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.' {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "(unspecified)"
	}
	return b.String()
}

// flexBool accepts true/false and, as Google has historically sent for email_verified, the
// strings "true"/"false".
type flexBool bool

func (b *flexBool) UnmarshalJSON(d []byte) error {
	switch string(d) {
	case "true", `"true"`:
		*b = true
	case "false", `"false"`:
		*b = false
	default:
		return fmt.Errorf("invalid boolean %s", d)
	}
	return nil
}

func randomToken() (string, error) {
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("userauth: random: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(buf), nil
}
