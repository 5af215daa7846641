package proxyadmin

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gantry-dev/gantry/pkg/clusterstatus"
	"github.com/gantry-dev/gantry/pkg/stats"
)

type fakeProxy struct {
	draining bool
	clusters []clusterstatus.Cluster
	store    *stats.Store
	certs    []CertContext
	levels   map[string]string
	profile  string
	quits    int
}

func newFakeProxy(t *testing.T) *fakeProxy {
	store := stats.New()
	store.Counter("cluster.chat.upstream_rq_total").Add(7)
	store.Counter("cluster.chat.upstream_rq_200").Add(5)
	store.Counter("cluster.chat.upstream_rq_2xx").Add(5)
	store.Counter("cluster.chat.upstream_rq_503").Add(2)
	store.Counter("cluster.chat.upstream_rq_5xx").Add(2)
	store.Gauge("cluster.chat.upstream_rq_active").Set(1)
	store.Counter("http.ingress.downstream_rq_total").Add(9)
	store.Counter("http.ingress.downstream_rq_2xx").Add(9)
	store.GaugeFunc("server.live", func() int64 { return 1 })
	store.Counter("server.never_used")
	return &fakeProxy{
		store:   store,
		levels:  map[string]string{"gateway": "info", "gateway.upstream": "info"},
		profile: filepath.Join(t.TempDir(), "gantry.prof"),
		clusters: []clusterstatus.Cluster{{Name: "chat", OutlierDetection: true, Hosts: []clusterstatus.Host{
			{Address: "10.0.0.5:9091", Weight: 3, Zone: "us-east-1a", Canary: true, FailedActiveHC: true, FailedOutlierCheck: true,
				Stats: []clusterstatus.HostStat{{Name: "cx_active", Value: 1, Gauge: true}, {Name: "cx_total", Value: 2}, {Name: "rq_total", Value: 4}}},
			{Address: "10.0.0.6:9091", Weight: 1, Stats: []clusterstatus.HostStat{{Name: "rq_total"}}},
		}}},
	}
}

func (p *fakeProxy) Draining() bool                        { return p.draining }
func (p *fakeProxy) SetDraining(on bool)                   { p.draining = on }
func (p *fakeProxy) Clusters() []clusterstatus.Cluster     { return p.clusters }
func (p *fakeProxy) Stats() []stats.Stat                   { return p.store.Snapshot() }
func (p *fakeProxy) Histograms() []stats.HistogramSnapshot { return p.store.Histograms() }
func (p *fakeProxy) ResetCounters()                        { p.store.Reset() }
func (p *fakeProxy) Certs() []CertContext                  { return p.certs }
func (p *fakeProxy) LogLevels() map[string]string          { return p.levels }
func (p *fakeProxy) ProfilePath() string                   { return p.profile }
func (p *fakeProxy) Unhealthy() string                     { return "" }
func (p *fakeProxy) Quit()                                 { p.quits++ }
func (p *fakeProxy) SetLogLevel(name, level string) error {
	if name == "" {
		for n := range p.levels {
			p.levels[n] = level
		}
		return nil
	}
	if _, ok := p.levels[name]; !ok {
		return errors.New("unknown logger name")
	}
	p.levels[name] = level
	return nil
}

func TestServerInfo(t *testing.T) {
	start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	proxy := newFakeProxy(t)
	svc := NewService(proxy, start)
	svc.now = func() time.Time { return start.Add(1571*time.Second + 300*time.Millisecond) }

	line := regexp.MustCompile(`^gantry [0-9a-f]{6}/(RELEASE|DEBUG) (live|draining) 1571 1571 0\n$`)
	if got := svc.ServerInfo(); !line.MatchString(got) || !strings.Contains(got, " live ") {
		t.Errorf("ServerInfo() = %q, want Envoy 1.x line with state live", got)
	}
	var info map[string]any
	p := svc.ServerInfoPage("format=json")
	if err := json.Unmarshal([]byte(p.Body), &info); err != nil || p.ContentType != JSONContentType ||
		info["state"] != "LIVE" || info["uptime_all_epochs"] != "1571s" || info["hot_restart_version"] != "disabled" {
		t.Errorf("json server_info = %s (%v)", p.Body, err)
	}
	proxy.draining = true
	if got := svc.ServerInfo(); !line.MatchString(got) || !strings.Contains(got, " draining ") {
		t.Errorf("ServerInfo() = %q, want state draining", got)
	}
}

