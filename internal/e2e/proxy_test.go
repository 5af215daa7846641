package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc/metadata"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/internal/stacktest"
	"github.com/gantry-dev/gantry/pkg/grpcserver"
	"github.com/gantry-dev/gantry/pkg/internaltls"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/testwait"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
)

// chatHost is one chat service process of a cluster, which the test can stop and start again on
// the same address.
type chatHost struct {
	t    *testing.T
	addr string
	file string
	st   *stack.Stack
	stop context.CancelFunc
}

func startChatHost(t *testing.T, addr string) *chatHost {
	t.Helper()
	file := filepath.Join(t.TempDir(), "chat.yaml")
	if err := os.WriteFile(file, []byte(chatConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	h := &chatHost{t: t, addr: addr, file: file}
	h.start()
	t.Cleanup(h.kill)
	return h
}

func (h *chatHost) start() {
	h.t.Helper()
	cfg := stacktest.Config(h.t)
	cfg.Target = stack.RoleChat
	cfg.Chat.Listen = h.addr
	cfg.Chat.ConfigFile = h.file
	cfg.InternalTLS.Dir = testTLSDir(h.t)
	ctx, cancel := context.WithCancel(context.Background())
	st, err := stack.Start(ctx, cfg, logtest.New(h.t).Named("chat@"+h.addr))
	if err != nil {
		cancel()
		h.t.Fatalf("start chat host on %s: %v", h.addr, err)
	}
	h.st, h.stop, h.addr = st, cancel, st.ChatAddr
}

// kill stops the host (its health service reports NOT_SERVING, then the port closes).
func (h *chatHost) kill() {
	if h.st == nil {
		return
	}
	h.stop()
	if err := h.st.Wait(); err != nil {
		h.t.Errorf("chat host %s did not stop cleanly: %v", h.addr, err)
	}
	h.st = nil
}

// clusterLines returns the /clusters lines of one host: stat or field name → value.
func (s *testStack) hostLines(cluster, addr string) map[string]string {
	s.t.Helper()
	r := s.admin("/clusters")
	if r.code != http.StatusOK {
		s.t.Fatalf("/clusters: status %d", r.code)
	}
	out := map[string]string{}
	prefix := cluster + "::" + addr + "::"
	for _, line := range strings.Split(string(r.body), "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			k, v, _ := strings.Cut(rest, "::")
			out[k] = v
		}
	}
	if len(out) == 0 {
		s.t.Fatalf("/clusters has no host %s in cluster %s:\n%s", addr, cluster, r.body)
	}
	return out
}

// stat reads one statistic from /stats (0 when absent).
func (s *testStack) stat(name string) int64 {
	s.t.Helper()
	r := s.admin("/stats?filter=" + url.QueryEscape("^"+regexp.QuoteMeta(name)+"$"))
	_, v, ok := strings.Cut(strings.TrimSpace(string(r.body)), ": ")
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		s.t.Fatalf("stat %s = %q", name, v)
	}
	return n
}

func (s *testStack) hostStat(cluster, addr, name string) int64 {
	s.t.Helper()
	n, err := strconv.ParseInt(s.hostLines(cluster, addr)[name], 10, 64)
	if err != nil {
		s.t.Fatalf("host %s stat %s: %v", addr, name, err)
	}
	return n
}

// getTeam asks chat for a team that is not configured: the 404 comes from a chat host, so it proves
// the request reached an upstream.
func (s *testStack) getTeam(t *testing.T) response {
	t.Helper()
	return s.get("/api/v1/chat/get_team/no-such-team")
}

