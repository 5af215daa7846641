package proxyadmin

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-dev/gantry/pkg/stats"
)

// clientGolangText is how gantry's stats were exposed before writeStatsText: constant metrics of a
// client_golang registry, gathered and encoded by expfmt. It is the reference the direct writer must
// match byte for byte.
func clientGolangText(t *testing.T, all []stats.Stat, hists []stats.HistogramSnapshot) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(referenceCollector{all, hists}); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range families {
		mf.Help = proto.String(familyHelp(mf.GetName()))
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
		buf.WriteByte('\n')
	}
	return buf.String()
}

type referenceCollector struct {
	stats []stats.Stat
	hists []stats.HistogramSnapshot
}

func (referenceCollector) Describe(chan<- *prometheus.Desc) {}

func (c referenceCollector) Collect(ch chan<- prometheus.Metric) {
	desc := func(statName string) (*prometheus.Desc, []string) {
		name, labels := promName(statName)
		names, values := make([]string, len(labels)), make([]string, len(labels))
		for i, l := range labels {
			names[i], values[i] = l.name, l.value
		}
		return prometheus.NewDesc(name, "", names, nil), values
	}
	for _, st := range c.stats {
		d, values := desc(st.Name)
		typ := prometheus.CounterValue
		if st.Kind == stats.KindGauge {
			typ = prometheus.GaugeValue
		}
		ch <- prometheus.MustNewConstMetric(d, typ, float64(st.Total), values...)
	}
	for _, h := range c.hists {
		d, values := desc(h.Name)
		buckets := make(map[float64]uint64, len(stats.HistogramBounds))
		for i, b := range stats.HistogramBounds {
			buckets[b] = h.Cumulative[i]
		}
		ch <- prometheus.MustNewConstHistogram(d, h.Count, h.SumMs, buckets, values...)
	}
}

// richStats has a stat of every tag rule, label values that need escaping, several series per family
// in an order unlike the sorted one, large and fractional values, and histograms with and without
// labels.
func richStats() *stats.Store {
	st := stats.New()
	for _, name := range []string{
		"cluster.secrets.upstream_rq_total", "cluster.chat.upstream_rq_total", "cluster.chat.upstream_rq_200",
		"cluster.chat.upstream_rq_503", "cluster.chat.upstream_rq_5xx", "cluster.chat.upstream_rq_2xx",
		"http.ingress.downstream_rq_total", "http.admin.downstream_rq_total", "http.ingress.downstream_rq_4xx",
		"secrets.authn.kmsauth.ok", "secrets.authn.session.refused", "secrets.kms.decrypt.rq_total",
		"secrets.store.get_credential.rq_error", "secrets.sealed.abc123.v2.revisions",
		"chat.slack.chat.postMessage.upstream_rq_total", "chat.cache.users.hit",
		"chat.inbound.handler.regex.deploy_-x.dispatched", "chat.inbound.handler.help.dispatched",
		"server.uptime_total", "server.never_used",
	} {
		st.Counter(name).Add(uint64(len(name)) * 1234567)
	}
	st.Counter("cluster.zeta.upstream_rq_total").Add(1)
	st.Gauge("cluster.chat.upstream_rq_active").Set(3)
	st.Gauge("server.memory_allocated").Set(-1)
	st.GaugeFunc("server.live", func() int64 { return 1 })
	for _, name := range []string{
		"http.ingress.route.GET./v1/credentials/{id}.downstream_rq_time",
		`http.ingress.route.PUT./v1/quote"back\slash.downstream_rq_time`,
		"http.ingress.route.GET.line\nfeed.downstream_rq_time",
		"http.ingress.route.GET.other.downstream_rq_time",
		"cluster.secrets.upstream_rq_time", "secrets.store.get_credential.rq_time", "server.plain_time",
	} {
		h := st.Histogram(name)
		for i := range len(name) {
			h.Record(time.Duration(i*i) * 317 * time.Microsecond)
		}
	}
	st.Histogram("secrets.store.put_service.rq_time") // no samples
	return st
}

// TestPrometheusTextMatchesClientGolang: the direct writer's exposition of gantry's stats is byte for
// byte what client_golang's registry and encoder made of them.
func TestPrometheusTextMatchesClientGolang(t *testing.T) {
	for name, st := range map[string]*stats.Store{"rich": richStats(), "fake proxy": newFakeProxy(t).store, "empty": stats.New()} {
		all, hists := st.Snapshot(), st.Histograms()
		want := clientGolangText(t, all, hists)
		for range 2 { // the second time from the series cache
			var got strings.Builder
			if err := writeStatsText(&got, all, hists); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got.String() != want {
				t.Fatalf("%s: the direct writer differs from client_golang:\n--- got\n%s\n--- want\n%s", name, got.String(), want)
			}
		}
	}
}

// TestPrometheusTextRefusesInconsistentStats: one family with two types is refused (a 500 page), as
// client_golang's Gather refused it, rather than exposed with a lie.
func TestPrometheusTextRefusesInconsistentStats(t *testing.T) {
	st := stats.New()
	st.Counter("cluster.chat.upstream_rq_total").Inc()
	st.Gauge("cluster.secrets.upstream_rq_total").Set(1) // same family, envoy_cluster_upstream_rq_total
	if p := prometheusPage(st.Snapshot(), nil, false); p.Code != 500 {
		t.Fatalf("a counter and a gauge in one family: %d %s", p.Code, p.Body)
	}
}

// TestPrometheusTextInvalidUTF8: a label value that is not UTF-8 is exposed with U+FFFD in place of
// the bad bytes; the rest of the scrape is unaffected (client_golang refused the whole scrape).
func TestPrometheusTextInvalidUTF8(t *testing.T) {
	st := stats.New()
	st.Counter("cluster.bad\xffname.upstream_rq_total").Inc()
	st.Counter("server.live").Inc()
	p := prometheusPage(st.Snapshot(), nil, false)
	if p.Code != 200 || !strings.Contains(p.Body, `envoy_cluster_name="bad`+"\uFFFD"+`name"`) || !strings.Contains(p.Body, "envoy_server_live 1") {
		t.Fatalf("%d %s", p.Code, p.Body)
	}
	parseProm(t, p.Body)
}

// BenchmarkPrometheusText renders richStats: the direct writer against the client_golang path it
// replaced.
func BenchmarkPrometheusText(b *testing.B) {
	st := richStats()
	all, hists := st.Snapshot(), st.Histograms()
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var buf strings.Builder
			_ = writeStatsText(&buf, all, hists)
		}
	})
	b.Run("client_golang", func(b *testing.B) {
		b.ReportAllocs()
		t := &testing.T{}
		for b.Loop() {
			_ = clientGolangText(t, all, hists)
		}
	})
}