func TestMenuListsEveryEndpointOfTheSpec(t *testing.T) {
	menu := Menu()
	for _, p := range []string{"/certs", "/clusters", "/cpuprofiler", "/healthcheck/fail", "/healthcheck/ok",
		"/hot_restart_version", "/logging", "/quitquitquit", "/reset_counters", "/server_info", "/stats",
		"/stats/prometheus", "/ready"} {
		if !strings.Contains(menu, "\n  "+p+": ") {
			t.Errorf("menu lacks %s:\n%s", p, menu)
		}
	}
}

func TestSimplePages(t *testing.T) {
	proxy := newFakeProxy(t)
	svc := NewService(proxy, time.Now())
	tests := []struct {
		name     string
		page     func() Page
		wantCode int
		wantBody string
		after    func(t *testing.T)
	}{
		{"hot restart version has no newline", svc.HotRestartVersion, 200, "disabled", nil},
		{"ready live", svc.Ready, 200, "LIVE\n", nil},
		{"healthcheck fail", svc.HealthcheckFail, 200, "OK\n", func(t *testing.T) {
			if !proxy.draining {
				t.Error("not draining")
			}
		}},
		{"ready draining", svc.Ready, 503, "DRAINING\n", nil},
		{"healthcheck ok", svc.HealthcheckOK, 200, "OK\n", func(t *testing.T) {
			if proxy.draining {
				t.Error("still draining")
			}
		}},
		{"quitquitquit", svc.QuitQuitQuit, 200, "OK\n", func(t *testing.T) {
			if proxy.quits != 1 {
				t.Errorf("Quit called %d times", proxy.quits)
			}
		}},
		{"reset counters", svc.ResetCounters, 200, "OK\n", nil},
		{"certs without TLS", svc.Certs, 200, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.page()
			if p.Code != tt.wantCode || p.Body != tt.wantBody || p.ContentType != TextContentType {
				t.Errorf("got %d %q %q, want %d %q", p.Code, p.ContentType, p.Body, tt.wantCode, tt.wantBody)
			}
			if tt.after != nil {
				tt.after(t)
			}
		})
	}
}

func TestCerts(t *testing.T) {
	proxy := newFakeProxy(t)
	proxy.certs = []CertContext{{CertChain: &CertDetail{Path: "/etc/gantry/tls.pem", SerialNumber: "3c4d", DaysUntilExpiration: 300}}}
	want := "{\n\t\"ca_cert\": \"\",\n\t\"cert_chain\": \"Certificate Path: /etc/gantry/tls.pem, Serial Number: 3c4d, Days until Expiration: 300\"\n}\n"
	if got := NewService(proxy, time.Now()).Certs(); got.Code != 200 || got.Body != want {
		t.Errorf("certs = %d %q, want %q", got.Code, got.Body, want)
	}
}

