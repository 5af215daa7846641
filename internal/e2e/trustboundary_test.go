package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gantry-dev/gantry/internal/stack"
)

// hostileHeaders are what an outside client might send to reach past the gateway: an upstream
// deadline, and gRPC metadata naming every header a service trusts.
var hostileHeaders = []http.Header{
	{"Grpc-Timeout": {"1n"}},
	{"Grpc-Timeout": {"1n"}, "Grpc-Metadata-Grpc-Timeout": {"1n"}},
	{"Grpc-Metadata-X-Proxy-Internal": {"true"}, "Grpc-Metadata-X-Proxy-Downstream-Service-Cluster": {"echobot"}},
	{"Grpc-Metadata-X-Forwarded-User": {"admin"}, "Grpc-Metadata-X-Forwarded-Email": {"admin@example.com"}},
	{"Grpc-Metadata-X-Nginx-Internal": {"true"}, "Grpc-Metadata-X-Envoy-Internal": {"true"}},
	{"Grpc-Metadata-X-Auth-From": {"2/user/admin"}, "Grpc-Metadata-Cookie": {"session=forged"}},
	{"Grpc-Metadata-X-Http-Code": {"200"}, "Grpc-Timeout": {"1S"}, "X-Forwarded-For": {"10.0.0.1"}},
}

// TestHostileClientsNeverTakeTheAPIOffline: 200 unauthenticated requests with Grpc-Timeout: 1n and
// 200 with assorted Grpc-Metadata-* headers, interleaved with legitimate traffic, leave every
// legitimate request answered and no host ejected. Before the edge policy, five such requests ejected
// the only secrets host and every client got 503 "no healthy upstream".
func TestHostileClientsNeverTakeTheAPIOffline(t *testing.T) {
	s := startStack(t, nil)
	var legit, legitOK atomic.Int64
	var wg sync.WaitGroup
	hostile := func(n int, header func(i int) http.Header) {
		defer wg.Done()
		for i := 0; i < n; i++ {
			h := header(i)
			h.Set("Authorization", "") // unauthenticated
			paths := []string{"/v1/value_generator", "/v1/credentials", "/api/v1/chat/get_team/gantry-team"}
			s.do("GET", s.rest+paths[i%len(paths)], "", h)
		}
	}
	wg.Add(3)
	go hostile(200, func(int) http.Header { return http.Header{"Grpc-Timeout": {"1n"}} })
	go hostile(200, func(i int) http.Header { return hostileHeaders[i%len(hostileHeaders)].Clone() })
	go func() {
		defer wg.Done()
		for i := 0; i < 200; i++ {
			var r response
			if i%2 == 0 {
				r = s.do("GET", s.rest+"/v1/value_generator", "", nil)
			} else {
				r = s.do("GET", s.rest+"/api/v1/chat/get_team/gantry-team", "", nil)
			}
			legit.Add(1)
			if r.code == http.StatusOK {
				legitOK.Add(1)
			} else {
				t.Errorf("legitimate request %d: %d %s", i, r.code, r.body)
			}
		}
	}()
	wg.Wait()
	if legitOK.Load() != legit.Load() {
		t.Fatalf("legitimate success %d of %d", legitOK.Load(), legit.Load())
	}
	for _, cl := range []string{"secrets", "chat"} {
		if n := s.stat("cluster." + cl + ".outlier_detection.ejections_total"); n != 0 {
			t.Errorf("%s: %d ejections", cl, n)
		}
	}
	if r := s.do("GET", s.rest+"/v1/value_generator", "", http.Header{"Grpc-Timeout": {"1n"}}); r.code != http.StatusOK {
		t.Errorf("a client deadline became the upstream deadline: %d %s", r.code, r.body)
	}
}

// TestRequestErrorsNeverEject: a caller who sends bad requests at will does not get the host ejected
// for everybody. A NUL byte in a credential name used to be an internal error (500) that ejected the
// only secrets host after five; it is a 400 now, and answers about requests never count against a host
// (gateway/admin_test.go checks that with a service that answers Internal).
func TestRequestErrorsNeverEject(t *testing.T) {
	s := startStack(t, nil)
	for i := 0; i < 12; i++ {
		r := s.do("POST", s.rest+"/v1/credentials", `{"name":"a\u0000b","credential_pairs":{"k":"v"},"documentation":"d"}`,
			http.Header{"Content-Type": {"application/json"}})
		if r.code != http.StatusBadRequest {
			t.Fatalf("NUL in a name: %d %s, want 400", r.code, r.body)
		}
	}
	if n := s.stat("cluster.secrets.outlier_detection.ejections_total"); n != 0 {
		t.Errorf("request errors ejected the host %d times", n)
	}
	s.do("GET", s.rest+"/v1/value_generator", "", nil).must(t, http.StatusOK)
}

