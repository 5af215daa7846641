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