func TestClustersText(t *testing.T) {
	got := NewService(newFakeProxy(t), time.Now()).Clusters("").Body
	want := `chat::outlier::success_rate_average::-1
chat::outlier::success_rate_ejection_threshold::-1
chat::default_priority::max_connections::1024
chat::default_priority::max_pending_requests::1024
chat::default_priority::max_requests::1024
chat::default_priority::max_retries::3
chat::high_priority::max_connections::1024
chat::high_priority::max_pending_requests::1024
chat::high_priority::max_requests::1024
chat::high_priority::max_retries::3
chat::added_via_api::false
chat::10.0.0.5:9091::cx_active::1
chat::10.0.0.5:9091::cx_total::2
chat::10.0.0.5:9091::rq_total::4
chat::10.0.0.5:9091::hostname::
chat::10.0.0.5:9091::health_flags::/failed_active_hc/failed_outlier_check
chat::10.0.0.5:9091::weight::3
chat::10.0.0.5:9091::region::
chat::10.0.0.5:9091::zone::us-east-1a
chat::10.0.0.5:9091::sub_zone::
chat::10.0.0.5:9091::canary::true
chat::10.0.0.5:9091::priority::0
chat::10.0.0.5:9091::success_rate::-1
chat::10.0.0.5:9091::local_origin_success_rate::-1
chat::10.0.0.6:9091::rq_total::0
chat::10.0.0.6:9091::hostname::
chat::10.0.0.6:9091::health_flags::healthy
chat::10.0.0.6:9091::weight::1
chat::10.0.0.6:9091::region::
chat::10.0.0.6:9091::zone::
chat::10.0.0.6:9091::sub_zone::
chat::10.0.0.6:9091::canary::false
chat::10.0.0.6:9091::priority::0
chat::10.0.0.6:9091::success_rate::-1
chat::10.0.0.6:9091::local_origin_success_rate::-1
`
	if got != want {
		t.Errorf("/clusters =\n%s\nwant\n%s", got, want)
	}
}

func TestHealthFlags(t *testing.T) {
	for _, tt := range []struct {
		hc, od bool
		want   string
	}{{false, false, "healthy"}, {true, false, "/failed_active_hc"}, {false, true, "/failed_outlier_check"}, {true, true, "/failed_active_hc/failed_outlier_check"}} {
		if got := healthFlags(clusterstatus.Host{FailedActiveHC: tt.hc, FailedOutlierCheck: tt.od}); got != tt.want {
			t.Errorf("hc=%v od=%v: %q, want %q", tt.hc, tt.od, got, tt.want)
		}
	}
}

func TestClustersJSON(t *testing.T) {
	p := NewService(newFakeProxy(t), time.Now()).Clusters("format=json")
	var got struct {
		ClusterStatuses []struct {
			Name         string `json:"name"`
			HostStatuses []struct {
				Address struct {
					SocketAddress struct {
						Address   string `json:"address"`
						PortValue int    `json:"port_value"`
					} `json:"socket_address"`
				} `json:"address"`
				Stats []struct {
					Name, Value, Type string
				} `json:"stats"`
				HealthStatus struct {
					FailedActiveHealthCheck bool `json:"failed_active_health_check"`
					FailedOutlierCheck      bool `json:"failed_outlier_check"`
				} `json:"health_status"`
				Weight   int  `json:"weight"`
				Canary   bool `json:"canary"`
				Locality struct {
					Zone string `json:"zone"`
				} `json:"locality"`
			} `json:"host_statuses"`
		} `json:"cluster_statuses"`
	}
	if err := json.Unmarshal([]byte(p.Body), &got); err != nil || p.ContentType != JSONContentType {
		t.Fatalf("%s: %v", p.Body, err)
	}
	h := got.ClusterStatuses[0].HostStatuses[0]
	if got.ClusterStatuses[0].Name != "chat" || h.Address.SocketAddress.Address != "10.0.0.5" || h.Address.SocketAddress.PortValue != 9091 ||
		!h.HealthStatus.FailedActiveHealthCheck || !h.HealthStatus.FailedOutlierCheck || h.Weight != 3 || !h.Canary || h.Locality.Zone != "us-east-1a" {
		t.Errorf("host = %+v", h)
	}
	if s := h.Stats[0]; s.Name != "cx_active" || s.Value != "1" || s.Type != "GAUGE" {
		t.Errorf("first stat = %+v, want cx_active 1 GAUGE (proto3 JSON: uint64 as string)", s)
	}
	if s := got.ClusterStatuses[0].HostStatuses[1].Stats[0]; s.Value != "" || s.Type != "" {
		t.Errorf("zero counter = %+v, want value and type left out as proto3 JSON does", s)
	}
}

