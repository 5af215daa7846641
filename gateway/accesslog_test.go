package gateway

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestAccessLog(t *testing.T) {
	file := filepath.Join(t.TempDir(), "access.log")
	h := startHarness(t, func(c *Config) {
		c.AccessLog = file
		c.HealthCheck.Interval = time.Hour
	})
	do(t, "GET", h.rest+"/api/v1/chat/get_team/echo?code=one-time-secret", nil, http.Header{"X-Request-Id": {"req-42"}, "User-Agent": {"probe/1"}})
	do(t, "GET", h.rest+"/v1/value_generator", nil, nil) // the harness's secrets host serves nothing
	var lines []string
	deadline := time.Now().Add(5 * time.Second)
	for len(lines) < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		data, _ := os.ReadFile(file)
		lines = strings.Split(strings.TrimSpace(string(data)), "\n")
		if lines[0] == "" {
			lines = nil
		}
	}
	if len(lines) != 2 {
		t.Fatalf("access log lines: %q", lines)
	}
	ok := regexp.MustCompile(`^\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\] "GET /api/v1/chat/get_team/echo HTTP/1\.1" 200 - 0 \d+ \d+ \d+ "127\.0\.0\.1" "probe/1" "req-42" "127\.0\.0\.1:\d+" "` + regexp.QuoteMeta(h.chatAddr) + `"$`)
	if !ok.MatchString(lines[0]) {
		t.Errorf("line %q does not match %s", lines[0], ok)
	}
	if strings.Contains(lines[0], "one-time-secret") {
		t.Error("the query string was logged")
	}
	failed := regexp.MustCompile(`"GET /v1/value_generator HTTP/1\.1" 503 UF,URX 0 \d+ \d+ \d+ .* "[0-9a-f]{32}" "127\.0\.0\.1:\d+" "127\.0\.0\.1:\d+"$`)
	if !failed.MatchString(lines[1]) {
		t.Errorf("line %q does not match %s", lines[1], failed)
	}
}

func TestLatencyHistogramsMove(t *testing.T) {
	h := startHarness(t, nil)
	for range 5 {
		do(t, "GET", h.rest+"/api/v1/chat/get_team/echo", nil, nil)
	}
	_, _, body := do(t, "GET", h.admin+"/stats?filter=rq_time", nil, nil)
	for _, name := range []string{"cluster.chat.upstream_rq_time: P0(", "http.ingress.downstream_rq_time: P0("} {
		if !strings.Contains(string(body), name) {
			t.Errorf("/stats lacks %s...:\n%s", name, body)
		}
	}
	_, _, prom := do(t, "GET", h.admin+"/stats/prometheus?filter=upstream_rq_time", nil, nil)
	if !strings.Contains(string(prom), "# TYPE envoy_cluster_upstream_rq_time histogram") ||
		!strings.Contains(string(prom), `envoy_cluster_upstream_rq_time_count{envoy_cluster_name="chat"} 5`) || strings.Contains(string(prom), "downstream") {
		t.Errorf("/stats/prometheus?filter=upstream_rq_time:\n%s", prom)
	}
}
