package e2e

import (
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gantry-dev/gantry/internal/stack"
)

// peersOf returns the peer addresses the services logged for calls of methods under prefix.
func peersOf(logs *observer.ObservedLogs, prefix string) map[string]bool {
	peers := map[string]bool{}
	for _, e := range logs.FilterMessage("grpc call").All() {
		ctx := e.ContextMap()
		if m, _ := ctx["method"].(string); strings.HasPrefix(m, prefix) {
			p, _ := ctx["peer"].(string)
			peers[p] = true
		}
	}
	return peers
}

// TestInMemoryUpstreamsKeepTheTrustBoundary: when the gateway calls the services of its own process
// in memory (the default of -target=all), every check of the network path still holds: client-sent
// gateway headers are stripped, forged gRPC metadata logs nobody in, the policies deny, and the hosts
// are health-checked and listed under their TCP addresses. The services' own log shows the calls
// arrived over the in-memory listener, and over TCP with -grpc-in-memory=false.
func TestInMemoryUpstreamsKeepTheTrustBoundary(t *testing.T) {
	for _, inMemory := range []bool{true, false} {
		name := map[bool]string{true: "in_memory", false: "loopback_tcp"}[inMemory]
		t.Run(name, func(t *testing.T) {
			core, logs := observer.New(zap.DebugLevel)
			s := startStackLogged(t, func(c *stack.Config) {
				c.InMemoryUpstreams = inMemory
				// The test client on loopback is an outside client: nothing it sends makes it internal.
				c.Gateway.InternalCIDRs = "10.0.0.0/8"
				c.Secrets.Auth.UserAuthModule = "header"
				c.Secrets.Auth.HeaderUsername = "X-Forwarded-User"
				c.Secrets.Auth.HeaderEmail = "X-Forwarded-Email"
			}, zap.New(core))

			// chat's envoy_internal_check: an outside client forging the gateway's headers is denied.
			for _, h := range []http.Header{
				{"X-Proxy-Internal": {"true"}},
				{"Grpc-Metadata-X-Proxy-Internal": {"true"}},
				{"X-Proxy-Internal": {"true"}, "X-Proxy-Downstream-Service-Cluster": {"echobot"}, "Grpc-Metadata-X-Proxy-Downstream-Service-Cluster": {"echobot"}},
			} {
				if r := s.do("GET", s.rest+"/api/v1/chat/get_team/gantry-team", "", h); r.code != http.StatusForbidden {
					t.Errorf("forged %v: %d %s, want 403", h, r.code, r.body)
				}
			}
			// Header login: the trusted headers smuggled as gRPC metadata log nobody in; without
			// credentials the policy answers 401.
			for _, h := range []http.Header{
				{"Authorization": {""}},
				{"Authorization": {""}, "Grpc-Metadata-X-Forwarded-User": {"admin"}, "Grpc-Metadata-X-Forwarded-Email": {"admin@example.com"}},
			} {
				if r := s.do("GET", s.rest+"/v1/credentials", "", h); r.code != http.StatusUnauthorized {
					t.Errorf("GET /v1/credentials with %v: %d %s, want 401", h, r.code, r.body)
				}
			}
			s.do("GET", s.rest+"/v1/value_generator", "", nil).must(t, http.StatusOK)
			// The real trusted headers, which the gateway forwards, log in: the service believes them only
			// from a peer whose TLS certificate names the gateway, so the gateway's identity crossed the
			// in-memory connection intact.
			login := http.Header{"Authorization": {""}, "X-Forwarded-User": {"alice"}, "X-Forwarded-Email": {"alice@example.com"}}
			s.do("GET", s.rest+"/v1/credentials", "", login).must(t, http.StatusOK)

			// /clusters names each host by its service's TCP address; the host is health-checked and
			// counts its connections whichever way it is reached.
			for cluster, addr := range map[string]string{"secrets": s.SecretsAddr, "chat": s.ChatAddr} {
				lines := s.hostLines(cluster, addr)
				if lines["health_flags"] != "healthy" || lines["cx_total"] == "0" || lines["rq_total"] == "0" {
					t.Errorf("%s host %s: %v", cluster, addr, lines)
				}
				if n := s.stat("cluster." + cluster + ".health_check.success"); n < 1 {
					t.Errorf("%s: %d passed health checks", cluster, n)
				}
			}

			// The services saw the calls arrive in memory, or over TCP when it is turned off.
			for prefix, memAddr := range map[string]string{"/secrets.v1.": "memory:secrets", "/chat.v1.": "memory:chat"} {
				peers := peersOf(logs, prefix)
				if len(peers) == 0 {
					t.Fatalf("no %s call logged", prefix)
				}
				for p := range peers {
					if (p == memAddr) != inMemory {
						t.Errorf("%s calls arrived from %q (in memory: %v)", prefix, p, inMemory)
					}
				}
			}
		})
	}
}
