package userauth

import (
	"context"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/gantry-dev/gantry/pkg/logging/logtest"
)

const (
	testClientID     = "gantry-secrets.apps.example.com"
	testClientSecret = "s3cr3t-client"
	testRedirectURL  = "https://secrets.example.com/v1/login"
	testKeyID        = "op-key-1"
)

// testOP is an in-test OpenID provider: discovery, JWKS and a token endpoint that enforces the
// client credentials, redirect URI, single-use codes and PKCE, and signs RS256 ID tokens.
type testOP struct {
	t   *testing.T
	srv *httptest.Server

	mu     sync.Mutex
	grants map[string]opGrant
}

// opGrant is what the provider remembers about an authorization code.
type opGrant struct {
	challenge string
	claims    map[string]any
	key       *rsa.PrivateKey
}

func newTestOP(t *testing.T) *testOP {
	op := &testOP{t: t, grants: map[string]opGrant{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{
			"issuer":                                op.srv.URL,
			"authorization_endpoint":                op.srv.URL + "/authorize",
			"token_endpoint":                        op.srv.URL + "/token",
			"jwks_uri":                              op.srv.URL + "/jwks",
			"response_types_supported":              []string{"code"},
			"subject_types_supported":               []string{"public"},
			"id_token_signing_alg_values_supported": []string{"RS256"},
			"code_challenge_methods_supported":      []string{"S256"},
		})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{
			Key: &keyPair(t, "op").key.PublicKey, KeyID: testKeyID, Algorithm: string(jose.RS256), Use: "sig",
		}}})
	})
	mux.HandleFunc("/authorize", func(w http.ResponseWriter, _ *http.Request) {
		// The browser would go here; the test plays the user and calls grant instead.
		t.Errorf("authorize endpoint called by the relying party")
		w.WriteHeader(http.StatusBadRequest)
	})
	mux.HandleFunc("POST /token", op.token)
	op.srv = httptest.NewServer(mux)
	t.Cleanup(op.srv.Close)
	return op
}

func (op *testOP) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_request"})
		return
	}
	id, secret, ok := r.BasicAuth()
	if ok {
		// RFC 6749 §2.3.1: credentials are form-encoded before Basic encoding.
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
	} else {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if id != testClientID || secret != testClientSecret {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client"})
		return
	}
	if r.PostForm.Get("grant_type") != "authorization_code" || r.PostForm.Get("redirect_uri") != testRedirectURL {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_request"})
		return
	}
	op.mu.Lock()
	g, ok := op.grants[r.PostForm.Get("code")]
	delete(op.grants, r.PostForm.Get("code")) // codes are single use
	op.mu.Unlock()
	if !ok {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant"})
		return
	}
	sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
	if base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant"})
		return
	}
	idToken, err := signRS256(g.key, g.claims)
	if err != nil {
		op.t.Errorf("sign id_token: %v", err)
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"access_token": "at-" + r.PostForm.Get("code"),
		"token_type":   "Bearer",
		"expires_in":   3600,
		"id_token":     idToken,
	})
}