func TestStats(t *testing.T) {
	proxy := newFakeProxy(t)
	svc := NewService(proxy, time.Now())
	tests := []struct {
		name, query string
		wantCode    int
		wantBody    string
	}{
		{"all sorted", "", 200, "cluster.chat.upstream_rq_200: 5\ncluster.chat.upstream_rq_2xx: 5\ncluster.chat.upstream_rq_503: 2\n" +
			"cluster.chat.upstream_rq_5xx: 2\ncluster.chat.upstream_rq_active: 1\ncluster.chat.upstream_rq_total: 7\n" +
			"http.ingress.downstream_rq_2xx: 9\nhttp.ingress.downstream_rq_total: 9\nserver.live: 1\nserver.never_used: 0\n"},
		{"filter partial match", "filter=rq_total", 200, "cluster.chat.upstream_rq_total: 7\nhttp.ingress.downstream_rq_total: 9\n"},
		{"filter anchored", "filter=%5Eserver%5C.", 200, "server.live: 1\nserver.never_used: 0\n"},
		{"usedonly", "usedonly&filter=server", 200, "server.live: 1\n"},
		{"bad regex", "filter=(", 400, "Invalid re2 regex\n"},
		{"bad format", "format=xml", 400, "usage: /stats?format=(json|prometheus|text)\n"},
		// type= keeps one kind, as Envoy's admin does (on main it was ignored).
		{"type gauges", "type=Gauges", 200, "cluster.chat.upstream_rq_active: 1\nserver.live: 1\n"},
		{"type counters with filter", "type=Counters&filter=%5Eserver", 200, "server.never_used: 0\n"},
		{"type all", "type=All&filter=%5Eserver", 200, "server.live: 1\nserver.never_used: 0\n"},
		{"type histograms without any", "type=Histograms", 200, ""},
		{"type text readouts: gantry has none", "type=TextReadouts", 200, ""},
		{"bad type", "type=gauges", 400, "invalid &type= param\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := svc.Stats(tt.query)
			if p.Code != tt.wantCode || p.Body != tt.wantBody {
				t.Errorf("got %d\n%s\nwant %d\n%s", p.Code, p.Body, tt.wantCode, tt.wantBody)
			}
		})
	}
	p := svc.Stats("format=json&filter=upstream_rq_total")
	var got struct {
		Stats []struct {
			Name  string `json:"name"`
			Value int64  `json:"value"`
		} `json:"stats"`
	}
	if err := json.Unmarshal([]byte(p.Body), &got); err != nil || len(got.Stats) != 1 || got.Stats[0].Value != 7 || p.ContentType != JSONContentType {
		t.Errorf("json = %s (%v)", p.Body, err)
	}
	// reset_counters zeroes counters in /stats, not gauges, and not the Prometheus totals.
	svc.ResetCounters()
	if p := svc.Stats("filter=upstream_rq_(total|active)"); p.Body != "cluster.chat.upstream_rq_active: 1\ncluster.chat.upstream_rq_total: 0\n" {
		t.Errorf("after reset: %q", p.Body)
	}
	if fams := parseProm(t, svc.Prometheus("").Body); fams["envoy_cluster_upstream_rq_total"].GetMetric()[0].GetCounter().GetValue() != 7 {
		t.Errorf("prometheus counter after reset = %v, want the total 7", fams["envoy_cluster_upstream_rq_total"])
	}
}

func parseProm(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("prometheus text does not parse: %v\n%s", err, body)
	}
	return fams
}

