package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// scrape reads the admin port's /stats/prometheus as Prometheus does and returns its families.
func (s *testStack) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	r := s.admin("/stats/prometheus")
	if r.code != http.StatusOK {
		t.Fatalf("/stats/prometheus: %d %s", r.code, r.body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(r.body)))
	if err != nil {
		t.Fatalf("/stats/prometheus does not parse: %v\n%s", err, r.body)
	}
	return fams
}

// series returns the value of the counter or gauge of family name whose labels include labels
// ("k=v,k=v"), or the sample count of a histogram; -1 when there is no such series.
func series(fams map[string]*dto.MetricFamily, name, labels string) float64 {
	f, ok := fams[name]
	if !ok {
		return -1
	}
	want := map[string]string{}
	for _, kv := range strings.Split(labels, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			want[k] = v
		}
	}
next:
	for _, m := range f.GetMetric() {
		for k, v := range want {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return -1
}

// TestSecretsMetricsOnTheAdminPort: after real calls through the gateway, /stats/prometheus has the
// secrets service's own series: authentications by method and result, an access-control denial, a
// write refused by the rate limit, KMS and store calls with latency histograms, the write queue.
func TestSecretsMetricsOnTheAdminPort(t *testing.T) {
	s := startStack(t, func(c *stack.Config) { c.Secrets.Limits.WriteRate, c.Secrets.Limits.WriteBurst = 0.001, 3 })
	db := s.createCredential("db", map[string]any{"password": "p"})
	s.call("PUT", "/v1/services/orders", map[string]any{"credentials": []string{}}).must(t, 200)
	orders := s.basic("orders", "service")
	// A service reading a credential it is not mapped to: authenticated, then refused (403).
	if r := s.do("GET", s.rest+"/v1/credentials/"+db, "", http.Header{"Authorization": {orders}}); r.code != http.StatusForbidden {
		t.Fatalf("unmapped read: %d %s", r.code, r.body)
	}
	// Two refused tokens.
	for i := range 2 {
		bad := basicHeader(fmt.Sprintf("2/user/mallory:garbage-%d", i))
		if r := s.do("GET", s.rest+"/v1/credentials", "", http.Header{"Authorization": {bad}}); r.code != http.StatusForbidden && r.code != http.StatusUnauthorized {
			t.Fatalf("bad token: %d %s", r.code, r.body)
		}
	}
	// The burst of 3 writes is used up (2 above, 1 here); the next is refused with 429.
	s.createCredential("api", map[string]any{"k": "v"})
	if r := s.call("POST", "/v1/credentials", map[string]any{"name": "over", "documentation": "d", "credential_pairs": map[string]any{"k": "v"}}); r.code != http.StatusTooManyRequests {
		t.Fatalf("write past the burst: %d %s", r.code, r.body)
	}

	fams := s.scrape(t)
	atLeast := func(name, labels string, min float64) {
		t.Helper()
		if v := series(fams, name, labels); v < min {
			t.Errorf("%s{%s} = %v, want at least %v", name, labels, v, min)
		}
	}
	exactly := func(name, labels string, want float64) {
		t.Helper()
		if v := series(fams, name, labels); v != want {
			t.Errorf("%s{%s} = %v, want %v", name, labels, v, want)
		}
	}
	// alice's calls: 2 creates, the service mapping, the refused write; orders' read.
	atLeast("envoy_secrets_authn", "auth_method=kmsauth,result=success", 5)
	exactly("envoy_secrets_authn", "auth_method=kmsauth,result=failure", 2)
	exactly("envoy_secrets_authz_denied", "", 1)
	exactly("envoy_secrets_rate_limit_write_refused", "", 1)
	// Creating a credential generates a data key; kmsauth tokens are decrypted (once each: the
	// validator caches a token it accepted).
	atLeast("envoy_secrets_kms_rq_total", "operation=generate_data_key", 2)
	atLeast("envoy_secrets_kms_rq_total", "operation=decrypt", 2)
	atLeast("envoy_secrets_kms_rq_time", "operation=decrypt", 2)
	exactly("envoy_secrets_kms_rq_error", "operation=generate_data_key", 0)
	atLeast("envoy_secrets_store_rq_total", "operation=put_credential", 2)
	atLeast("envoy_secrets_store_rq_time", "operation=put_credential", 2)
	exactly("envoy_secrets_store_rq_error", "operation=put_credential", 0)
	// The unmapped read looked the credential up: a hit, not an error.
	atLeast("envoy_secrets_store_rq_total", "operation=get_service", 1)
	exactly("envoy_secrets_store_write_queue_depth", "", 0)
	for _, name := range []string{"envoy_secrets_kms_rq_time", "envoy_secrets_store_rq_time"} {
		if got := fams[name].GetType(); got != dto.MetricType_HISTOGRAM {
			t.Errorf("%s is a %v, want a histogram", name, got)
		}
	}
}

// TestChatMetricsOnTheAdminPort: after real chat calls through the gateway against fake Slack,
// /stats/prometheus has the Slack calls by method and HTTP status (a 429 among them), Slack's
// {"ok": false} answers, call latency, and the user and channel cache's hits and misses.
func TestChatMetricsOnTheAdminPort(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	s := startChat(t, f, chatTeams+chatACL, func(c *stack.Config) { c.Chat.SlackMaxRetryAfter = 2 * time.Second })
	s.chatFault(t, "GET", chatLookup, "").must(t, 200)                                 // a miss: Slack is asked
	s.chatFault(t, "GET", chatLookup, "").must(t, 200)                                 // a hit
	s.chatFault(t, "GET", "/api/v1/chat/get_user/acme/pingbot/nobody@example.com", "") // Slack: users_not_found
	if r := s.chatFault(t, "POST", chatAction, chatAuthTest); r.code != 200 {
		t.Fatalf("auth.test: %d %s", r.code, r.body)
	}
	// Slack's rate limit, longer than -chat-slack-max-retry-after: one call, not retried.
	f.Inject("conversations.info", slacktest.Fault{Status: 429, RetryAfter: 30})
	jsonError(t, "rate-limited channel", s.chatFault(t, "GET", chatChannelID, ""), 429)

	fams := s.scrape(t)
	for _, c := range []struct {
		name, labels string
		want         float64
	}{
		{"envoy_chat_slack_upstream_rq_total", "slack_method=users.lookupByEmail", 2},
		{"envoy_chat_slack_upstream_rq", "slack_method=users.lookupByEmail,envoy_response_code=200", 2},
		{"envoy_chat_slack_upstream_rq_error", "slack_method=users.lookupByEmail", 1},
		{"envoy_chat_slack_upstream_rq_time", "slack_method=users.lookupByEmail", 2},
		{"envoy_chat_slack_upstream_rq_total", "slack_method=auth.test", 1},
		{"envoy_chat_slack_upstream_rq", "slack_method=conversations.info,envoy_response_code=429", 1},
		{"envoy_chat_cache_hit", "cache=user", 1},
		{"envoy_chat_cache_miss", "cache=user", 2},
		{"envoy_chat_cache_miss", "cache=channel", 1},
	} {
		if v := series(fams, c.name, c.labels); v != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	// The inbound queue's gauges are there too, for the alert on dead letters.
	for _, name := range []string{"envoy_chat_inbound_queue_dead_letter", "envoy_chat_inbound_queue_depth", "envoy_chat_inbound_queue_oldest_age_seconds"} {
		if series(fams, name, "") < 0 {
			t.Errorf("no %s", name)
		}
	}
}

// TestProcessRouteAndBreakerMetrics: /stats/prometheus of a real stack has what an operator of
// Envoy or of any Go service scrapes (issue 42 item 4): the process's and the Go runtime's series,
// the build, the REST latency by route template and method (a read's apart from a write's; a
// request's own path never a label), each cluster's circuit breaker gauges, and a # HELP line for
// every family. /stats (Envoy's text) keeps gantry's own stats only.
func TestProcessRouteAndBreakerMetrics(t *testing.T) {
	s := startStack(t, nil)
	ids := []string{s.createCredential("db", map[string]any{"password": "p"}), s.createCredential("api", map[string]any{"k": "v"})}
	for _, id := range ids {
		s.get("/v1/credentials/"+id).must(t, 200)
	}
	for _, path := range []string{"/v1/no-such-route/1", "/v1/no-such-route/2"} {
		if r := s.get(path); r.code != http.StatusNotFound {
			t.Fatalf("%s: %d %s", path, r.code, r.body)
		}
	}

	fams := s.scrape(t)
	for _, name := range []string{
		"process_resident_memory_bytes", "process_virtual_memory_bytes", "process_open_fds", "process_max_fds",
		"process_cpu_seconds_total", "process_start_time_seconds",
		"go_goroutines", "go_threads", "go_gc_duration_seconds", "go_memstats_heap_inuse_bytes", "go_memstats_alloc_bytes",
	} {
		if fams[name] == nil {
			t.Errorf("no %s", name)
		}
	}
	if v := series(fams, "process_open_fds", ""); v <= 0 {
		t.Errorf("process_open_fds = %v", v)
	}
	info := fams["gantry_build_info"]
	if info == nil || len(info.GetMetric()) != 1 {
		t.Fatalf("gantry_build_info: %v", info)
	}
	labels := map[string]string{}
	for _, l := range info.GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["version"] == "" || labels["revision"] == "" || !strings.HasPrefix(labels["goversion"], "go") || info.GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Errorf("gantry_build_info: %v", info)
	}

	const route = "envoy_http_route_downstream_rq_time"
	if got := fams[route].GetType(); got != dto.MetricType_HISTOGRAM {
		t.Fatalf("%s is a %v, want a histogram", route, got)
	}
	for _, c := range []struct {
		labels string
		want   float64
	}{
		{"envoy_http_conn_manager_prefix=ingress,method=POST,route=/v1/credentials", 2},
		{"envoy_http_conn_manager_prefix=ingress,method=GET,route=/v1/credentials/{id}", 2},
		{"envoy_http_conn_manager_prefix=ingress,method=GET,route=other", 2},
	} {
		if v := series(fams, route, c.labels); v != c.want {
			t.Errorf("%s{%s} = %v, want %v", route, c.labels, v, c.want)
		}
	}
	for _, m := range fams[route].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "route" && l.GetValue() != "other" && l.GetValue() != "/healthcheck" && (strings.Contains(l.GetValue(), ids[0]) || !strings.HasPrefix(l.GetValue(), "/")) {
				t.Errorf("route label %q is not a template", l.GetValue())
			}
			if l.GetName() == "route" && strings.Contains(l.GetValue(), "no-such-route") {
				t.Errorf("a request's own path is a label: %q", l.GetValue())
			}
		}
	}

	// Envoy's breaker gauges of each cluster: closed, with room left.
	for _, cluster := range []string{"secrets", "chat"} {
		for _, name := range []string{"rq_open", "rq_pending_open", "rq_retry_open"} {
			if v := series(fams, "envoy_cluster_circuit_breakers_default_"+name, "envoy_cluster_name="+cluster); v != 0 {
				t.Errorf("%s %s = %v, want 0", cluster, name, v)
			}
		}
		for _, name := range []string{"remaining_rq", "remaining_pending", "remaining_retries"} {
			if v := series(fams, "envoy_cluster_circuit_breakers_default_"+name, "envoy_cluster_name="+cluster); v <= 0 {
				t.Errorf("%s %s = %v, want room left", cluster, name, v)
			}
		}
	}

	for name, f := range fams {
		if f.GetHelp() == "" {
			t.Errorf("%s has no # HELP", name)
		}
	}

	// The process's series are Prometheus's only; /stats has the route's histogram.
	text := string(s.admin("/stats").body)
	if strings.Contains(text, "go_goroutines") || strings.Contains(text, "process_") {
		t.Errorf("/stats has the Prometheus-only process series")
	}
	if !strings.Contains(text, "http.ingress.route.GET./v1/credentials/{id}.downstream_rq_time: P0(") {
		t.Errorf("/stats lacks the route histogram:\n%s", text)
	}
}

