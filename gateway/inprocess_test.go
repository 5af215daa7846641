package gateway

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/gantry-dev/gantry/pkg/testwait"
	gantryproto "github.com/gantry-dev/gantry/proto"
)

// TestInProcessHostIsAHostLikeAnyOther: a host reached in memory keeps its address as its name in
// /clusters and the stats, counts its connections, is health-checked and ejected by outlier
// detection exactly as a host reached over TCP, and sees the same forwarded metadata.
func TestInProcessHostIsAHostLikeAnyOther(t *testing.T) {
	h := startHarnessInMemory(t, func(c *Config) {
		c.Outlier.ConsecutiveFailures = 3
		c.HealthCheck.Interval = 50 * time.Millisecond
		c.InternalCIDRs = "10.0.0.0/8" // the test client is outside
	})
	code, _, body := do(t, "GET", h.rest+"/api/v1/chat/get_team/echo", nil, http.Header{
		"X-Proxy-Internal": {"true"}, "X-Proxy-Downstream-Service-Cluster": {"echobot"}, "Grpc-Metadata-X-Proxy-Internal": {"true"},
	})
	if code != 200 {
		t.Fatalf("call through the in-memory host: %d %s", code, body)
	}
	if strings.Contains(string(body), "x-proxy-internal") || strings.Contains(string(body), "echobot") {
		t.Errorf("client-sent gateway headers reached the in-memory host: %s", body)
	}
	if h.chatDials.Load() == 0 {
		t.Fatal("the gateway did not dial the chat host in memory")
	}
	lines := clusterLines(t, h.admin, "chat", h.chatAddr)
	if lines["cx_total"] != "1" || lines["rq_success"] == "0" || lines["health_flags"] != "healthy" {
		t.Fatalf("/clusters of the in-memory host: %v", lines)
	}

	// Health checks reach it: NOT_SERVING fails them (two in a row, the default threshold).
	h.chatSrv.Health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	testwait.Until(t, "the chat host to fail its health checks", func() bool {
		return clusterLines(t, h.admin, "chat", h.chatAddr)["health_flags"] == "/failed_active_hc"
	})
	h.chatSrv.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	testwait.Until(t, "the chat host to be healthy", func() bool { return clusterLines(t, h.admin, "chat", h.chatAddr)["health_flags"] == "healthy" })

	// Outlier detection ejects it after three Unavailable answers.
	for range 3 {
		if code, _, _ := do(t, "GET", h.rest+"/api/v1/chat/get_team/unavailable", nil, nil); code != 503 {
			t.Fatalf("unavailable: %d", code)
		}
	}
	if got := clusterLines(t, h.admin, "chat", h.chatAddr)["health_flags"]; !strings.Contains(got, "/failed_outlier_check") {
		// A passed health check ends an ejection (as Envoy does): it may already be over.
		if n := statValue(t, h.admin, "cluster.chat.outlier_detection.ejections_total"); n != 1 {
			t.Fatalf("after 3 Unavailable answers: health_flags %q, ejections_total %d", got, n)
		}
	}
}

// TestRoutePrefixes: every REST route of a service starts with its prefix in routePrefixes, so the
// per-service muxes of mainMux answer every path under a prefix exactly as the mux of all routes.
func TestRoutePrefixes(t *testing.T) {
	for service, prefix := range routePrefixes {
		data, err := fs.ReadFile(gantryproto.OpenAPI, service+"/v1/"+service+".swagger.json")
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Paths map[string]json.RawMessage `json:"paths"`
		}
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatal(err)
		}
		if len(doc.Paths) == 0 {
			t.Fatalf("%s: no paths in the OpenAPI document", service)
		}
		for path := range doc.Paths {
			if !strings.HasPrefix(path, prefix) {
				t.Errorf("%s route %s does not start with %s", service, path, prefix)
			}
			for other, otherPrefix := range routePrefixes {
				if other != service && strings.HasPrefix(path, otherPrefix) {
					t.Errorf("%s route %s starts with %s's prefix %s", service, path, other, otherPrefix)
				}
			}
		}
	}
}