func TestPrometheus(t *testing.T) {
	p := NewService(newFakeProxy(t), time.Now()).Prometheus("")
	if p.Code != http.StatusOK || !strings.HasPrefix(p.ContentType, "text/plain; version=0.0.4") {
		t.Fatalf("%d %q", p.Code, p.ContentType)
	}
	// Every family says what it is (issue 42: Prometheus users read # HELP), once.
	if strings.Count(p.Body, "# HELP envoy_cluster_upstream_rq ") != 1 || strings.Count(p.Body, "# HELP ") != strings.Count(p.Body, "# TYPE ") {
		t.Errorf("want one # HELP line per family:\n%s", p.Body)
	}
	if strings.Count(p.Body, "# TYPE envoy_cluster_upstream_rq counter\n") != 1 {
		t.Errorf("want exactly one TYPE line per family:\n%s", p.Body)
	}
	fams := parseProm(t, p.Body)
	want := map[string]string{
		`envoy_cluster_upstream_rq_total{envoy_cluster_name="chat"}`:                            "7",
		`envoy_cluster_upstream_rq{envoy_cluster_name="chat",envoy_response_code="200"}`:        "5",
		`envoy_cluster_upstream_rq{envoy_cluster_name="chat",envoy_response_code="503"}`:        "2",
		`envoy_cluster_upstream_rq_xx{envoy_cluster_name="chat",envoy_response_code_class="5"}`: "2",
		`envoy_http_downstream_rq_total{envoy_http_conn_manager_prefix="ingress"}`:              "9",
		`envoy_server_live`: "1",
	}
	for series, v := range want {
		if !strings.Contains(p.Body, series+" "+v+"\n") {
			t.Errorf("missing %s %s in\n%s", series, v, p.Body)
		}
	}
	if fams["envoy_server_live"].GetType().String() != "GAUGE" || fams["envoy_cluster_upstream_rq_total"].GetType().String() != "COUNTER" {
		t.Errorf("types: %v %v", fams["envoy_server_live"].GetType(), fams["envoy_cluster_upstream_rq_total"].GetType())
	}
	// The process's and the Go runtime's series, and the build's.
	for _, name := range []string{"process_resident_memory_bytes", "process_open_fds", "go_goroutines", "go_gc_duration_seconds", "go_memstats_heap_inuse_bytes", "gantry_build_info"} {
		if fams[name] == nil {
			t.Errorf("no %s", name)
		}
	}
	if info := fams["gantry_build_info"]; info != nil {
		labels := map[string]string{}
		for _, l := range info.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["version"] == "" || labels["goversion"] == "" || labels["revision"] == "" || info.GetMetric()[0].GetGauge().GetValue() != 1 {
			t.Errorf("gantry_build_info: %v", info)
		}
	}
	// A filter selects gantry's stats alone.
	filtered := parseProm(t, NewService(newFakeProxy(t), time.Now()).Prometheus("filter=upstream_rq").Body)
	if filtered["go_goroutines"] != nil || filtered["envoy_cluster_upstream_rq_total"] == nil {
		t.Errorf("filter=upstream_rq: %v", filtered)
	}
}