// TestHeaderLoginCannotBeForgedThroughTheGateway runs the docker-compose layout, the gateway in a
// process of its own in front of secrets and chat, with trusted-header login: an outside client
// cannot become anyone by sending the trusted headers as gRPC metadata (or as headers the gateway was
// not told to forward).
func TestHeaderLoginCannotBeForgedThroughTheGateway(t *testing.T) {
	services := startStack(t, func(c *stack.Config) {
		c.Target = "secrets,chat"
		c.Secrets.Auth.UserAuthModule = "header"
		c.Secrets.Auth.HeaderUsername = "X-Forwarded-User"
		c.Secrets.Auth.HeaderEmail = "X-Forwarded-Email"
	})
	gw := splitGateway(t, services, nil)
	forged := []http.Header{
		{"Grpc-Metadata-X-Forwarded-User": {"admin"}, "Grpc-Metadata-X-Forwarded-Email": {"admin@example.com"}},
		{"X-Forwarded-User": {"admin"}, "X-Forwarded-Email": {"admin@example.com"}}, // not in -forward-headers
		{"Grpc-Metadata-x-forwarded-user": {"admin"}, "Grpc-Metadata-x-forwarded-email": {"admin@example.com"}},
	}
	for _, h := range forged {
		h.Set("Authorization", "")
		if r := gw.do("GET", gw.rest+"/v1/credentials", "", h); r.code != http.StatusUnauthorized {
			t.Errorf("forged login %v: %d %s, want 401", h, r.code, r.body)
		}
	}
	// Configured to forward them, the gateway passes the real headers (the authenticating proxy in
	// front of it sets and strips them): header login works, metadata smuggling still does not.
	fwd := splitGateway(t, services, func(c *stack.Config) { c.Gateway.ForwardHeaders = "X-Forwarded-User,X-Forwarded-Email" })
	h := http.Header{"Authorization": {""}, "X-Forwarded-User": {"alice"}, "X-Forwarded-Email": {"alice@example.com"}}
	fwd.do("GET", fwd.rest+"/v1/credentials", "", h).must(t, http.StatusOK)
	if r := fwd.do("GET", fwd.rest+"/v1/credentials", "", forged[0]); r.code != http.StatusUnauthorized {
		t.Errorf("forged metadata with forwarding on: %d %s, want 401", r.code, r.body)
	}
}

// splitGateway starts a gateway-only stack in front of the services of s, on the same data folder.
func splitGateway(t *testing.T, s *testStack, mutate func(*stack.Config)) *testStack {
	t.Helper()
	cfg := s.cfg
	cfg.Target = "gateway"
	cfg.Gateway.Listen, cfg.Gateway.AdminListen, cfg.Gateway.AdminGRPCListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Gateway.SecretsUpstream, cfg.Gateway.ChatUpstream = s.SecretsAddr, s.ChatAddr
	// The gateway process knows nothing of the secrets settings (header names included).
	cfg.Secrets.Auth.UserAuthModule = "null"
	cfg.Secrets.Auth.HeaderUsername, cfg.Secrets.Auth.HeaderEmail = "", ""
	if mutate != nil {
		mutate(&cfg)
	}
	gw := runStack(t, cfg)
	gw.asUser = s.asUser
	return gw
}

// TestChatCustomInternalHeaderCannotBeForged: Omnibot's envoy_internal_check can name its own header
// (kwargs.header, as Omnibot's docs show with X-Nginx-Internal). Gantry reads it as its gateway's
// x-proxy-internal (and says so at start), so an outside client cannot set it through the gateway,
// neither as gRPC metadata nor as a plain header, not even when -forward-headers forwards that header;
// and an internal caller passes, where reading the header as named refused every caller.
func TestChatCustomInternalHeaderCannotBeForged(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "chat.yaml")
	conf := `
teams:
  gantry-team: T0GANTRY1
authorization:
  checks:
    - module: "omnibot.authnz:allowed_paths"
      kwargs: {paths: ["/api/v1/chat/", "/api/v1/slack/"]}
    - module: "omnibot.authnz.envoy_checks:envoy_internal_check"
      kwargs: {header: X-Nginx-Internal}
`
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	paths := []string{"/api/v1/chat/get_team/gantry-team", omnibotPath("/api/v1/chat/get_team/gantry-team")}
	// Loopback is external here; the gateway forwards X-Nginx-Internal as the operator asked.
	s := startStack(t, func(c *stack.Config) {
		c.Chat.ConfigFile = file
		c.Gateway.InternalCIDRs = "10.0.0.0/8"
		c.Gateway.ForwardHeaders = "X-Nginx-Internal"
	})
	for _, h := range []http.Header{
		{"Grpc-Metadata-X-Nginx-Internal": {"true"}},
		{"X-Nginx-Internal": {"true"}},
		{"Grpc-Metadata-X-Nginx-Internal": {"true"}, "X-Nginx-Internal": {"true"}, "Grpc-Metadata-X-Proxy-Internal": {"true"}},
	} {
		for _, path := range paths {
			r := s.do("GET", s.rest+path, "", h)
			if r.code != http.StatusForbidden || !strings.Contains(string(r.body), `"error"`) {
				t.Errorf("forged %v on %s: %d %s, want 403", h, path, r.code, r.body)
			}
		}
	}
	// From an internal address (loopback, by default) the gateway's own header lets the call in.
	internal := startStack(t, func(c *stack.Config) { c.Chat.ConfigFile = file })
	for _, path := range paths {
		internal.do("GET", internal.rest+path, "", nil).must(t, http.StatusOK)
	}
}