// TestSplitServicesServeTheirStatsOnStatsListen: a secrets process of its own (no gateway, so no
// admin port) serves its stats on -stats-listen; a write through a gateway in another process shows
// there, not on the gateway's admin port, which has the gateway's own stats. The listener is
// read-only and serves nothing else.
func TestSplitServicesServeTheirStatsOnStatsListen(t *testing.T) {
	services := startStack(t, func(c *stack.Config) { c.Target = "secrets,chat"; c.StatsListen = "127.0.0.1:0" })
	if services.StatsAddr == "" || services.AdminAddr != "" {
		t.Fatalf("stats %q admin %q: want a stats listener and no admin port", services.StatsAddr, services.AdminAddr)
	}
	gw := splitGateway(t, services, nil)
	gw.createCredential("db", map[string]any{"password": "p"})

	stats := &testStack{t: t, adm: "http://" + services.StatsAddr}
	fams := stats.scrape(t)
	if v := series(fams, "envoy_secrets_store_rq_total", "operation=put_credential"); v != 1 {
		t.Errorf("secrets process: put_credential = %v, want 1", v)
	}
	if v := series(fams, "envoy_secrets_authn", "auth_method=kmsauth,result=success"); v != 1 {
		t.Errorf("secrets process: kmsauth successes = %v, want 1", v)
	}
	if series(fams, "envoy_chat_inbound_queue_depth", "") < 0 {
		t.Error("the chat role of the process has no inbound queue gauge")
	}
	if v := series(gw.scrape(t), "envoy_secrets_store_rq_total", "operation=put_credential"); v != -1 {
		t.Errorf("the gateway process reports the secrets process's store: %v", v)
	}
	if r := stats.admin("/stats?filter=^secrets.authn"); r.code != http.StatusOK || !strings.Contains(string(r.body), "secrets.authn.kmsauth.success: 1\n") {
		t.Errorf("/stats?filter: %d %s", r.code, r.body)
	}
	for _, c := range []struct{ method, path string }{{"GET", "/clusters"}, {"POST", "/quitquitquit"}, {"POST", "/stats/prometheus"}, {"POST", "/healthcheck/fail"}, {"POST", "/ready"}} {
		if r := stats.do(c.method, stats.adm+c.path, "", nil); r.code != http.StatusNotFound && r.code != http.StatusMethodNotAllowed {
			t.Errorf("%s %s on the stats listener: %d, want 404 or 405", c.method, c.path, r.code)
		}
	}
}