func TestPromName(t *testing.T) {
	tests := []struct{ in, name, labels string }{
		{"cluster.chat.upstream_rq_total", "envoy_cluster_upstream_rq_total", "envoy_cluster_name=chat"},
		{"cluster.chat.upstream_rq_404", "envoy_cluster_upstream_rq", "envoy_cluster_name=chat,envoy_response_code=404"},
		{"cluster.chat.upstream_rq_4xx", "envoy_cluster_upstream_rq_xx", "envoy_cluster_name=chat,envoy_response_code_class=4"},
		{"cluster.my-svc.health_check.attempt", "envoy_cluster_health_check_attempt", "envoy_cluster_name=my-svc"},
		{"http.admin.downstream_rq_2xx", "envoy_http_downstream_rq_xx", "envoy_http_conn_manager_prefix=admin,envoy_response_code_class=2"},
		{"server.uptime", "envoy_server_uptime", ""},
		{"secrets.authn.kmsauth.failure", "envoy_secrets_authn", "auth_method=kmsauth,result=failure"},
		// A handler's match is a label value, never part of the name (issue 42).
		{"chat.inbound.handler.regex.____.failed", "envoy_chat_inbound_handler_failed", "handler_kind=regex,handler=____"},
		{"chat.inbound.handler.slash.deploy-app.response_refused", "envoy_chat_inbound_handler_response_refused", "handler_kind=slash,handler=deploy-app"},
		{"chat.inbound.handler.help.dispatched", "envoy_chat_inbound_handler_dispatched", "handler_kind=help,handler=help"},
		{"chat.inbound.handler.regex.deploy_.failed", "envoy_chat_inbound_handler_failed", "handler_kind=regex,handler=deploy_"},
		// The REST listener's latency by route: method and template are labels (issue 42).
		{"http.ingress.route.GET./v1/credentials/{id}.downstream_rq_time", "envoy_http_route_downstream_rq_time", "method=GET,route=/v1/credentials/{id},envoy_http_conn_manager_prefix=ingress"},
		{"http.ingress.route.other.other.downstream_rq_time", "envoy_http_route_downstream_rq_time", "method=other,route=other,envoy_http_conn_manager_prefix=ingress"},
		{"http.ingress.route.POST./api/v2/slack/action/{team_name}/{bot_name}.downstream_rq_time", "envoy_http_route_downstream_rq_time", "method=POST,route=/api/v2/slack/action/{team_name}/{bot_name},envoy_http_conn_manager_prefix=ingress"},
		{"http.ingress.downstream_rq_time", "envoy_http_downstream_rq_time", "envoy_http_conn_manager_prefix=ingress"},
		{"secrets.kms.decrypt.rq_time", "envoy_secrets_kms_rq_time", "operation=decrypt"},
		{"secrets.store.put_credential.rq_error", "envoy_secrets_store_rq_error", "operation=put_credential"},
		{"secrets.store.write_queue_depth", "envoy_secrets_store_write_queue_depth", ""},
		{"secrets.sealed.0123456789abcdef0123456789abcdef.v2.revisions", "envoy_secrets_sealed_revisions", "key_id=0123456789abcdef0123456789abcdef,key_version=2"},
		{"secrets.sealed.not_active", "envoy_secrets_sealed_not_active", ""},
		{"chat.slack.chat.postMessage.upstream_rq_429", "envoy_chat_slack_upstream_rq", "slack_method=chat.postMessage,envoy_response_code=429"},
		{"chat.slack.users.lookupByEmail.upstream_rq_total", "envoy_chat_slack_upstream_rq_total", "slack_method=users.lookupByEmail"},
		{"chat.cache.user_by_email.miss", "envoy_chat_cache_miss", "cache=user_by_email"},
	}
	for _, tt := range tests {
		name, labels := promName(tt.in)
		var ls []string
		for _, l := range labels {
			ls = append(ls, l.name+"="+l.value)
		}
		if name != tt.name || strings.Join(ls, ",") != tt.labels {
			t.Errorf("promName(%q) = %q %v, want %q %q", tt.in, name, ls, tt.name, tt.labels)
		}
	}
}

func TestLogging(t *testing.T) {
	proxy := newFakeProxy(t)
	svc := NewService(proxy, time.Now())
	list := func(gw, up string) string {
		return "active loggers:\n  gateway: " + gw + "\n  gateway.upstream: " + up + "\n\n"
	}
	usage := "usage: /logging?<name>=<level> (change single level)\nusage: /logging?level=<level> (change all levels)\n" +
		"levels: trace debug info warning error critical off \n"
	tests := []struct {
		name, query string
		wantCode    int
		wantBody    string
	}{
		{"list", "", 200, list("info", "info")},
		{"one logger", "gateway.upstream=debug", 200, list("info", "debug")},
		{"all loggers", "level=warning", 200, list("warning", "warning")},
		{"unknown logger", "nope=debug", 400, "error: unknown logger name\n\n" + usage + list("warning", "warning")},
		{"unknown level", "level=loud", 400, "error: unknown logger level\n\n" + usage + list("warning", "warning")},
		{"two parameters", "level=info&gateway=debug", 400, "error: invalid number of parameters\n\n" + usage + list("warning", "warning")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := svc.Logging(tt.query)
			if p.Code != tt.wantCode || p.Body != tt.wantBody {
				t.Errorf("got %d\n%q\nwant %d\n%q", p.Code, p.Body, tt.wantCode, tt.wantBody)
			}
		})
	}
}

