package e2e

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/gantry-dev/gantry/internal/stack"
)

// oidcProvider is a minimal OpenID provider: discovery, keys and a token endpoint that hands out an
// RS256 ID token for a code the test registered while "being the user".
type oidcProvider struct {
	srv   *httptest.Server
	key   *rsa.PrivateKey
	mu    sync.Mutex
	codes map[string]map[string]any
}

func newOIDCProvider(t *testing.T) *oidcProvider {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	op := &oidcProvider{key: key, codes: map[string]map[string]any{}}
	mux := http.NewServeMux()
	write := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		write(w, map[string]any{
			"issuer": op.srv.URL, "authorization_endpoint": op.srv.URL + "/authorize", "token_endpoint": op.srv.URL + "/token",
			"jwks_uri": op.srv.URL + "/jwks", "response_types_supported": []string{"code"},
			"subject_types_supported": []string{"public"}, "id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, _ *http.Request) {
		write(w, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "op-key", Algorithm: "RS256", Use: "sig"}}})
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		op.mu.Lock()
		claims, ok := op.codes[r.PostForm.Get("code")]
		delete(op.codes, r.PostForm.Get("code"))
		op.mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusBadRequest)
			write(w, map[string]string{"error": "invalid_grant"})
			return
		}
		signer, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: "op-key"}}, (&jose.SignerOptions{}).WithType("JWT"))
		payload, _ := json.Marshal(claims)
		obj, _ := signer.Sign(payload)
		token, _ := obj.CompactSerialize()
		write(w, map[string]any{"access_token": "at", "token_type": "Bearer", "expires_in": 3600, "id_token": token})
	})
	op.srv = httptest.NewServer(mux)
	t.Cleanup(op.srv.Close)
	return op
}

// authorize plays the user at the provider: it accepts the login for email and returns the code.
func (op *oidcProvider) authorize(t *testing.T, authURL, email string) (code, state string) {
	t.Helper()
	u, err := url.Parse(authURL)
	if err != nil || !strings.HasPrefix(authURL, op.srv.URL+"/authorize") {
		t.Fatalf("redirect %q does not go to the provider", authURL)
	}
	q := u.Query()
	now := time.Now()
	op.mu.Lock()
	defer op.mu.Unlock()
	code = "code-" + email
	op.codes[code] = map[string]any{
		"iss": op.srv.URL, "aud": q.Get("client_id"), "sub": email, "email": email, "email_verified": true,
		"nonce": q.Get("nonce"), "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	}
	return code, q.Get("state")
}

func cookiesOf(r response) map[string]*http.Cookie {
	out := map[string]*http.Cookie{}
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		out[c.Name] = c
	}
	return out
}

func cookieHeader(cookies ...*http.Cookie) string {
	var parts []string
	for _, c := range cookies {
		if c != nil {
			parts = append(parts, c.Name+"="+c.Value)
		}
	}
	return strings.Join(parts, "; ")
}

// TestOIDCLoginSessionAndXSRF logs a browser in through the gateway with the OIDC code flow, then
// uses the session: reads work, writes need the XSRF token, forged or missing sessions get 401.
func TestOIDCLoginSessionAndXSRF(t *testing.T) {
	op := newOIDCProvider(t)
	s := startStack(t, func(c *stack.Config) {
		c.Secrets.Auth.UserAuthModule = "oidc"
		c.Secrets.Auth.OIDCIssuerURL = op.srv.URL
		c.Secrets.Auth.OIDCClientID = "gantry-client"
		c.Secrets.Auth.OIDCClientSecret = "gantry-secret"
		c.Secrets.Auth.SAMLURLRoot = "http://gantry.example"
	})
	browser := func(cookie string, extra ...string) http.Header {
		h := http.Header{"Authorization": {""}, "Content-Type": {"application/json"}}
		if cookie != "" {
			h.Set("Cookie", cookie)
		}
		for i := 0; i+1 < len(extra); i += 2 {
			h.Set(extra[i], extra[i+1])
		}
		return h
	}

	start := s.do("GET", s.rest+"/v1/login", "", browser(""))
	if start.code != http.StatusFound {
		t.Fatalf("login start: %d %s", start.code, start.body)
	}
	stateCookie := cookiesOf(start)["gantry_oidc_state"]
	if stateCookie == nil {
		t.Fatalf("no state cookie: %v", start.header)
	}
	code, _ := op.authorize(t, start.header.Get("Location"), "carol@example.com")
	if r := s.do("GET", s.rest+"/v1/login?code="+code+"&state=wrong", "", browser(cookieHeader(stateCookie))); r.code != 401 {
		t.Errorf("wrong state: %d %s, want 401", r.code, r.body)
	}
	code, state := op.authorize(t, start.header.Get("Location"), "carol@example.com")
	done := s.do("GET", s.rest+"/v1/login?code="+url.QueryEscape(code)+"&state="+url.QueryEscape(state), "", browser(cookieHeader(stateCookie)))
	if done.code != http.StatusFound || done.header.Get("Location") != "/" {
		t.Fatalf("login finish: %d %v %s", done.code, done.header, done.body)
	}
	got := cookiesOf(done)
	session, xsrf := got["confidant_session"], got["XSRF-TOKEN"]
	if session == nil || xsrf == nil || !session.HttpOnly || xsrf.HttpOnly {
		t.Fatalf("session/XSRF cookies wrong: %v", done.header["Set-Cookie"])
	}

	if email := s.do("GET", s.rest+"/v1/user/email", "", browser(cookieHeader(session))).must(t, 200)["email"]; email != "carol@example.com" {
		t.Errorf("email %v", email)
	}
	body := `{"name":"oidc-made","credential_pairs":{"k":"v"},"documentation":"d"}`
	if r := s.do("POST", s.rest+"/v1/credentials", body, browser(cookieHeader(session))); r.code != 401 {
		t.Errorf("session write without XSRF: %d, want 401", r.code)
	}
	created := s.do("POST", s.rest+"/v1/credentials", body, browser(cookieHeader(session, xsrf), "X-XSRF-TOKEN", xsrf.Value)).must(t, 200)
	if created["modified_by"] != "carol@example.com" {
		t.Errorf("modified_by %v", created["modified_by"])
	}
	forged := &http.Cookie{Name: "confidant_session", Value: strings.Replace(session.Value, ".", "x.", 1)}
	if r := s.do("GET", s.rest+"/v1/credentials", "", browser(cookieHeader(forged))); r.code != 401 {
		t.Errorf("forged session: %d, want 401", r.code)
	}
	if r := s.do("GET", s.rest+"/v1/credentials", "", browser("")); r.code != 401 {
		t.Errorf("no session: %d, want 401", r.code)
	}
}

