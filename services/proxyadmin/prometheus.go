package proxyadmin

import (
	"errors"
	"math"
	"net/http"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"

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

// prometheusPage renders stats in the Prometheus text exposition format (0.0.4), as client_golang's
// encoder does: one # HELP and one # TYPE line per family, families sorted by name, a family's series
// sorted by their label values, label pairs by name, a blank line after each family. gantry's own
// stats are written directly from the snapshot (writeStatsText): building client_golang's metric
// objects for them cost most of a scrape's CPU (TestPrometheusTextMatchesClientGolang holds the two
// byte for byte). With process true (no filter asked for), the process's and the Go runtime's
// collectors (process_*, go_*: memory, open file descriptors, GC, goroutines) and gantry_build_info
// come after them through client_golang: every gantry family is envoy_*, which sorts first.
func prometheusPage(all []stats.Stat, hists []stats.HistogramSnapshot, process bool) Page {
	// A strings.Builder, so the page's body is the buffer itself, not a copy of it; sized from the
	// last page, so it grows at most once.
	var buf strings.Builder
	buf.Grow(int(lastPageSize.Load()) + 4096)
	if err := writeStatsText(&buf, all, hists); err != nil {
		return textPage(http.StatusInternalServerError, "cannot render stats\n")
	}
	if process {
		reg := prometheus.NewRegistry()
		for _, c := range []prometheus.Collector{processCollector, goCollector, buildInfo} {
			if err := reg.Register(c); err != nil {
				return textPage(http.StatusInternalServerError, "cannot render stats\n")
			}
		}
		families, err := reg.Gather()
		if err != nil {
			return textPage(http.StatusInternalServerError, "cannot render stats\n")
		}
		enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, mf := range families {
			if err := enc.Encode(mf); err != nil {
				return textPage(http.StatusInternalServerError, "cannot render stats\n")
			}
			buf.WriteByte('\n')
		}
	}
	lastPageSize.Store(int64(buf.Len()))
	return Page{Code: http.StatusOK, ContentType: PrometheusContentType, Body: buf.String()}
}

// lastPageSize is the size of the last page rendered, to size the next one's buffer.
var lastPageSize atomic.Int64

// promSeries is a stat's exposition form: its family, its label pairs sorted by name, and those pairs
// rendered (name="escaped value",...) without braces.
type promSeries struct {
	family string
	values []string // label values in the order of their sorted names: the series' sort key
	labels string
}

// seriesCache holds the exposition form of every stat name seen: the tag extraction is regular
// expressions, too dear to redo for every stat of every scrape. Stat names are the stats store's, a
// set the code and the configuration bound (clusters, response codes, route templates, handlers);
// seriesCacheLimit bounds the cache even so: past it, names are converted on every scrape.
var (
	seriesCache      sync.Map // stat name → *promSeries
	seriesCacheCount atomic.Int64
)

const seriesCacheLimit = 20000

func seriesOf(statName string) *promSeries {
	if s, ok := seriesCache.Load(statName); ok {
		return s.(*promSeries)
	}
	family, labels := promName(statName)
	sort.SliceStable(labels, func(i, j int) bool { return labels[i].name < labels[j].name })
	s := &promSeries{family: family, values: make([]string, len(labels))}
	var b strings.Builder
	for i, l := range labels {
		// A label value must be UTF-8 (client_golang refused the whole scrape otherwise).
		s.values[i] = strings.ToValidUTF8(l.value, "\uFFFD")
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.name)
		b.WriteString(`="`)
		b.WriteString(labelValueEscaper.Replace(s.values[i]))
		b.WriteByte('"')
	}
	s.labels = b.String()
	if seriesCacheCount.Load() < seriesCacheLimit {
		if _, loaded := seriesCache.LoadOrStore(statName, s); !loaded {
			seriesCacheCount.Add(1)
		}
	}
	return s
}