func TestCPUProfiler(t *testing.T) {
	proxy := newFakeProxy(t)
	svc := NewService(proxy, time.Now())
	for _, q := range []string{"", "enable=maybe", "enable=y&enable=n", "enable=y&x=1", "%zz"} {
		if p := svc.CPUProfiler(q); p.Code != 400 || p.Body != "?enable=<y|n>\n" {
			t.Errorf("%q: %d %q, want 400 ?enable=<y|n>", q, p.Code, p.Body)
		}
	}
	for _, q := range []string{"enable=y", "enable=y", "enable=n", "enable=n"} {
		if p := svc.CPUProfiler(q); p.Code != 200 || p.Body != "OK\n" {
			t.Errorf("%q: %d %q, want 200 OK", q, p.Code, p.Body)
		}
	}
	if fi, err := os.Stat(proxy.profile); err != nil || fi.Size() == 0 {
		t.Errorf("profile file: %v %v", fi, err)
	}
	proxy.profile = filepath.Join(t.TempDir(), "missing", "dir", "x.prof")
	if p := svc.CPUProfiler("enable=y"); p.Code != 500 || p.Body != "failure to start the profiler\n" {
		t.Errorf("unwritable path: %d %q", p.Code, p.Body)
	}
}

func TestHistogramsInEveryFormat(t *testing.T) {
	proxy := newFakeProxy(t)
	h := proxy.store.Histogram("cluster.chat.upstream_rq_time")
	for range 10 {
		h.Record(3 * time.Millisecond)
	}
	proxy.store.Histogram("http.admin.downstream_rq_time") // no samples
	svc := NewService(proxy, time.Now())

	text := svc.Stats("filter=rq_time").Body
	if !regexp.MustCompile(`(?m)^cluster\.chat\.upstream_rq_time: P0\(nan,3\) P25\(nan,[0-9.]+\) P50\(nan,[0-9.]+\) P75\(nan,[0-9.]+\) P90\(nan,[0-9.]+\) P95\(nan,[0-9.]+\) P99\(nan,[0-9.]+\) P99\.5\(nan,[0-9.]+\) P99\.9\(nan,[0-9.]+\) P100\(nan,3\)$`).MatchString(text) ||
		!strings.Contains(text, "http.admin.downstream_rq_time: No recorded values\n") {
		t.Errorf("text:\n%s", text)
	}
	if used := svc.Stats("filter=rq_time&usedonly").Body; strings.Contains(used, "downstream_rq_time") || !strings.Contains(used, "upstream_rq_time") {
		t.Errorf("usedonly:\n%s", used)
	}
	var js struct {
		Stats []struct {
			Histograms *struct {
				Supported []float64 `json:"supported_quantiles"`
				Computed  []struct {
					Name   string `json:"name"`
					Values []struct {
						Cumulative *float64 `json:"cumulative"`
					} `json:"values"`
				} `json:"computed_quantiles"`
			} `json:"histograms"`
		} `json:"stats"`
	}
	if err := json.Unmarshal([]byte(svc.Stats("format=json&filter=upstream_rq_time").Body), &js); err != nil || len(js.Stats) != 1 || js.Stats[0].Histograms == nil ||
		len(js.Stats[0].Histograms.Computed) != 1 || *js.Stats[0].Histograms.Computed[0].Values[0].Cumulative != 3 {
		t.Errorf("json: %+v %v", js, err)
	}
	fams := parseProm(t, svc.Prometheus("filter=rq_time").Body)
	hist := fams["envoy_cluster_upstream_rq_time"]
	if hist == nil || hist.GetMetric()[0].GetHistogram().GetSampleCount() != 10 || len(fams) != 2 {
		t.Fatalf("prometheus histogram: %v (families %d)", hist, len(fams))
	}
	if fams := parseProm(t, svc.Prometheus("usedonly&filter=rq_time").Body); len(fams) != 1 {
		t.Errorf("usedonly on /stats/prometheus kept %d families", len(fams))
	}
	if fams := parseProm(t, svc.Prometheus("filter=%5Eserver%5C.live").Body); len(fams) != 1 || fams["envoy_server_live"] == nil {
		t.Errorf("filter on /stats/prometheus: %v", fams)
	}
	if p := svc.Prometheus("filter=("); p.Code != http.StatusBadRequest {
		t.Errorf("bad regex: %d", p.Code)
	}
}