// TestAlertRulesAndDashboardUseExportedMetrics: every envoy_*, process_*, go_* and gantry_* series the alerting rules and the
// dashboard under deploy/prometheus query is one /stats/prometheus exports once the services have
// served a call each, so a renamed stat or a typo in a rule cannot silently leave an alert that
// never fires.
func TestAlertRulesAndDashboardUseExportedMetrics(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	s := startChat(t, f, chatTeams+chatACL, nil)
	s.createCredential("db", map[string]any{"password": "p"})
	s.chatFault(t, "GET", chatLookup, "").must(t, 200)
	fams := s.scrape(t)
	// Exported only where the feature is on.
	conditional := map[string]string{"envoy_server_days_until_first_cert_expiring": "the gateway serves TLS (-gateway-tls-cert-file)"}

	var exprs []string
	rulesYAML, err := os.ReadFile("../../deploy/prometheus/gantry-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(rulesYAML, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	dashJSON, err := os.ReadFile("../../deploy/prometheus/gantry-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(dashJSON, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	if len(exprs) < 20 {
		t.Fatalf("read only %d expressions", len(exprs))
	}
	// Envoy's tag names (envoy_cluster_name, envoy_response_code) are labels, not series.
	labels := map[string]bool{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
	}
	// gantry's own series and the process's and runtime's (process_*, go_*, gantry_build_info).
	metric := regexp.MustCompile(`\b(?:envoy|process|go|gantry)_[a-z0-9_]+`)
	seen := 0
	for _, e := range exprs {
		for _, name := range metric.FindAllString(e, -1) {
			if labels[name] {
				continue
			}
			seen++
			if _, ok := fams[name]; ok {
				continue
			}
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				base = strings.TrimSuffix(base, suffix)
			}
			if _, ok := fams[base]; ok {
				continue
			}
			if why, ok := conditional[base]; ok {
				t.Logf("%s is exported only when %s", base, why)
				continue
			}
			t.Errorf("%s (in %q) is not exported by /stats/prometheus", name, e)
		}
	}
	t.Logf("%d expressions, %d metric references checked", len(exprs), seen)
}