func signRS256(key *rsa.PrivateKey, claims map[string]any) (string, error) {
	signer, err := jose.NewSigner(
		jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: testKeyID}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return "", err
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	obj, err := signer.Sign(payload)
	if err != nil {
		return "", err
	}
	return obj.CompactSerialize()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// authorize plays the user at the provider: it checks the authorization request the relying
// party redirected to and issues a code bound to its nonce and PKCE challenge, with claims
// shaped by mutate and signed by key.
func (op *testOP) authorize(t *testing.T, location string, key *rsa.PrivateKey, mutate func(map[string]any)) (code, state string) {
	t.Helper()
	u, err := url.Parse(location)
	if err != nil {
		t.Fatalf("Location: %v", err)
	}
	if got := u.Scheme + "://" + u.Host + u.Path; got != op.srv.URL+"/authorize" {
		t.Fatalf("redirected to %q, want the provider's authorization endpoint", got)
	}
	q := u.Query()
	for k, want := range map[string]string{
		"client_id":             testClientID,
		"redirect_uri":          testRedirectURL,
		"response_type":         "code",
		"scope":                 "openid email profile",
		"code_challenge_method": "S256",
	} {
		if got := q.Get(k); got != want {
			t.Errorf("authorization request %s = %q, want %q", k, got, want)
		}
	}
	state, nonce, challenge := q.Get("state"), q.Get("nonce"), q.Get("code_challenge")
	if len(state) < 32 || len(nonce) < 32 || challenge == "" {
		t.Fatalf("state %q / nonce %q / challenge %q missing or short", state, nonce, challenge)
	}
	now := time.Now()
	claims := map[string]any{
		"iss":            op.srv.URL,
		"aud":            testClientID,
		"sub":            "1234567890",
		"iat":            now.Unix(),
		"exp":            now.Add(5 * time.Minute).Unix(),
		"nonce":          nonce,
		"email":          "alice@example.com",
		"email_verified": true,
		"given_name":     "Alice",
		"family_name":    "Liddell",
	}
	if mutate != nil {
		mutate(claims)
	}
	op.mu.Lock()
	defer op.mu.Unlock()
	code = fmt.Sprintf("code-%d", len(op.grants)+1)
	for op.grants[code].challenge != "" {
		code += "x"
	}
	op.grants[code] = opGrant{challenge: challenge, claims: claims, key: key}
	return code, state
}

func newTestOIDC(t *testing.T, op *testOP, mod func(*OIDCConfig)) *OIDC {
	t.Helper()
	cfg := OIDCConfig{
		IssuerURL:    op.srv.URL,
		ClientID:     testClientID,
		ClientSecret: testClientSecret,
		RedirectURL:  testRedirectURL,
		CookieSecret: testCookieSecret,
		CookieSecure: true,
		HTTPClient:   op.srv.Client(),
	}
	if mod != nil {
		mod(&cfg)
	}
	o, err := NewOIDC(context.Background(), cfg, logtest.New(t))
	if err != nil {
		t.Fatalf("NewOIDC: %v", err)
	}
	return o
}

func TestOIDCLogin(t *testing.T) {
	alice := User{Email: "alice@example.com", FirstName: "Alice", LastName: "Liddell"}
	op := newTestOP(t)
	tests := []struct {
		name     string
		cfg      func(*OIDCConfig)
		signer   string // key role signing the id_token; default "op"
		claims   func(map[string]any)
		callback func(t *testing.T, o *OIDC, q url.Values, cookies map[string]string)
		reason   string // empty: login succeeds
		want     User
	}{
		{name: "success", want: alice},
		{
			name:   "email_verified as a string, as Google has sent it",
			claims: func(c map[string]any) { c["email_verified"] = "true" },
			want:   alice,
		},
		{
			name:   "email_verified absent",
			claims: func(c map[string]any) { delete(c, "email_verified") },
			want:   alice,
		},
		{
			name: "email inside the allowed domain",
			cfg:  func(c *OIDCConfig) { c.EmailSuffix = "Example.com" },
			want: alice,
		},
		{
			name:   "email_verified false",
			claims: func(c map[string]any) { c["email_verified"] = false },
			reason: "not verified",
		},
		{
			name:   "email outside the allowed domain",
			cfg:    func(c *OIDCConfig) { c.EmailSuffix = "example.com" },
			claims: func(c map[string]any) { c["email"] = "mallory@evilexample.com" },
			reason: "domain",
		},
		{
			name:   "no email claim",
			claims: func(c map[string]any) { delete(c, "email") },
			reason: "no email",
		},
		{
			name:   "nonce mismatch",
			claims: func(c map[string]any) { c["nonce"] = "nonce-from-another-login-0000000000000" },
			reason: "nonce",
		},
		{
			name:   "id_token signed by another key",
			signer: "other-op",
			reason: "signature",
		},
		{
			name:   "expired id_token",
			claims: func(c map[string]any) { c["exp"] = time.Now().Add(-time.Minute).Unix() },
			reason: "expired",
		},
		{
			name:   "id_token for another client",
			claims: func(c map[string]any) { c["aud"] = "someone-else" },
			reason: "audience",
		},
		{
			name:   "id_token from another issuer",
			claims: func(c map[string]any) { c["iss"] = "https://evil.example" },
			reason: "issued by a different provider",
		},
		{
			name: "wrong state",
			callback: func(_ *testing.T, _ *OIDC, q url.Values, _ map[string]string) {
				q.Set("state", "attacker-state")
			},
			reason: "state mismatch",
		},
		{
			name: "missing state cookie",
			callback: func(_ *testing.T, _ *OIDC, _ url.Values, c map[string]string) {
				delete(c, OIDCStateCookie)
			},
			reason: "no login in progress",
		},
		{
			name: "tampered state cookie",
			callback: func(_ *testing.T, _ *OIDC, _ url.Values, c map[string]string) {
				v := []byte(c[OIDCStateCookie])
				v[5] ^= 0x01
				c[OIDCStateCookie] = string(v)
			},
			reason: "no login in progress",
		},
		{
			name: "state cookie of another login in the same browser",
			callback: func(t *testing.T, o *OIDC, _ url.Values, c map[string]string) {
				resp, _, err := o.Login(Request{Method: http.MethodGet, Path: "/v1/login"})
				if err != nil {
					t.Fatal(err)
				}
				c[OIDCStateCookie] = resp.SetCookies[0].Value
			},
			reason: "state mismatch",
		},
		{
			name: "expired state cookie",
			callback: func(_ *testing.T, o *OIDC, _ url.Values, _ map[string]string) {
				o.now = func() time.Time { return time.Now().Add(oidcStateTTL + time.Second) }
			},
			reason: "no login in progress",
		},
		{
			name: "unknown code",
			callback: func(_ *testing.T, _ *OIDC, q url.Values, _ map[string]string) {
				q.Set("code", "code-never-issued")
			},
			reason: "invalid_grant",
		},
		{
			name: "provider reports an error",
			callback: func(_ *testing.T, _ *OIDC, q url.Values, _ map[string]string) {
				q.Del("code")
				q.Set("error", "access_denied")
			},
			reason: "access_denied",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := newTestOIDC(t, op, tc.cfg)
			start, user, err := o.Login(Request{Method: http.MethodGet, Path: "/v1/login"})
			if err != nil || user != nil {
				t.Fatalf("first Login = %v, %v; want a redirect", user, err)
			}
			if start.Status != http.StatusFound || len(start.SetCookies) != 1 {
				t.Fatalf("first Login = %+v, want 302 with one cookie", start)
			}
			c := start.SetCookies[0]
			if c.Name != OIDCStateCookie || !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteLaxMode || c.Path != "/v1/login" || c.MaxAge != int(oidcStateTTL/time.Second) {
				t.Errorf("state cookie = %+v", c)
			}

			role := tc.signer
			if role == "" {
				role = "op"
			}
			code, state := op.authorize(t, start.Location, keyPair(t, role).key, tc.claims)
			q := url.Values{"code": {code}, "state": {state}}
			cookies := map[string]string{OIDCStateCookie: c.Value}
			if tc.callback != nil {
				tc.callback(t, o, q, cookies)
			}
			resp, user, err := o.Login(Request{Method: http.MethodGet, Path: "/v1/login", Query: q, Cookies: cookies})
			if tc.reason != "" {
				wantNotAuthenticated(t, err, tc.reason)
				if user != nil {
					t.Errorf("user %+v returned alongside an error", user)
				}
				return
			}
			if err != nil {
				t.Fatalf("callback Login: %v", err)
			}
			if user == nil || *user != tc.want {
				t.Fatalf("user = %+v, want %+v", user, tc.want)
			}
			if resp == nil || resp.Status != 0 || resp.Location != "" || len(resp.SetCookies) != 1 {
				t.Fatalf("success response = %+v, want only the state-clearing cookie", resp)
			}
			if clr := resp.SetCookies[0]; clr.Name != OIDCStateCookie || clr.MaxAge != -1 || clr.Path != c.Path {
				t.Errorf("clearing cookie = %+v", clr)
			}

			// The provider consumed the code: replaying the callback must not log in again.
			_, again, err := o.Login(Request{Method: http.MethodGet, Path: "/v1/login", Query: q, Cookies: cookies})
			if again != nil {
				t.Errorf("replayed callback authenticated %+v", again)
			}
			wantNotAuthenticated(t, err, "invalid_grant")
		})
	}
}