func TestProxyTwoChatHostsFailover(t *testing.T) {
	const interval = 100 * time.Millisecond
	a := startChatHost(t, "127.0.0.1:0")
	b := startChatHost(t, "127.0.0.1:0")
	s := startStack(t, func(c *stack.Config) {
		c.Target = "secrets,gateway"
		c.Gateway.ChatUpstream = a.addr + "," + b.addr
		c.Gateway.HealthCheck.Interval = interval
		c.Gateway.HealthCheck.Timeout = interval
		c.Gateway.HealthCheck.UnhealthyThreshold = 2
		c.Gateway.HealthCheck.HealthyThreshold = 1
	})

	// Both hosts serve; weighted random balancing reaches each of them.
	for i := 0; i < 40; i++ {
		if r := s.getTeam(t); r.code != http.StatusNotFound || r.json(t)["error"] != "provided team_name is not configured." {
			t.Fatalf("request %d: status %d body %s, want chat's 404", i, r.code, r.body)
		}
	}
	for _, h := range []*chatHost{a, b} {
		lines := s.hostLines("chat", h.addr)
		if lines["health_flags"] != "healthy" || lines["weight"] != "1" || lines["canary"] != "false" {
			t.Errorf("host %s: %v, want healthy weight 1", h.addr, lines)
		}
		if n, _ := strconv.Atoi(lines["rq_total"]); n == 0 {
			t.Errorf("host %s got no request of 40", h.addr)
		}
	}
	if got := s.stat("cluster.chat.upstream_rq_404"); got != 40 {
		t.Errorf("upstream_rq_404 = %d, want 40", got)
	}

	// Kill b: within three health-check intervals (counted as checks, not wall time) it is
	// /failed_active_hc.
	attemptsBefore := s.stat("cluster.chat.health_check.attempt")
	b.kill()
	testwait.Until(t, "b marked /failed_active_hc", func() bool {
		return strings.Contains(s.hostLines("chat", b.addr)["health_flags"], "/failed_active_hc")
	})
	// Two hosts are checked once per interval each, so three intervals are six cluster checks; two
	// more per host allow for the check in flight at the kill and for this poll's own lag.
	if n := s.stat("cluster.chat.health_check.attempt") - attemptsBefore; n > 2*(3+2) {
		t.Errorf("b was marked failed only after %d cluster health checks, want within 3 intervals", n)
	}
	if got := s.hostLines("chat", a.addr)["health_flags"]; got != "healthy" {
		t.Errorf("a health_flags = %q, want healthy", got)
	}
	if got := s.stat("cluster.chat.membership_healthy"); got != 1 {
		t.Errorf("membership_healthy = %d, want 1", got)
	}

	// Requests keep succeeding, all on a.
	aBefore, bBefore := s.hostStat("chat", a.addr, "rq_total"), s.hostStat("chat", b.addr, "rq_total")
	rq404Before := s.stat("cluster.chat.upstream_rq_404")
	for i := 0; i < 20; i++ {
		if r := s.getTeam(t); r.code != http.StatusNotFound {
			t.Fatalf("with b down, request %d: status %d body %s", i, r.code, r.body)
		}
	}
	if got := s.hostStat("chat", a.addr, "rq_total") - aBefore; got != 20 {
		t.Errorf("a served %d of 20 requests", got)
	}
	if got := s.hostStat("chat", b.addr, "rq_total") - bBefore; got != 0 {
		t.Errorf("b (down) was sent %d requests", got)
	}
	if got := s.stat("cluster.chat.upstream_rq_404") - rq404Before; got != 20 {
		t.Errorf("upstream_rq_404 moved by %d, want 20", got)
	}
	if s.stat("cluster.chat.health_check.failure") == 0 {
		t.Error("health_check.failure did not move")
	}

	// With every host down the cluster is in panic mode (below 50% healthy): the gateway still tries
	// the hosts, as Envoy does, and answers a plain 503 when none can be reached.
	a.kill()
	testwait.Until(t, "a marked /failed_active_hc", func() bool {
		return strings.Contains(s.hostLines("chat", a.addr)["health_flags"], "/failed_active_hc")
	})
	r := s.getTeam(t)
	if r.code != http.StatusServiceUnavailable || r.json(t)["error"] != "upstream service unavailable" {
		t.Errorf("all hosts down: status %d body %s, want 503 upstream service unavailable", r.code, r.body)
	}
	if s.stat("cluster.chat.lb_healthy_panic") == 0 {
		t.Error("lb_healthy_panic did not move with every host down")
	}

	// Restarted on the same port, both come back healthy and b gets traffic again.
	a.start()
	b.start()
	for _, h := range []*chatHost{a, b} {
		testwait.Until(t, h.addr+" healthy again", func() bool { return s.hostLines("chat", h.addr)["health_flags"] == "healthy" })
	}
	bBefore = s.hostStat("chat", b.addr, "rq_total")
	testwait.Until(t, "b serving again", func() bool {
		if r := s.getTeam(t); r.code != http.StatusNotFound {
			t.Fatalf("after restart: status %d body %s", r.code, r.body)
		}
		return s.hostStat("chat", b.addr, "rq_total") > bBefore
	})
}

