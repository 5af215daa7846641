package e2e

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/ca"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kmsauth"
	"github.com/gantry-dev/gantry/pkg/workload/workloadtest"
)

// route is one REST call of the matrix; body is sent as JSON.
type route struct {
	method, path string
	body         any
}

// rawToken mints a token with a chosen key and start time, for the expired and wrong-key rows.
func (s *testStack) rawBasic(from, userType, key string, at time.Time) string {
	s.t.Helper()
	ring, err := kms.OpenKeyring(filepath.Join(s.cfg.DataDir, "keyring.json"), nil)
	if err != nil {
		s.t.Fatal(err)
	}
	u := kmsauth.Username{Version: 2, UserType: userType, From: from}
	tok, err := kmsauth.Generate(context.Background(), ring, key, u, "gantry", 10*time.Minute, at)
	if err != nil {
		s.t.Fatal(err)
	}
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(u.String()+":"+tok))
}

func basicHeader(userpass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(userpass))
}

// TestAuthorizationMatrix sends every secrets route as every kind of caller. Denials must be exactly
// 401 (no or invalid credentials) or 403 (refused), always as JSON; allowed calls must not be refused
// and never fail with 5xx.
//
// Each authentication method is a column: kmsauth tokens, workload client certificates presented on
// the REST listener's TLS handshake (the stack serves HTTPS for them), Kubernetes service-account
// tokens and OIDC/JWT workload tokens (Bearer).
func TestAuthorizationMatrix(t *testing.T) {
	ws := startWorkloadStack(t)
	s := ws.testStack
	cred := s.createCredential("db", map[string]any{"password": "p"})
	s.call("PUT", "/v1/services/api", map[string]any{"credentials": []string{cred}}).must(t, 200)
	s.call("PUT", "/v1/services/other", map[string]any{}).must(t, 200) // creating a service grants it
	s.call("PUT", "/v1/credentials/"+cred, map[string]any{"credential_pairs": map[string]any{"password": "q"}}).must(t, 200)

	routes := []route{
		{"GET", "/v1/credentials", nil},
		{"POST", "/v1/credentials", map[string]any{"name": "matrix-%s", "credential_pairs": map[string]any{"k": "v"}, "documentation": "d"}},
		{"GET", "/v1/credentials/" + cred, nil},
		{"GET", "/v1/credentials/" + cred + "?metadata_only=True", nil},
		{"PUT", "/v1/credentials/" + cred, map[string]any{"enabled": true}},
		{"PUT", "/v1/credentials/" + cred + "/1", nil},
		{"GET", "/v1/credentials/" + cred + "/1/2", nil},
		{"GET", "/v1/credentials/" + cred + "/services", nil},
		{"POST", "/v1/credentials/" + cred + "/archive", nil},
		{"GET", "/v1/archive/credentials", nil},
		{"GET", "/v1/archive/credentials/" + cred, nil},
		{"GET", "/v1/archived_credentials", nil},
		{"GET", "/v1/services", nil},
		{"GET", "/v1/services/api", nil},
		{"GET", "/v1/services/api?metadata_only=False", nil},
		{"GET", "/v1/services/api?metadata_only=True", nil},
		{"PUT", "/v1/services/api", map[string]any{"id": "api", "credentials": []string{cred}, "account": nil, "enabled": true}},
		{"PUT", "/v1/services/api/1", nil},
		{"GET", "/v1/services/api/1/2", nil},
		{"GET", "/v1/archive/services", nil},
		{"GET", "/v1/archive/services/api", nil},
		{"GET", "/v1/value_generator", nil},
		{"GET", "/v1/client_config", nil},
		{"GET", "/v1/user/email", nil},
		{"POST", "/v1/user/email", nil},
		{"GET", "/v1/whoami", nil},
		{"GET", "/v1/grants/api", nil},
		{"PUT", "/v1/grants/api", nil},
		{"GET", "/v1/roles", nil},
		{"GET", "/v1/jwks/public/development", nil},
		{"GET", "/v1/jwks/token?environment=development", nil},
		{"GET", "/v1/jwks/token/api?environment=development", nil},
		{"GET", "/v1/cas", nil},
		{"GET", "/v1/cas/development", nil},
		{"GET", "/v1/certificates/development/api.example.com", nil},
		{"POST", "/v1/certificates/development", map[string]any{"csr": matrixCSR(t)}},
	}
	// Certificates and CAs are for services only under the default rules (Confidant's default ACL);
	// no CA name pattern is configured here, so no service gets a certificate either.
	userRefused := func(r route) bool {
		return strings.HasPrefix(r.path, "/v1/cas") || strings.HasPrefix(r.path, "/v1/certificates")
	}
	// What a service may do under the default rules: read its own service (its history and diffs are
	// service metadata too), and the identity routes.
	serviceMay := map[string]bool{
		"GET /v1/services/api/1/2": true, "GET /v1/archive/services/api": true, "GET /v1/grants/api": true,
		"GET /v1/jwks/public/development": true,
		"GET /v1/services/api":            true, "GET /v1/services/api?metadata_only=False": true, "GET /v1/services/api?metadata_only=True": true,
		"GET /v1/value_generator": true, "GET /v1/client_config": true, "GET /v1/user/email": true, "POST /v1/user/email": true, "GET /v1/whoami": true,
		"GET /v1/cas": true, "GET /v1/cas/development": true,
	}
	const allowed = 0
	// Workload certificates: issued by the server (api, other), revoked, and signed with the CA's key
	// as the server would not issue them (expired, without a SPIFFE ID).
	apiCert, _ := ws.issueWorkloadCert("api")
	otherCert, _ := ws.issueWorkloadCert("other")
	revokedCert, revokedLeaf := ws.issueWorkloadCert("api")
	ws.revoke(revokedLeaf)
	expiredCert := ws.signWorkloadCert(func(c *x509.Certificate) {
		c.NotBefore, c.NotAfter = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
	})
	noSPIFFE := ws.signWorkloadCert(func(c *x509.Certificate) { c.URIs = nil })
	stranger := workloadtest.New(t)
	strangerToken := stranger.Sign(t, workloadtest.KidEC, stranger.GitHubClaims("acme/api", "refs/heads/main", "https://gantry.example.com", time.Now(), time.Hour))
	serviceAPI := func(r route) int {
		if serviceMay[r.method+" "+r.path] {
			return allowed
		}
		return 403
	}
	serviceOther := func(r route) int {
		if serviceMay[r.method+" "+r.path] && !strings.Contains(r.path, "api") { // nothing of service api
			return allowed
		}
		return 403
	}
	callers := []struct {
		name   string
		header string
		via    *http.Client      // a client presenting a certificate; nil: the stack's
		expect func(r route) int // allowed, or the exact denial status
	}{
		{"no credentials", "", nil, func(route) int { return 401 }},
		{"malformed basic", "Basic !!!not-base64", nil, func(route) int { return 403 }},
		{"malformed username", basicHeader("2/service:token"), nil, func(route) int { return 403 }},
		{"empty token", basicHeader("2/user/alice:"), nil, func(route) int { return 403 }},
		{"garbage token", basicHeader("2/user/alice:R0tSMQ=="), nil, func(route) int { return 403 }},
		{"expired", s.rawBasic("alice", "user", kms.AliasUserAuth, time.Now().Add(-time.Hour)), nil, func(route) int { return 403 }},
		{"wrong key", s.rawBasic("alice", "user", kms.AliasAuth, time.Now()), nil, func(route) int { return 403 }},
		{"service api", s.basic("api", "service"), nil, serviceAPI},
		{"service other", s.basic("other", "service"), nil, serviceOther},
		// With the local keyring gantry enforces grants itself: a valid token of a service that holds
		// none is refused.
		{"service without grants", s.basic("ghost", "service"), nil, func(route) int { return 403 }},
		{"cert service api", "", ws.certClient(apiCert), serviceAPI},
		{"cert service other", "", ws.certClient(otherCert), serviceOther},
		{"cert revoked", "", ws.certClient(revokedCert), func(route) int { return 403 }},
		{"cert expired", "", ws.certClient(expiredCert), func(route) int { return 403 }},
		{"cert without spiffe id", "", ws.certClient(noSPIFFE), func(route) int { return 403 }},
		{"kubernetes service api", ws.podToken("api", "gantry", time.Hour), nil, serviceAPI},
		{"kubernetes service other", ws.podToken("other", "gantry", time.Hour), nil, serviceOther},
		{"kubernetes expired", "Bearer " + ws.cluster.Sign(t, workloadtest.KidRSA, ws.cluster.KubernetesClaims("shop", "api", "gantry", time.Now().Add(-2*time.Hour), time.Hour)), nil, func(route) int { return 403 }},
		{"kubernetes wrong audience", ws.podToken("api", "vault", time.Hour), nil, func(route) int { return 403 }},
		{"jwt service api", ws.ciToken("acme/api"), nil, serviceAPI},
		{"jwt unmapped", ws.ciToken("acme/other"), nil, func(route) int { return 403 }},
		{"jwt wrong issuer", "Bearer " + strangerToken, nil, func(route) int { return 403 }},
		{"user", s.basic("alice", "user"), nil, func(r route) int {
			if userRefused(r) {
				return 403
			}
			return allowed
		}},
	}
	for ci, c := range callers {
		for _, r := range routes {
			t.Run(c.name+"/"+r.method+" "+r.path, func(t *testing.T) {
				body := r.body
				if m, ok := body.(map[string]any); ok && strings.Contains(fmt.Sprint(m["name"]), "%s") {
					m = map[string]any{"name": fmt.Sprintf("matrix-%d", ci), "credential_pairs": m["credential_pairs"], "documentation": "d"}
					body = m
				}
				header := http.Header{"Content-Type": {"application/json"}, "Authorization": {c.header}}
				if c.header == "" {
					header["Authorization"] = []string{""}
				}
				payload := ""
				if body != nil {
					payload = mustJSON(t, body)
				}
				var got response
				if c.via != nil {
					got = s.doWith(c.via, r.method, s.rest+r.path, payload, header)
				} else {
					got = s.do(r.method, s.rest+r.path, payload, header)
				}
				if got.code >= 500 {
					t.Fatalf("status %d: %s", got.code, got.body)
				}
				if ct := got.header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q, want application/json", ct)
				}
				want := c.expect(r)
				if want == allowed {
					if got.code == 401 || got.code == 403 {
						t.Errorf("refused with %d: %s", got.code, got.body)
					}
					return
				}
				if got.code != want {
					t.Errorf("status %d, want %d: %s", got.code, want, got.body)
				}
				if msg, _ := got.json(t)["error"].(string); msg == "" {
					t.Errorf("denial without an error message: %s", got.body)
				}
			})
		}
	}
}