// TestPrometheusHandlersAndRoutesAreLabels: a chat handler's match and a REST route's template are
// label values of one family per outcome or histogram, never part of a metric's name, the help
// handler included; each of gantry's families has a # HELP line of its own (issue 42).
func TestPrometheusHandlersAndRoutesAreLabels(t *testing.T) {
	proxy := newFakeProxy(t)
	proxy.store.Counter("chat.inbound.handler.regex.____.failed").Inc()
	proxy.store.Counter("chat.inbound.handler.regex.deploy_.failed").Add(2)
	proxy.store.Counter("chat.inbound.handler.slash.deploy-app.dispatched").Inc()
	proxy.store.Counter("chat.inbound.handler.help.dispatched").Inc()
	proxy.store.Histogram("http.ingress.route.GET./v1/credentials/{id}.downstream_rq_time").Record(3 * time.Millisecond)
	proxy.store.Histogram("http.ingress.route.PUT./v1/credentials/{id}.downstream_rq_time").Record(30 * time.Millisecond)
	proxy.store.Histogram("http.ingress.route.other.other.downstream_rq_time").Record(time.Millisecond)
	p := NewService(proxy, time.Now()).Prometheus("")
	if p.Code != http.StatusOK {
		t.Fatalf("%d %s", p.Code, p.Body)
	}
	fams := parseProm(t, p.Body)
	for name, f := range fams {
		if strings.Contains(name, "regex") || strings.Contains(name, "deploy") || strings.Contains(name, "credentials") || strings.Contains(name, "GET") {
			t.Errorf("a handler or a route in a metric's name: %s", name)
		}
		if strings.HasPrefix(name, "envoy_") && (f.GetHelp() == "" || strings.HasPrefix(f.GetHelp(), "gantry statistic")) {
			t.Errorf("%s: # HELP %q says nothing of its own", name, f.GetHelp())
		}
	}
	for _, line := range []string{
		`envoy_chat_inbound_handler_failed{handler="____",handler_kind="regex"} 1`,
		`envoy_chat_inbound_handler_failed{handler="deploy_",handler_kind="regex"} 2`,
		`envoy_chat_inbound_handler_dispatched{handler="deploy-app",handler_kind="slash"} 1`,
		`envoy_chat_inbound_handler_dispatched{handler="help",handler_kind="help"} 1`,
		`envoy_http_route_downstream_rq_time_count{envoy_http_conn_manager_prefix="ingress",method="GET",route="/v1/credentials/{id}"} 1`,
		`envoy_http_route_downstream_rq_time_count{envoy_http_conn_manager_prefix="ingress",method="PUT",route="/v1/credentials/{id}"} 1`,
		`envoy_http_route_downstream_rq_time_count{envoy_http_conn_manager_prefix="ingress",method="other",route="other"} 1`,
		`# HELP envoy_http_route_downstream_rq_time Latency of the REST listener's requests by route template and method`,
	} {
		if !strings.Contains(p.Body, line) {
			t.Errorf("no %s in\n%s", line, p.Body)
		}
	}
}