// The text format's escapes: a label value escapes backslash, double quote and line feed; # HELP
// text backslash and line feed.
var (
	labelValueEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	helpEscaper       = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

// promSample is one series of a family in a scrape: a counter's or gauge's value, or a histogram.
type promSample struct {
	series *promSeries
	value  float64
	hist   *stats.HistogramSnapshot
}

type promFamily struct {
	typ     string // counter, gauge or histogram
	samples []promSample
}

// errInconsistentStats is two stats that are one family with two types, or one series twice: the
// exposition cannot say both (client_golang's Gather refuses such a scrape too).
var errInconsistentStats = errors.New("inconsistent stats for the Prometheus exposition")

// writeStatsText writes gantry's stats as client_golang would expose them as constant counters,
// gauges and histograms (Envoy's millisecond buckets, as Envoy's exporter keeps them). Counters are
// their totals: /reset_counters only zeroes the local view, so Prometheus rates stay right.
func writeStatsText(buf *strings.Builder, all []stats.Stat, hists []stats.HistogramSnapshot) error {
	families := make(map[string]*promFamily)
	add := func(typ string, sample promSample) error {
		f := families[sample.series.family]
		if f == nil {
			f = &promFamily{typ: typ}
			families[sample.series.family] = f
		} else if f.typ != typ {
			return errInconsistentStats
		}
		f.samples = append(f.samples, sample)
		return nil
	}
	for _, st := range all {
		typ := "counter"
		if st.Kind == stats.KindGauge {
			typ = "gauge"
		}
		if err := add(typ, promSample{series: seriesOf(st.Name), value: float64(st.Total)}); err != nil {
			return err
		}
	}
	for i := range hists {
		if err := add("histogram", promSample{series: seriesOf(hists[i].Name), hist: &hists[i]}); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(families))
	for name := range families {
		names = append(names, name)
	}
	sort.Strings(names)
	var num []byte
	for _, name := range names {
		f := families[name]
		sort.Slice(f.samples, func(i, j int) bool { return seriesLess(f.samples[i].series, f.samples[j].series) })
		for i := 1; i < len(f.samples); i++ {
			if !seriesLess(f.samples[i-1].series, f.samples[i].series) {
				return errInconsistentStats
			}
		}
		buf.WriteString("# HELP ")
		buf.WriteString(name)
		buf.WriteByte(' ')
		buf.WriteString(helpEscaper.Replace(familyHelp(name)))
		buf.WriteString("\n# TYPE ")
		buf.WriteString(name)
		buf.WriteByte(' ')
		buf.WriteString(f.typ)
		buf.WriteByte('\n')
		for _, sm := range f.samples {
			if sm.hist == nil {
				num = writePromSample(buf, num, name, "", sm.series.labels, "", sm.value)
				continue
			}
			h := sm.hist
			for i, le := range bucketBounds {
				num = writePromSample(buf, num, name, "_bucket", sm.series.labels, le, float64(h.Cumulative[i]))
			}
			num = writePromSample(buf, num, name, "_bucket", sm.series.labels, "+Inf", float64(h.Count))
			num = writePromSample(buf, num, name, "_sum", sm.series.labels, "", h.SumMs)
			num = writePromSample(buf, num, name, "_count", sm.series.labels, "", float64(h.Count))
		}
		buf.WriteByte('\n')
	}
	return nil
}

// seriesLess is client_golang's order of a family's series: fewer labels first, then by the label
// values in the order of their names.
func seriesLess(a, b *promSeries) bool {
	if len(a.values) != len(b.values) {
		return len(a.values) < len(b.values)
	}
	for i := range a.values {
		if a.values[i] != b.values[i] {
			return a.values[i] < b.values[i]
		}
	}
	return false
}

// writePromSample writes one sample line: name+suffix, the labels and le (a histogram bucket's bound,
// when not empty), and the value. num is scratch space, returned for reuse.
func writePromSample(buf *strings.Builder, num []byte, name, suffix, labels, le string, value float64) []byte {
	buf.WriteString(name)
	buf.WriteString(suffix)
	if labels != "" || le != "" {
		buf.WriteByte('{')
		buf.WriteString(labels)
		if le != "" {
			if labels != "" {
				buf.WriteByte(',')
			}
			buf.WriteString(`le="`)
			buf.WriteString(le)
			buf.WriteByte('"')
		}
		buf.WriteByte('}')
	}
	buf.WriteByte(' ')
	num = appendPromFloat(num[:0], value)
	buf.Write(num)
	buf.WriteByte('\n')
	return num
}

// bucketBounds are the histograms' bucket bounds as le label values.
var bucketBounds = func() []string {
	out := make([]string, len(stats.HistogramBounds))
	for i, b := range stats.HistogramBounds {
		out[i] = string(appendPromFloat(nil, b))
	}
	return out
}()

// appendPromFloat formats a value as client_golang's text encoder does.
func appendPromFloat(dst []byte, f float64) []byte {
	switch {
	case f == 1:
		return append(dst, '1')
	case f == 0:
		return append(dst, '0')
	case f == -1:
		return append(dst, "-1"...)
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	case math.IsInf(f, +1):
		return append(dst, "+Inf"...)
	case math.IsInf(f, -1):
		return append(dst, "-Inf"...)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 64)
}

// The process's collectors, shared by every scrape (each reads /proc or the runtime when gathered).
var (
	processCollector = newProcessCollector()
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
			return h.help + " (docs/monitoring.md)"
		}
	}
	return "gantry statistic (docs/monitoring.md)"
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
