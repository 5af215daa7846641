package proxyadmin

import (
	"bytes"
	"net/http"
	"regexp"
	"runtime"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-dev/gantry/pkg/buildinfo"
	"github.com/gantry-dev/gantry/pkg/stats"
)

// promLabel is one tag extracted from a dotted stat name.
type promLabel struct{ name, value string }

var (
	responseCode      = regexp.MustCompile(`^(.*_rq)_([1-5][0-9][0-9])$`)
	responseCodeClass = regexp.MustCompile(`^(.*_rq)_([1-5])xx$`)
	notPromChar       = regexp.MustCompile(`[^a-zA-Z0-9_]`)
)

// tagRules extract the tags of gantry's own services' stats, as Envoy's stats_tags do for its own:
// each named group but "stat" becomes a label, and the stat is renamed prefix.stat (prefix alone
// without a "stat" group). A Slack method keeps its dots (chat.slack.chat.postMessage.upstream_rq_total).
var tagRules = []struct {
	re     *regexp.Regexp
	prefix string
}{
	{regexp.MustCompile(`^secrets\.authn\.(?P<auth_method>[a-z_]+)\.(?P<result>[a-z_]+)$`), "secrets.authn"},
	{regexp.MustCompile(`^secrets\.kms\.(?P<operation>[a-z_]+)\.(?P<stat>rq_[a-z_]+)$`), "secrets.kms"},
	{regexp.MustCompile(`^secrets\.store\.(?P<operation>[a-z_]+)\.(?P<stat>rq_[a-z_]+)$`), "secrets.store"},
	{regexp.MustCompile(`^secrets\.sealed\.(?P<key_id>[a-z0-9]+)\.v(?P<key_version>[0-9]+)\.revisions$`), "secrets.sealed_revisions"},
	{regexp.MustCompile(`^chat\.slack\.(?P<slack_method>[A-Za-z_.]+)\.(?P<stat>upstream_rq_[a-z0-9_]+)$`), "chat.slack"},
	{regexp.MustCompile(`^chat\.cache\.(?P<cache>[a-z_]+)\.(?P<stat>hit|miss)$`), "chat.cache"},
	// A chat handler's match (a regex, a command, a callback id; already reduced to [A-Za-z0-9_-])
	// is a label value, never part of a metric's name: one family per outcome, as many series as the
	// configuration has handlers.
	{regexp.MustCompile(`^chat\.inbound\.handler\.(?P<handler_kind>[a-z]+)\.(?P<handler>[^.]+)\.(?P<stat>[a-z_]+)$`), "chat.inbound.handler"},
	// The help handler has no match (chat.inbound.handler.help.dispatched): help is its kind and its
	// name, so the family's series all have both labels.
	{regexp.MustCompile(`^chat\.inbound\.handler\.(?P<handler_kind>(?P<handler>help))\.(?P<stat>[a-z_]+)$`), "chat.inbound.handler"},
	// The REST listener's latency by route (gateway/routestats.go): the method and the route's path
	// template (or "other") are labels. The template keeps its slashes and braces, and may hold dots.
	{regexp.MustCompile(`^http\.ingress\.route\.(?P<method>[A-Za-z]+)\.(?P<route>.+)\.(?P<stat>downstream_rq_time)$`), "http.ingress.route"},
}