func TestNewOIDCValidation(t *testing.T) {
	op := newTestOP(t)
	broken := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(broken.Close)
	tests := []struct {
		name string
		mod  func(*OIDCConfig)
		want string
	}{
		{"missing client ID", func(c *OIDCConfig) { c.ClientID = "" }, "GOOGLE_OAUTH_CLIENT_ID"},
		{"missing client secret", func(c *OIDCConfig) { c.ClientSecret = "" }, "GOOGLE_OAUTH_CONSUMER_SECRET"},
		{"issuer not a URL", func(c *OIDCConfig) { c.IssuerURL = "accounts.example.com" }, "OIDC_ISSUER_URL"},
		{"discovery fails", func(c *OIDCConfig) { c.IssuerURL = broken.URL }, "OIDC_ISSUER_URL"},
		{"relative redirect URL", func(c *OIDCConfig) { c.RedirectURL = "/v1/login" }, "redirect URL"},
		{"short cookie secret", func(c *OIDCConfig) { c.CookieSecret = []byte("short") }, "cookie secret"},
		{"scopes without openid", func(c *OIDCConfig) { c.Scopes = []string{"email"} }, "openid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := OIDCConfig{
				IssuerURL:    op.srv.URL,
				ClientID:     testClientID,
				ClientSecret: testClientSecret,
				RedirectURL:  testRedirectURL,
				CookieSecret: testCookieSecret,
				HTTPClient:   op.srv.Client(),
			}
			tc.mod(&cfg)
			_, err := NewOIDC(context.Background(), cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewOIDC error = %v, want mention of %s", err, tc.want)
			}
		})
	}
}