// TestPythonClientShape sends what python-confidant-client sends for `confidant get_service`:
// HTTP Basic kmsauth, metadata_only=False, and reads 200 with the pairs, or a JSON 403.
func TestPythonClientShape(t *testing.T) {
	s := startStack(t, nil)
	cred := s.createCredential("db", map[string]any{"DB_PASSWORD": "from-the-client"})
	s.call("PUT", "/v1/services/api-production", map[string]any{"id": "api-production", "credentials": []string{cred}, "blind_credentials": []string{}, "enabled": true, "account": nil}).must(t, 200)

	header := http.Header{"Authorization": {s.basic("api-production", "service")}, "Accept": {"text/plain"}}
	r := s.do("GET", s.rest+"/v1/services/api-production?metadata_only=False", "", header)
	svc := r.must(t, 200)
	c := asMap(t, asList(t, svc["credentials"])[0])
	for _, k := range []string{"id", "name", "revision", "metadata", "credential_pairs"} {
		if _, ok := c[k]; !ok {
			t.Errorf("credential lacks %q, which confidant-format reads", k)
		}
	}
	jsonEqual(t, "pairs", c["credential_pairs"], `{"db_password":"from-the-client"}`)
	for _, k := range []string{"account", "enabled", "revision"} {
		if _, ok := svc[k]; !ok {
			t.Errorf("service lacks %q", k)
		}
	}
	s.call("PUT", "/v1/services/someone-else", map[string]any{}).must(t, 200)
	header["Authorization"] = []string{s.basic("someone-else", "service")}
	denied := s.do("GET", s.rest+"/v1/services/api-production?metadata_only=False", "", header).must(t, 403)
	if denied["reference"] != "api-production" {
		t.Errorf("403 body %v lacks the reference the client merges", denied)
	}
}