// promName applies Envoy's tag extraction to a dotted stat name: the cluster name of cluster.<name>.*,
// the prefix of http.<prefix>.*, and the response code or class of *_rq_<code> / *_rq_<class>xx
// become labels, and what is left becomes the metric name, with envoy_ in front and every character
// Prometheus does not allow replaced by _. So cluster.chat.upstream_rq_200 is
// envoy_cluster_upstream_rq{envoy_cluster_name="chat",envoy_response_code="200"}.
func promName(name string) (string, []promLabel) {
	var labels []promLabel
	for _, r := range tagRules {
		m := r.re.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		stat := ""
		for i, g := range r.re.SubexpNames() {
			switch g {
			case "":
			case "stat":
				stat = m[i]
			default:
				labels = append(labels, promLabel{g, m[i]})
			}
		}
		name = r.prefix
		if stat != "" {
			name += "." + stat
		}
		break
	}
	parts := strings.SplitN(name, ".", 3)
	if len(parts) == 3 {
		switch parts[0] {
		case "cluster":
			labels = append(labels, promLabel{"envoy_cluster_name", parts[1]})
			name = parts[0] + "." + parts[2]
		case "http":
			labels = append(labels, promLabel{"envoy_http_conn_manager_prefix", parts[1]})
			name = parts[0] + "." + parts[2]
		}
	}
	if m := responseCode.FindStringSubmatch(name); m != nil {
		labels = append(labels, promLabel{"envoy_response_code", m[2]})
		name = m[1]
	} else if m := responseCodeClass.FindStringSubmatch(name); m != nil {
		labels = append(labels, promLabel{"envoy_response_code_class", m[2]})
		name = m[1] + "_xx"
	}
	return "envoy_" + notPromChar.ReplaceAllString(name, "_"), labels
}

// statsCollector exposes a snapshot of stats to a client_golang registry. Counters are exported
// with their totals: /reset_counters only zeroes the local view, so Prometheus rates stay right.
type statsCollector struct {
	stats []stats.Stat
	hists []stats.HistogramSnapshot
}

// Describe sends nothing, which makes this an unchecked collector: the set of stats grows as
// clusters see new response codes.
func (statsCollector) Describe(chan<- *prometheus.Desc) {}

func (c statsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.stats {
		name, labels := promName(st.Name)
		names := make([]string, len(labels))
		values := make([]string, len(labels))
		for i, l := range labels {
			names[i], values[i] = l.name, l.value
		}
		typ := prometheus.CounterValue
		if st.Kind == stats.KindGauge {
			typ = prometheus.GaugeValue
		}
		m, err := prometheus.NewConstMetric(prometheus.NewDesc(name, "", names, nil), typ, float64(st.Total), values...)
		if err != nil {
			m = prometheus.NewInvalidMetric(prometheus.NewDesc(name, "", names, nil), err)
		}
		ch <- m
	}
	// Histograms keep Envoy's millisecond buckets, as Envoy's exporter does.
	for _, h := range c.hists {
		name, labels := promName(h.Name)
		names := make([]string, len(labels))
		values := make([]string, len(labels))
		for i, l := range labels {
			names[i], values[i] = l.name, l.value
		}
		buckets := make(map[float64]uint64, len(stats.HistogramBounds))
		for i, b := range stats.HistogramBounds {
			buckets[b] = h.Cumulative[i]
		}
		desc := prometheus.NewDesc(name, "", names, nil)
		m, err := prometheus.NewConstHistogram(desc, h.Count, h.SumMs, buckets, values...)
		if err != nil {
			m = prometheus.NewInvalidMetric(desc, err)
		}
		ch <- m
	}
}

// prometheusPage renders stats in the Prometheus text exposition format through client_golang:
// one # HELP and one # TYPE line per family, families sorted, a blank line after each family. With
// process true (no filter asked for), the process's and the Go runtime's collectors (process_*,
// go_*: memory, open file descriptors, GC, goroutines) and gantry_build_info come too.
func prometheusPage(all []stats.Stat, hists []stats.HistogramSnapshot, process bool) Page {
	reg := prometheus.NewRegistry()
	collectors := []prometheus.Collector{statsCollector{stats: all, hists: hists}}
	if process {
		collectors = append(collectors, processCollector, goCollector, buildInfo)
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return textPage(http.StatusInternalServerError, "cannot render stats\n")
		}
	}
	families, err := reg.Gather()
	if err != nil {
		return textPage(http.StatusInternalServerError, "cannot render stats\n")
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range families {
		if mf.GetHelp() == "" {
			mf.Help = proto.String(familyHelp(mf.GetName()))
		}
		if err := enc.Encode(mf); err != nil {
			return textPage(http.StatusInternalServerError, "cannot render stats\n")
		}
		buf.WriteByte('\n')
	}
	return Page{Code: http.StatusOK, ContentType: PrometheusContentType, Body: buf.String()}
}