// echoChat reports the metadata a chat upstream received.
type echoChat struct {
	chatv1.UnimplementedChatServiceServer
}

func (echoChat) GetTeam(ctx context.Context, _ *chatv1.GetTeamRequest) (*chatv1.GetTeamResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	b, _ := json.Marshal(map[string][]string{
		"x-proxy-internal":                   md.Get("x-proxy-internal"),
		"x-proxy-downstream-service-cluster": md.Get("x-proxy-downstream-service-cluster"),
	})
	return &chatv1.GetTeamResponse{TeamId: string(b)}, nil
}

func TestProxyForgedInternalHeader(t *testing.T) {
	tlsCfg := internaltls.DefaultConfig()
	tlsCfg.Dir = testTLSDir(t)
	in, err := internaltls.Load(tlsCfg, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpcserver.New(logtest.New(t), in.ServerOptions(internaltls.RoleService)...)
	chatv1.RegisterChatServiceServer(srv.Server, echoChat{})
	lis := listenLoopback(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })

	seen := func(s *testStack) map[string][]string {
		t.Helper()
		r := s.do(http.MethodGet, s.rest+"/api/v1/chat/get_team/x", "", http.Header{
			"X-Proxy-Internal": {"true"}, "X-Proxy-Downstream-Service-Cluster": {"forged-bot"},
		})
		var m map[string][]string
		if err := json.Unmarshal([]byte(r.must(t, http.StatusOK)["team_id"].(string)), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	t.Run("loopback excluded from internal networks", func(t *testing.T) {
		s := startStack(t, func(c *stack.Config) {
			c.Target = "secrets,gateway"
			c.Gateway.ChatUpstream = lis.Addr().String()
			c.Gateway.InternalCIDRs = "10.0.0.0/8"
		})
		m := seen(s)
		if len(m["x-proxy-internal"]) != 0 || len(m["x-proxy-downstream-service-cluster"]) != 0 {
			t.Errorf("forged headers reached the upstream: %v", m)
		}
	})
	t.Run("loopback internal", func(t *testing.T) {
		s := startStack(t, func(c *stack.Config) {
			c.Target = "secrets,gateway"
			c.Gateway.ChatUpstream = lis.Addr().String()
		})
		m := seen(s)
		if strings.Join(m["x-proxy-internal"], ",") != "true" || strings.Join(m["x-proxy-downstream-service-cluster"], ",") != "forged-bot" {
			t.Errorf("internal downstream: upstream saw %v, want internal true and the identity", m)
		}
	})
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

func TestAdminHealthcheckFailDrainsTheGateway(t *testing.T) {
	s := startStack(t, nil)
	if r := s.get("/healthcheck"); r.code != http.StatusOK || string(r.body) != "OK\n" {
		t.Fatalf("/healthcheck = %d %q", r.code, r.body)
	}
	if r := s.do(http.MethodPost, s.adm+"/healthcheck/fail", "", nil); r.code != http.StatusOK || string(r.body) != "OK\n" {
		t.Fatalf("/healthcheck/fail = %d %q", r.code, r.body)
	}
	if r := s.get("/healthcheck"); r.code != http.StatusServiceUnavailable || r.json(t)["error"] != "draining" {
		t.Errorf("draining /healthcheck = %d %s", r.code, r.body)
	}
	if r := s.admin("/server_info"); !strings.Contains(string(r.body), " draining ") {
		t.Errorf("server_info = %q, want draining", r.body)
	}
	if r := s.admin("/ready"); r.code != http.StatusServiceUnavailable || string(r.body) != "DRAINING\n" {
		t.Errorf("/ready = %d %q", r.code, r.body)
	}
	if r := s.do(http.MethodPost, s.adm+"/healthcheck/ok", "", nil); r.code != http.StatusOK {
		t.Fatalf("/healthcheck/ok = %d", r.code)
	}
	if r := s.get("/healthcheck"); r.code != http.StatusOK {
		t.Errorf("after /healthcheck/ok: %d", r.code)
	}
	if r := s.admin("/server_info"); !strings.Contains(string(r.body), " live ") {
		t.Errorf("server_info = %q, want live", r.body)
	}
}

func TestAdminQuitQuitQuitStopsTheStack(t *testing.T) {
	s := startStack(t, nil)
	if r := s.do(http.MethodPost, s.adm+"/quitquitquit", "", nil); r.code != http.StatusOK || string(r.body) != "OK\n" {
		t.Fatalf("/quitquitquit = %d %q", r.code, r.body)
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("stack stopped with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stack still runs after /quitquitquit")
	}
	if _, err := client.Get(s.rest + "/healthcheck"); err == nil {
		t.Error("the REST listener still accepts")
	}
}

func TestAdminStatsPrometheusThroughTheStack(t *testing.T) {
	s := startStack(t, nil)
	s.get("/api/v1/chat/get_team/nope")
	r := s.admin("/stats/prometheus")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(r.body))
	if err != nil || r.code != http.StatusOK {
		t.Fatalf("status %d, parse error %v:\n%s", r.code, err, r.body)
	}
	var found bool
	for _, m := range fams["envoy_cluster_upstream_rq"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["envoy_cluster_name"] == "chat" && labels["envoy_response_code"] == "404" && m.GetCounter().GetValue() == 1 {
			found = true
		}
	}
	if !found {
		t.Errorf("no envoy_cluster_upstream_rq{chat,404} 1 in\n%s", r.body)
	}
	if r := s.admin("/logging"); r.code != http.StatusOK || !strings.Contains(string(r.body), "  gateway: ") {
		t.Errorf("/logging = %d %q", r.code, r.body)
	}
}

// TestGatewayWithoutChatHasNoChatCluster: a gateway that does not route to chat (here secrets and the
// gateway in one process, -chat-upstream left at its empty default, as the Helm chart with
// chat.enabled false) has no chat cluster in /clusters or the Prometheus series, so
// GantryClusterNoHealthyHost cannot fire for it, and the chat routes and Slack receivers answer 404
// JSON at once, saying why. Before, the default -chat-upstream 127.0.0.1:9091 made a cluster that
// never answered: its routes failed with 503 and the alert fired for the whole run.
func TestGatewayWithoutChatHasNoChatCluster(t *testing.T) {
	s := startStack(t, func(c *stack.Config) { c.Target = stack.RoleSecrets + "," + stack.RoleGateway })
	if s.cfg.Gateway.ChatUpstream != "" {
		t.Fatalf("-chat-upstream defaults to %q, want empty", s.cfg.Gateway.ChatUpstream)
	}
	clusters := s.admin("/clusters")
	if clusters.code != http.StatusOK || strings.Contains(string(clusters.body), "chat::") || !strings.Contains(string(clusters.body), "secrets::") {
		t.Fatalf("/clusters: %d, want secrets and no chat cluster:\n%s", clusters.code, clusters.body)
	}
	if body := string(s.admin("/stats/prometheus").body); strings.Contains(body, `envoy_cluster_name="chat"`) {
		t.Errorf("/stats/prometheus has series of a chat cluster")
	}
	for _, req := range []struct{ method, path string }{
		{"GET", "/api/v1/chat/get_team/acme"},
		{"POST", "/api/v1/slack/event"},
		{"POST", "/api/v2/chat/action/send_message/acme/bot"},
	} {
		r := s.do(req.method, s.rest+req.path, `{}`, http.Header{"Content-Type": {"application/json"}, "Authorization": {s.asUser}})
		if r.code != http.StatusNotFound || !strings.Contains(r.json(t)["error"].(string), "does not route to the chat service") {
			t.Errorf("%s %s: %d %s, want 404 does not route to the chat service", req.method, req.path, r.code, r.body)
		}
	}
	if r := s.admin("/ready"); r.code != http.StatusOK {
		t.Errorf("/ready: %d %s, want 200 (no chat cluster to be unhealthy)", r.code, r.body)
	}
	id := s.createCredential("still-served", map[string]any{"k": "v"})
	s.get("/v1/credentials/"+id).must(t, http.StatusOK)
}