// TestHeaderLoginAndXSRF runs browser authentication through trusted proxy headers: reads work with
// the headers, writes also need the XSRF cookie echoed in X-XSRF-TOKEN.
func TestHeaderLoginAndXSRF(t *testing.T) {
	s := startStack(t, func(c *stack.Config) {
		c.Secrets.Auth.UserAuthModule = "header"
		c.Secrets.Auth.HeaderUsername = "X-Forwarded-User"
		c.Secrets.Auth.HeaderEmail = "X-Forwarded-Email"
		c.Secrets.Auth.UserEmailSuffix = "@example.com"
	})
	browser := func(email string) http.Header {
		return http.Header{"Authorization": {""}, "X-Forwarded-User": {"alice"}, "X-Forwarded-Email": {email}, "Content-Type": {"application/json"}}
	}
	// /v1/login redirects home and hands out the XSRF cookie.
	login := s.do("GET", s.rest+"/v1/login", "", browser("Alice@Example.com"))
	if login.code != http.StatusFound || login.header.Get("Location") != "/" {
		t.Fatalf("login: %d %v", login.code, login.header)
	}
	var xsrf string
	for _, c := range (&http.Response{Header: login.header}).Cookies() {
		if c.Name == "XSRF-TOKEN" {
			xsrf = c.Value
		}
	}
	if xsrf == "" {
		t.Fatalf("no XSRF-TOKEN cookie in %v", login.header)
	}
	if email := s.do("GET", s.rest+"/v1/user/email", "", browser("alice@example.com")).must(t, 200)["email"]; email != "alice@example.com" {
		t.Errorf("email %v", email)
	}
	body := `{"name":"browser-made","credential_pairs":{"k":"v"},"documentation":"d"}`
	if r := s.do("POST", s.rest+"/v1/credentials", body, browser("alice@example.com")); r.code != 401 {
		t.Errorf("write without XSRF: %d %s, want 401", r.code, r.body)
	}
	wrong := browser("alice@example.com")
	wrong.Set("X-XSRF-TOKEN", "0000")
	if r := s.do("POST", s.rest+"/v1/credentials", body, wrong); r.code != 401 {
		t.Errorf("write with a wrong XSRF token: %d, want 401", r.code)
	}
	good := browser("alice@example.com")
	good.Set("X-XSRF-TOKEN", xsrf)
	if created := s.do("POST", s.rest+"/v1/credentials", body, good).must(t, 200); created["modified_by"] != "alice@example.com" {
		t.Errorf("modified_by %v", created["modified_by"])
	}
	// Another user's XSRF token does not carry over.
	other := browser("bob@example.com")
	other.Set("X-XSRF-TOKEN", xsrf)
	if r := s.do("POST", s.rest+"/v1/credentials", body, other); r.code != 401 {
		t.Errorf("XSRF token of another user: %d, want 401", r.code)
	}
	if r := s.do("GET", s.rest+"/v1/credentials", "", browser("mallory@evil.example")); r.code != 403 {
		t.Errorf("email outside USER_EMAIL_SUFFIX: %d, want 403", r.code)
	}
	missing := http.Header{"Authorization": {""}}
	if r := s.do("GET", s.rest+"/v1/credentials", "", missing); r.code != 401 {
		t.Errorf("no headers: %d, want 401", r.code)
	}
	// kmsauth callers need no XSRF.
	s.call("POST", "/v1/credentials", map[string]any{"name": "cli-made", "credential_pairs": map[string]any{"k": "v"}, "documentation": "d"}).must(t, 200)
}