// The process's collectors, shared by every scrape (each reads /proc or the runtime when gathered).
var (
	processCollector = collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})
	goCollector      = collectors.NewGoCollector()
	buildInfo        = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "gantry_build_info",
		Help:        "Always 1: the version and commit of the running gantry binary and the Go release that built it.",
		ConstLabels: prometheus.Labels{"version": buildinfo.Version, "revision": buildinfo.ShortCommit(), "goversion": runtime.Version()},
	}, func() float64 { return 1 })
)

// familyHelp is the # HELP text of one of gantry's families: what the families of a prefix count,
// and where the table of every series is.
func familyHelp(name string) string {
	for _, h := range helpByPrefix {
		if strings.HasPrefix(name, h.prefix) {
			return h.help + " (docs/operations.md, Metrics)"
		}
	}
	return "gantry statistic (docs/operations.md, Metrics)"
}

var helpByPrefix = []struct{ prefix, help string }{
	{"envoy_cluster_circuit_breakers", "Circuit breaker of an upstream cluster"},
	{"envoy_cluster_health_check", "Active health checks of an upstream cluster's hosts"},
	{"envoy_cluster_outlier_detection", "Outlier detection (ejections) of an upstream cluster's hosts"},
	{"envoy_cluster_upstream_rq_time", "Latency of requests to an upstream cluster, in milliseconds"},
	{"envoy_cluster_upstream_rq", "Requests the gateway sent to an upstream cluster, by outcome"},
	{"envoy_cluster_membership", "Hosts of an upstream cluster: all of them (total), and those neither failing health checks nor ejected (healthy)"},
	{"envoy_cluster_lb_healthy_panic", "Requests an upstream cluster routed in panic mode (fewer healthy hosts than the panic threshold)"},
	{"envoy_cluster_upstream_cx", "Connections the gateway opened to an upstream cluster"},
	{"envoy_cluster_", "Upstream cluster of the gateway"},
	{"envoy_http_route_downstream_rq_time", "Latency of the REST listener's requests by route template and method, in milliseconds (route=\"other\": no route served the request)"},
	{"envoy_http_downstream_rq_time", "Latency of requests on a gateway listener, in milliseconds"},
	{"envoy_http_downstream_rq", "Requests on a gateway listener (ingress: REST; admin), by outcome"},
	{"envoy_http_downstream_cx", "Client connections of a gateway listener"},
	{"envoy_http_slack", "Slack's requests to the gateway's receivers: refused before the chat service saw them, by reason, or in flight unverified"},
	{"envoy_http_", "A gateway listener"},
	{"envoy_server_", "The gantry process (Envoy's server.* stats)"},
	{"envoy_secrets_authn", "Authentications of secrets calls, by method and result"},
	{"envoy_secrets_authz", "Access-control decisions of the secrets service"},
	{"envoy_secrets_kms", "Calls of the secrets service to its key provider, by operation"},
	{"envoy_secrets_store", "Store operations of the secrets service, by operation"},
	{"envoy_secrets_sealed_revisions", "Credential revisions by the master key version that wraps them"},
	{"envoy_secrets_rate_limit", "Writes refused with 429 by the per-principal write rate (-write-rate)"},
	{"envoy_secrets_sealed_not_active", "Credential revisions wrapped under a master key version other than the active one"},
	{"envoy_secrets_", "The secrets service"},
	{"envoy_chat_slack", "Calls of the chat service to Slack's Web API, by method"},
	{"envoy_chat_cache", "Chat lookups served from the cache or not"},
	{"envoy_chat_inbound_handler", "Deliveries to a chat handler (labels: its kind and its match), by outcome"},
	{"envoy_chat_inbound_queue", "The chat inbound event queue"},
	{"envoy_chat_inbound", "Requests Slack sent to the chat receivers, by kind and outcome"},
	{"envoy_chat_", "The chat service"},
	{"envoy_audit", "The audit trail"},
}