func TestCookieSigner(t *testing.T) {
	s, err := newCookieSigner(testCookieSecret)
	if err != nil {
		t.Fatal(err)
	}
	other, err := newCookieSigner([]byte("another-secret-that-is-32-bytes-long"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	good, err := s.seal("a", oidcState{State: "st"}, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		signer  cookieSigner
		cookie  string
		value   string
		at      time.Time
		wantErr error
	}{
		{"round trip", s, "a", good, now, nil},
		{"other cookie name", s, "b", good, now, errCookieInvalid},
		{"other key", other, "a", good, now, errCookieInvalid},
		{"expired", s, "a", good, now.Add(time.Minute), errCookieExpired},
		{"empty", s, "a", "", now, errCookieMissing},
		{"no separator", s, "a", strings.ReplaceAll(good, ".", ""), now, errCookieInvalid},
		{"payload swapped", s, "a", "e30" + good[strings.Index(good, "."):], now, errCookieInvalid},
		{"oversized", s, "a", strings.Repeat("A", maxCookieLen+1), now, errCookieInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got oidcState
			err := tc.signer.open(tc.cookie, tc.value, tc.at, &got)
			if err != tc.wantErr {
				t.Fatalf("open error = %v, want %v", err, tc.wantErr)
			}
			if err == nil && got.State != "st" {
				t.Errorf("payload = %+v", got)
			}
		})
	}
}