// TestHeaderLoginXSRFTokenExpires: with header login there is no session, so the XSRF token carries
// its own issue time: it is valid for the session lifetime only, and every response hands out a fresh
// one, so a leaked token stops working.
func TestHeaderLoginXSRFTokenExpires(t *testing.T) {
	const lifetime = 2 * time.Second
	s := startStack(t, func(c *stack.Config) {
		c.Secrets.Auth.UserAuthModule = "header"
		c.Secrets.Auth.HeaderUsername = "X-Forwarded-User"
		c.Secrets.Auth.HeaderEmail = "X-Forwarded-Email"
		c.Secrets.Auth.PermanentSessionLifetime = lifetime
	})
	browser := func(xsrf string) http.Header {
		return http.Header{"Authorization": {""}, "X-Forwarded-User": {"alice"}, "X-Forwarded-Email": {"alice@example.com"},
			"Content-Type": {"application/json"}, "X-Xsrf-Token": {xsrf}}
	}
	xsrfOf := func(r response) string {
		t.Helper()
		for _, c := range (&http.Response{Header: r.header}).Cookies() {
			if c.Name == "XSRF-TOKEN" {
				return c.Value
			}
		}
		t.Fatalf("no XSRF-TOKEN cookie in %d %v", r.code, r.header)
		return ""
	}
	body := func(name string) string {
		return `{"name":"` + name + `","credential_pairs":{"k":"v"},"documentation":"d"}`
	}
	leaked := xsrfOf(s.do("GET", s.rest+"/v1/login", "", browser("")))
	s.do("POST", s.rest+"/v1/credentials", body("while-fresh"), browser(leaked)).must(t, 200)

	time.Sleep(lifetime + 100*time.Millisecond)
	if r := s.do("POST", s.rest+"/v1/credentials", body("after-expiry"), browser(leaked)); r.code != http.StatusUnauthorized {
		t.Errorf("write with an XSRF token older than the session lifetime: %d %s, want 401", r.code, r.body)
	}
	fresh := xsrfOf(s.do("GET", s.rest+"/v1/credentials", "", browser("")))
	if fresh == leaked {
		t.Errorf("the XSRF token handed out %v later is the same: %q", lifetime, fresh)
	}
	s.do("POST", s.rest+"/v1/credentials", body("with-the-fresh-token"), browser(fresh)).must(t, 200)
}