func selfSigned(t *testing.T, cn string) (certPEM, keyPEM string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
}

// TestSAMLRoutes checks the SAML service-provider routes through the gateway (the full assertion
// round trip against a real identity provider is tested in package userauth).
func TestSAMLRoutes(t *testing.T) {
	spCert, spKey := selfSigned(t, "gantry-sp")
	idpCert, _ := selfSigned(t, "idp")
	s := startStack(t, func(c *stack.Config) {
		a := &c.Secrets.Auth
		a.UserAuthModule = "saml"
		a.SAMLURLRoot = "https://gantry.example"
		a.SAMLSPCert, a.SAMLSPKey, a.SAMLIdPCert = spCert, spKey, idpCert
		a.SAMLIdPEntityID = "https://idp.example/metadata"
		a.SAMLIdPSSOURL = "https://idp.example/sso"
	})
	anon := http.Header{"Authorization": {""}}
	meta := s.do("GET", s.rest+"/v1/saml/metadata", "", anon)
	if meta.code != 200 || !strings.Contains(meta.header.Get("Content-Type"), "xml") ||
		!strings.Contains(string(meta.body), "https://gantry.example/v1/saml/consume") ||
		!strings.Contains(string(meta.body), `entityID="https://gantry.example/v1/saml/metadata"`) {
		t.Errorf("metadata: %d %q %.300s", meta.code, meta.header.Get("Content-Type"), meta.body)
	}
	if r := s.do("GET", s.rest+"/v1/login", "", anon); r.code != http.StatusFound || r.header.Get("Location") != "/v1/saml/login" {
		t.Errorf("/v1/login: %d %v", r.code, r.header)
	}
	login := s.do("GET", s.rest+"/v1/saml/login", "", anon)
	if login.code != http.StatusFound || !strings.HasPrefix(login.header.Get("Location"), "https://idp.example/sso?SAMLRequest=") ||
		cookiesOf(login)["gantry_saml_request"] == nil {
		t.Errorf("saml login: %d %v", login.code, login.header)
	}
	form := http.Header{"Authorization": {""}, "Content-Type": {"application/x-www-form-urlencoded"}}
	for _, body := range []string{"SAMLResponse=PHNhbWxwOlJlc3BvbnNlLz4%3D&RelayState=%2F", "SAMLResponse=%%%", ""} {
		r := s.do("POST", s.rest+"/v1/saml/consume", body, form)
		if r.code != 401 && r.code != 400 {
			t.Errorf("consume %q: %d %s, want 401/400", body, r.code, r.body)
		}
		if msg, _ := r.json(t)["error"].(string); msg == "" {
			t.Errorf("consume %q: no JSON error", body)
		}
	}
	if r := s.do("GET", s.rest+"/v1/saml/debug", "", anon); r.code != 401 {
		t.Errorf("debug without a session: %d, want 401", r.code)
	}
	if r := s.do("GET", s.rest+"/v1/credentials", "", anon); r.code != 401 {
		t.Errorf("no session: %d", r.code)
	}
}
