package e2e

import (
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/etcdtest"
)

// openLink opens a login link as a client without a session would, and returns the answer.
func openLink(s *testStack, link string) response {
	s.t.Helper()
	return s.do(http.MethodGet, link, "", http.Header{"Authorization": {""}})
}

// TestLoginLinkOnceAcrossReplicas: the used nonce is recorded in the shared etcd store, so a link
// opened through one secrets replica is refused by the other, and by a gateway balancing over both.
func TestLoginLinkOnceAcrossReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end suite skipped with -short")
	}
	cluster := etcdtest.New(t, 1, zap.NewNop())
	a, b := startReplicas(t, cluster.Endpoints(), "/e2e-login-links/")

	refused := func(r response) bool {
		return r.code == http.StatusUnauthorized && strings.Contains(string(r.body), "already used")
	}
	for _, order := range [][2]*testStack{{a, b}, {b, a}} {
		first, second := order[0], order[1]
		link := a.loginLink(t, "alice@example.com")
		// The link names the gateway it was minted for; the same code goes to each replica's gateway.
		code := link[strings.Index(link, "/v1/login?code="):]
		if r := openLink(first, first.rest+code); r.code != http.StatusFound || !strings.Contains(r.header.Get("Set-Cookie"), "session") {
			t.Fatalf("first use through %s: %d %v %s, want 302 with a session", first.GatewayAddr, r.code, r.header, r.body)
		}
		if r := openLink(second, second.rest+code); !refused(r) {
			t.Errorf("second use through the other replica %s: %d %s, want 401 already used", second.GatewayAddr, r.code, r.body)
		}
		if r := openLink(first, first.rest+code); !refused(r) {
			t.Errorf("third use through the first replica %s: %d %s, want 401 already used", first.GatewayAddr, r.code, r.body)
		}
	}

	// One gateway with both replicas as hosts: whichever replica answers, the second use is refused.
	gwCfg := stack.DefaultConfig().Gateway
	gwCfg.SecretsUpstream = a.SecretsAddr + "," + b.SecretsAddr
	if err := gwCfg.Validate(); err != nil {
		t.Logf("no gateway of both replicas: %v", err)
		return
	}
	gw := startStack(t, func(c *stack.Config) {
		c.Target = "gateway"
		c.DataDir = a.cfg.DataDir
		c.Gateway.SecretsUpstream = gwCfg.SecretsUpstream
	})
	waitServing(gw)
	for range 3 {
		link := gw.loginLink(t, "bob@example.com")
		if r := openLink(gw, link); r.code != http.StatusFound {
			t.Fatalf("first use through the shared gateway: %d %s", r.code, r.body)
		}
		for range 4 {
			if r := openLink(gw, link); !refused(r) {
				t.Errorf("reuse through the shared gateway: %d %s, want 401 already used", r.code, r.body)
			}
		}
	}
}

// TestLogoutEndsTheSessionOnEveryReplica: POST /v1/logout through one replica ends the session on
// both (the end is recorded in the shared store until the session's absolute expiry), although the
// cookie itself is still validly signed and unexpired; logging out again is not an error.
func TestLogoutEndsTheSessionOnEveryReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end suite skipped with -short")
	}
	cluster := etcdtest.New(t, 1, zap.NewNop())
	a, b := startReplicas(t, cluster.Endpoints(), "/e2e-logout/")
	xsrf := map[*http.Cookie]string{}
	login := func(email string) *http.Cookie {
		t.Helper()
		r := openLink(a, a.loginLink(t, email))
		session, token := cookiesOf(r)["confidant_session"], cookiesOf(r)["XSRF-TOKEN"]
		if r.code != http.StatusFound || session == nil || token == nil {
			t.Fatalf("login link: %d %v %s", r.code, r.header, r.body)
		}
		xsrf[session] = token.Value
		return session
	}
	browser := func(session *http.Cookie) http.Header {
		return http.Header{"Authorization": {""}, "Cookie": {cookieHeader(session)}}
	}
	// What the web UI sends: the session and the XSRF cookie's value echoed in X-XSRF-TOKEN.
	page := func(session *http.Cookie) http.Header {
		h := browser(session)
		h.Set("X-XSRF-TOKEN", xsrf[session])
		return h
	}
	ended, other := login("alice@example.com"), login("bob@example.com")
	for _, s := range []*testStack{a, b} {
		s.do("GET", s.rest+"/v1/user/email", "", browser(ended)).must(t, 200)
	}

	// A logout without the XSRF token (a page of another site posting to /v1/logout) is refused and
	// ends nothing (issue 40).
	if r := b.do("POST", b.rest+"/v1/logout", "", browser(ended)); r.code != http.StatusUnauthorized || !strings.Contains(string(r.body), "XSRF") {
		t.Errorf("logout without the XSRF token: %d %s, want 401 naming the XSRF token", r.code, r.body)
	}
	a.do("GET", a.rest+"/v1/user/email", "", browser(ended)).must(t, 200)

	out := b.do("POST", b.rest+"/v1/logout", "", page(ended))
	if out.code != 200 || !strings.Contains(string(out.body), `"session_ended":true`) {
		t.Fatalf("logout: %d %s", out.code, out.body)
	}
	for _, name := range []string{"confidant_session", "XSRF-TOKEN"} {
		if c := cookiesOf(out)[name]; c == nil || c.MaxAge >= 0 || c.Value != "" {
			t.Errorf("logout left cookie %s: %v", name, out.header["Set-Cookie"])
		}
	}
	for _, s := range []*testStack{a, b} {
		r := s.do("GET", s.rest+"/v1/user/email", "", browser(ended))
		if r.code != 401 || !strings.Contains(string(r.body), "session ended") {
			t.Errorf("the ended session through %s: %d %s, want 401 session ended", s.GatewayAddr, r.code, r.body)
		}
		// Another user's session is untouched.
		s.do("GET", s.rest+"/v1/user/email", "", browser(other)).must(t, 200)
	}
	if r := a.do("POST", a.rest+"/v1/logout", "", page(ended)); r.code != 200 {
		t.Errorf("second logout: %d %s, want 200", r.code, r.body)
	}
	if r := a.do("POST", a.rest+"/v1/logout", "", http.Header{"Authorization": {""}}); r.code != 200 || !strings.Contains(string(r.body), `"session_ended":false`) {
		t.Errorf("logout without a session: %d %s, want 200 with nothing ended", r.code, r.body)
	}
	if r := a.do("GET", a.rest+"/v1/logout", "", browser(other)); r.code == 200 {
		t.Errorf("GET /v1/logout: %d, want refused (a link or an image must not log a user out)", r.code)
	}
	a.do("GET", a.rest+"/v1/user/email", "", browser(other)).must(t, 200)
}