// matrixCSR is a valid CSR for api.example.com, so the certificate POST reaches the access check.
func matrixCSR(t *testing.T) string {
	t.Helper()
	_, csr, err := ca.NewKeyAndCSR(ca.KeyRequest{KeyType: ca.KeyECDSA, Subject: pkix.Name{CommonName: "api.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	return string(csr)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPolicyFileACL runs the stack with ACL_MODULE=policy: least privilege per user and credential
// name, enforced on REST the same as everywhere, with truthful permission hints.
func TestPolicyFileACL(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	doc := `
rules:
  - principals: ["user:alice"]
    resources: ["*"]
    actions: ["*"]
  - principals: ["user:bob"]
    resources: ["credential-name:team-b-*"]
    actions: ["metadata", "get", "update"]
  - principals: ["user:bob"]
    resources: ["credential:*"]
    actions: ["list"]
`
	if err := os.WriteFile(policy, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startStack(t, func(c *stack.Config) {
		c.Secrets.ACLModule = "policy"
		c.Secrets.ACLPolicyFile = policy
	})
	teamB := s.createCredential("team-b-db", map[string]any{"password": "b"})
	teamA := s.createCredential("team-a-db", map[string]any{"password": "a"})
	bob := http.Header{"Authorization": {s.basic("bob", "user")}, "Content-Type": {"application/json"}}

	got := s.do("GET", s.rest+"/v1/credentials/"+teamB, "", bob).must(t, 200)
	jsonEqual(t, "bob reads team b", got["credential_pairs"], `{"password":"b"}`)
	jsonEqual(t, "hints", got["permissions"], `{"metadata":true,"get":true,"update":true}`)
	if r := s.do("GET", s.rest+"/v1/credentials/"+teamA, "", bob).must(t, 403); r["reference"] != teamA {
		t.Errorf("bob on team a: %v", r)
	}
	s.do("PUT", s.rest+"/v1/credentials/"+teamB, `{"enabled": false}`, bob).must(t, 200)
	s.do("PUT", s.rest+"/v1/credentials/"+teamA, `{"enabled": false}`, bob).must(t, 403)
	s.do("POST", s.rest+"/v1/credentials", `{"name":"team-b-new","credential_pairs":{"k":"v"},"documentation":"d"}`, bob).must(t, 403)
	s.do("GET", s.rest+"/v1/credentials", "", bob).must(t, 200)
	s.do("GET", s.rest+"/v1/services", "", bob).must(t, 403)
}

func TestGrantsAndRoles(t *testing.T) {
	s := startStack(t, func(c *stack.Config) { c.Secrets.Roles = []string{"orders", "billing"} })
	s.call("PUT", "/v1/services/api", map[string]any{}).must(t, 200)
	jsonEqual(t, "grants made with the service", s.get("/v1/grants/api").must(t, 200), `{"id":"api","grants":{"encrypt_grant":true,"decrypt_grant":true}}`)
	jsonEqual(t, "ensure grants", s.call("PUT", "/v1/grants/api", nil).must(t, 200), `{"id":"api","grants":{"encrypt_grant":true,"decrypt_grant":true}}`)
	for _, m := range []string{"GET", "PUT"} {
		if r := s.call(m, "/v1/grants/nope", nil).must(t, 400); r["error"] != "id provided does not exist." {
			t.Errorf("%s grants of an unknown service: %v", m, r)
		}
	}
	service := http.Header{"Authorization": {s.basic("api", "service")}}
	s.do("GET", s.rest+"/v1/grants/api", "", service).must(t, 200)
	s.do("PUT", s.rest+"/v1/grants/api", "", service).must(t, 403)
	jsonEqual(t, "roles", s.get("/v1/roles").must(t, 200), `{"roles":["billing","orders"]}`)
	if r := s.do("GET", s.rest+"/v1/roles", "", service).must(t, 403); r["error"] != "api does not have access to list roles" {
		t.Errorf("roles as a service: %v", r)
	}
}

// TestGrantsFileImported: a data folder of a version that kept local grants in grants.json keeps
// them: the file is merged into the store at start, and the services it grants authenticate.
func TestGrantsFileImported(t *testing.T) {
	// Created while grants are not managed, neither service holds a grant in the store.
	s := startStack(t, func(c *stack.Config) { c.Secrets.KMSAuthManageGrants = false })
	for _, id := range []string{"legacy", "ungranted"} {
		s.call("PUT", "/v1/services/"+id, map[string]any{}).must(t, 200)
	}
	file := filepath.Join(s.cfg.DataDir, "grants.json")
	if err := os.WriteFile(file, []byte(`{"legacy":{"encrypt":true,"decrypt":true,"created":"2026-01-01T00:00:00Z"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s.cfg.Secrets.KMSAuthManageGrants = true
	for range 2 { // the import is idempotent: a second start changes nothing
		s = s.restart()
		legacy := http.Header{"Authorization": {s.basic("legacy", "service")}}
		s.do("GET", s.rest+"/v1/services/legacy", "", legacy).must(t, 200)
		jsonEqual(t, "imported grants", s.get("/v1/grants/legacy").must(t, 200), `{"id":"legacy","grants":{"encrypt_grant":true,"decrypt_grant":true}}`)
		ungranted := http.Header{"Authorization": {s.basic("ungranted", "service")}}
		s.do("GET", s.rest+"/v1/services/ungranted", "", ungranted).must(t, 403)
		jsonEqual(t, "no grants", s.get("/v1/grants/ungranted").must(t, 200), `{"id":"ungranted","grants":{"encrypt_grant":false,"decrypt_grant":false}}`)
	}
}

// TestTwoKindsOfCredentialRefused: a request carrying two kinds of credential (each of which would
// authenticate it alone) is refused with 400 naming them, instead of being authenticated by an
// undocumented order of precedence (Basic > Bearer > X-Auth-* > certificate > session) (issue 40).
func TestTwoKindsOfCredentialRefused(t *testing.T) {
	s := startStack(t, nil)
	s.call("PUT", "/v1/services/orders", map[string]any{"credentials": []string{}}).must(t, 200)
	alone := http.Header{"Authorization": {s.basic("orders", "service")}}
	s.do("GET", s.rest+"/v1/services/orders", "", alone).must(t, 200)
	xauth := http.Header{"Authorization": {""}, "X-Auth-From": {"2/service/orders"}, "X-Auth-Token": {s.token("orders", "service")}}
	s.do("GET", s.rest+"/v1/services/orders", "", xauth).must(t, 200)

	for name, header := range map[string]http.Header{
		"HTTP Basic and X-Auth-*":         {"Authorization": alone["Authorization"], "X-Auth-From": xauth["X-Auth-From"], "X-Auth-Token": xauth["X-Auth-Token"]},
		"HTTP Basic and a session cookie": {"Authorization": alone["Authorization"], "Cookie": {"confidant_session=anything"}},
	} {
		r := s.do("GET", s.rest+"/v1/services/orders", "", header)
		if r.code != http.StatusBadRequest || !strings.Contains(string(r.body), "more than one kind of credential") {
			t.Errorf("%s: %d %s, want 400 naming more than one kind of credential", name, r.code, r.body)
		}
	}
}
