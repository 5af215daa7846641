package proxyadmin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/buildinfo"
	"github.com/gantry-dev/gantry/pkg/clusterstatus"
	"github.com/gantry-dev/gantry/pkg/stats"
)

// ProcessName is the first field of /server_info.
const ProcessName = "gantry"

// HotRestartVersion is what /hot_restart_version prints: gantry has no hot restart, and Envoy
// builds without it print the same word.
const HotRestartVersion = "disabled"

// Content types of the admin pages.
const (
	TextContentType       = "text/plain; charset=UTF-8"
	JSONContentType       = "application/json"
	PrometheusContentType = "text/plain; version=0.0.4; charset=utf-8"
)

// CertDetail describes one loaded certificate file.
type CertDetail struct {
	Path                string
	SerialNumber        string // lower-case hex
	DaysUntilExpiration int
}

// CertContext is one TLS context: its CA certificate (if any) and its certificate chain.
type CertContext struct {
	CACert    *CertDetail
	CertChain *CertDetail
}

// Proxy is what the admin interface needs from the running gateway.
type Proxy interface {
	// Draining reports whether inbound health checks are being failed (after /healthcheck/fail).
	Draining() bool
	// SetDraining fails (true) or passes (false) inbound health checks.
	SetDraining(bool)
	// Unhealthy says why a service of the proxy's own process cannot serve now (its store fails),
	// or is empty; /ready answers 503 while it is not empty.
	Unhealthy() string
	// Clusters reports the upstream clusters, sorted by name.
	Clusters() []clusterstatus.Cluster
	// Stats returns every counter and gauge, sorted by name.
	Stats() []stats.Stat
	// Histograms returns every latency histogram, sorted by name.
	Histograms() []stats.HistogramSnapshot
	// ResetCounters zeroes the counters as Stats reports them (exporters keep the totals).
	ResetCounters()
	// Certs reports the loaded TLS certificates.
	Certs() []CertContext
	// LogLevels maps each logger to its level name (trace, debug, info, warning, error, critical, off).
	LogLevels() map[string]string
	// SetLogLevel changes one logger, or every logger when name is empty. It rejects unknown
	// loggers and levels.
	SetLogLevel(name, level string) error
	// ProfilePath is the file the CPU profiler writes to.
	ProfilePath() string
	// Quit starts a clean shutdown of the process; it returns at once.
	Quit()
}

// Page is one admin answer: status code, content type and body.
type Page struct {
	Code        int
	ContentType string
	Body        string
}

func textPage(code int, body string) Page {
	return Page{Code: code, ContentType: TextContentType, Body: body}
}

func jsonPage(v any) Page {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return textPage(http.StatusInternalServerError, "cannot render JSON\n")
	}
	return Page{Code: http.StatusOK, ContentType: JSONContentType, Body: string(b) + "\n"}
}

// Service renders the admin endpoints of a proxy.
type Service struct {
	proxy   Proxy
	started time.Time
	now     func() time.Time

	profMu    sync.Mutex
	profiling *os.File
}

// NewService returns the admin service of proxy, whose process started at started.
func NewService(proxy Proxy, started time.Time) *Service {
	return &Service{proxy: proxy, started: started, now: time.Now}
}

func (s *Service) uptime() time.Duration { return s.now().Sub(s.started).Truncate(time.Second) }

// ServerInfo renders Envoy 1.x's one-line server information: process name, compiled SHA and build
// type, live|draining, uptime of the current hot-restart epoch, total uptime, and the epoch. Gantry has
// no hot restart, so the epoch is always 0 and both uptimes are equal. format=json gives the modern
// JSON shape instead.
func (s *Service) ServerInfo() string {
	state := "live"
	if s.proxy.Draining() {
		state = "draining"
	}
	uptime := int64(s.uptime() / time.Second)
	return fmt.Sprintf("%s %s/%s %s %d %d %d\n", ProcessName, buildinfo.ShortCommit(), buildinfo.BuildType, state, uptime, uptime, 0)
}

// ServerInfoPage serves /server_info with its query.
func (s *Service) ServerInfoPage(rawQuery string) Page {
	q, _ := url.ParseQuery(rawQuery)
	if q.Get("format") != "json" {
		return textPage(http.StatusOK, s.ServerInfo())
	}
	up := fmt.Sprintf("%ds", int64(s.uptime()/time.Second))
	return jsonPage(map[string]any{
		"version":              fmt.Sprintf("%s/%s/%s", buildinfo.ShortCommit(), buildinfo.Version, buildinfo.BuildType),
		"state":                s.state(),
		"hot_restart_version":  HotRestartVersion,
		"uptime_current_epoch": up,
		"uptime_all_epochs":    up,
	})
}

func (s *Service) state() string {
	if s.proxy.Draining() {
		return "DRAINING"
	}
	return "LIVE"
}

// Ready serves /ready: the state name, 200 when LIVE and 503 otherwise, for readiness probes; LIVE
// but with a service of the process unhealthy (Proxy.Unhealthy) is 503 "UNHEALTHY: <why>".
func (s *Service) Ready() Page {
	st := s.state()
	if st == "LIVE" {
		if reason := s.proxy.Unhealthy(); reason != "" {
			return textPage(http.StatusServiceUnavailable, "UNHEALTHY: "+reason+"\n")
		}
		return textPage(http.StatusOK, st+"\n")
	}
	return textPage(http.StatusServiceUnavailable, st+"\n")
}

// HealthcheckFail serves /healthcheck/fail.
func (s *Service) HealthcheckFail() Page {
	s.proxy.SetDraining(true)
	return textPage(http.StatusOK, "OK\n")
}

// HealthcheckOK serves /healthcheck/ok.
func (s *Service) HealthcheckOK() Page {
	s.proxy.SetDraining(false)
	return textPage(http.StatusOK, "OK\n")
}

// QuitQuitQuit serves /quitquitquit: it answers, then the proxy shuts down cleanly.
func (s *Service) QuitQuitQuit() Page {
	s.proxy.Quit()
	return textPage(http.StatusOK, "OK\n")
}

// ResetCounters serves /reset_counters.
func (s *Service) ResetCounters() Page {
	s.proxy.ResetCounters()
	return textPage(http.StatusOK, "OK\n")
}

// HotRestartVersion serves /hot_restart_version, with no trailing newline as in Envoy.
func (s *Service) HotRestartVersion() Page { return textPage(http.StatusOK, HotRestartVersion) }

// CPUProfiler serves /cpuprofiler?enable=y|n: exactly one parameter, else 400 "?enable=<y|n>".
// Starting a running profiler, or stopping a stopped one, is a no-op.
func (s *Service) CPUProfiler(rawQuery string) Page {
	q, err := url.ParseQuery(rawQuery)
	usage := textPage(http.StatusBadRequest, "?enable=<y|n>\n")
	if err != nil || len(q) != 1 || len(q["enable"]) != 1 {
		return usage
	}
	s.profMu.Lock()
	defer s.profMu.Unlock()
	switch q.Get("enable") {
	case "y":
		if s.profiling != nil {
			break
		}
		f, err := os.Create(s.proxy.ProfilePath())
		if err != nil {
			return textPage(http.StatusInternalServerError, "failure to start the profiler\n")
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return textPage(http.StatusInternalServerError, "failure to start the profiler\n")
		}
		s.profiling = f
	case "n":
		if s.profiling == nil {
			break
		}
		pprof.StopCPUProfile()
		_ = s.profiling.Close()
		s.profiling = nil
	default:
		return usage
	}
	return textPage(http.StatusOK, "OK\n")
}

// logLevels are the level names /logging accepts, in Envoy's order.
const logLevels = "trace debug info warning error critical off"

// Logging serves /logging: with no parameter it lists the loggers; ?level=<l> changes all,
// ?<logger>=<l> one. Anything else is 400 with the reason, the usage and the list.
func (s *Service) Logging(rawQuery string) Page {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return s.loggingError("invalid query string")
	}
	switch {
	case len(q) == 0:
		return textPage(http.StatusOK, s.loggerList())
	case len(q) > 1:
		return s.loggingError("invalid number of parameters")
	}
	for name, vals := range q {
		if len(vals) != 1 {
			return s.loggingError("invalid number of parameters")
		}
		if !strings.Contains(" "+logLevels+" ", " "+vals[0]+" ") {
			return s.loggingError("unknown logger level")
		}
		if name == "level" {
			name = ""
		}
		if err := s.proxy.SetLogLevel(name, vals[0]); err != nil {
			return s.loggingError(err.Error())
		}
	}
	return textPage(http.StatusOK, s.loggerList())
}

func (s *Service) loggingError(reason string) Page {
	return textPage(http.StatusBadRequest, "error: "+reason+"\n\n"+
		"usage: /logging?<name>=<level> (change single level)\n"+
		"usage: /logging?level=<level> (change all levels)\n"+
		"levels: "+logLevels+" \n"+s.loggerList())
}

func (s *Service) loggerList() string {
	levels := s.proxy.LogLevels()
	names := make([]string, 0, len(levels))
	for n := range levels {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("active loggers:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %s: %s\n", n, levels[n])
	}
	b.WriteString("\n")
	return b.String()
}

// Certs serves /certs in Envoy 1.x's shape: one block per TLS context, tab-indented, with file,
// serial number and days until expiration of its CA certificate and certificate chain.
func (s *Service) Certs() Page {
	var b strings.Builder
	for _, ctx := range s.proxy.Certs() {
		fmt.Fprintf(&b, "{\n\t\"ca_cert\": \"%s\",\n\t\"cert_chain\": \"%s\"\n}\n", certLine(ctx.CACert), certLine(ctx.CertChain))
	}
	return textPage(http.StatusOK, b.String())
}

func certLine(d *CertDetail) string {
	if d == nil {
		return ""
	}
	return fmt.Sprintf("Certificate Path: %s, Serial Number: %s, Days until Expiration: %d", d.Path, d.SerialNumber, d.DaysUntilExpiration)
}

// endpoints is the admin menu, in Envoy's alphabetical order.
var endpoints = []struct{ path, help string }{
	{"/certs", "print certs on machine"},
	{"/clusters", "upstream cluster status"},
	{"/cpuprofiler", "enable/disable the CPU profiler"},
	{"/healthcheck/fail", "cause the server to fail health checks"},
	{"/healthcheck/ok", "cause the server to pass health checks"},
	{"/help", "print this menu"},
	{"/hot_restart_version", "print the hot restart compatibility version"},
	{"/logging", "query/change logging levels"},
	{"/quitquitquit", "exit the server"},
	{"/ready", "print server state, return 200 if LIVE, otherwise return 503"},
	{"/reset_counters", "reset all counters to zero"},
	{"/server_info", "print server version/status information"},
	{"/stats", "print server stats"},
	{"/stats/prometheus", "print server stats in prometheus format"},
}

// MutatingPaths are the admin endpoints that change the server; -admin-mutations-post-only makes
// them POST-only, as modern Envoy does.
var MutatingPaths = map[string]bool{
	"/cpuprofiler": true, "/healthcheck/fail": true, "/healthcheck/ok": true, "/logging": true,
	"/quitquitquit": true, "/reset_counters": true,
}

// Menu renders the list of admin endpoints, as Envoy 1.x prints it.
func Menu() string {
	var b strings.Builder
	b.WriteString("gantry admin commands:\n")
	for _, e := range endpoints {
		fmt.Fprintf(&b, "  %s: %s\n", e.path, e.help)
	}
	return b.String()
}

// Stats serves /stats: "name: value" lines sorted by name; filter=<regex> keeps matching names
// (RE2, partial match; bad → 400), usedonly keeps stats ever written, type=Counters|Gauges|
// Histograms|TextReadouts|All keeps one kind (bad → 400), format=json|prometheus|text.
func (s *Service) Stats(rawQuery string) Page {
	q, all, hists, bad := s.queryStats(rawQuery)
	if bad != nil {
		return *bad
	}
	switch q.Get("format") {
	case "", "text":
		var b strings.Builder
		for _, st := range all {
			fmt.Fprintf(&b, "%s: %d\n", st.Name, st.Value)
		}
		for _, h := range hists {
			b.WriteString(histogramLine(h))
		}
		return textPage(http.StatusOK, b.String())
	case "json":
		return jsonPage(statsJSON(all, hists))
	case "prometheus":
		return prometheusPage(all, hists, unselected(q))
	default:
		return textPage(http.StatusBadRequest, "usage: /stats?format=(json|prometheus|text)\n")
	}
}

// queryStats reads the query of /stats and /stats/prometheus and selects the statistics it asks
// for; bad is the 400 page of a query that cannot be read.
func (s *Service) queryStats(rawQuery string) (q url.Values, all []stats.Stat, hists []stats.HistogramSnapshot, bad *Page) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		p := textPage(http.StatusBadRequest, "invalid query string\n")
		return nil, nil, nil, &p
	}
	var filter *regexp.Regexp
	if f, ok := q["filter"]; ok && len(f) > 0 {
		if filter, err = regexp.Compile(f[0]); err != nil {
			p := textPage(http.StatusBadRequest, "Invalid re2 regex\n")
			return nil, nil, nil, &p
		}
	}
	_, usedOnly := q["usedonly"]
	kinds, ok := statTypes[q.Get("type")]
	if !ok {
		p := textPage(http.StatusBadRequest, "invalid &type= param\n")
		return nil, nil, nil, &p
	}
	all, hists = s.selectStats(filter, usedOnly, kinds)
	return q, all, hists, nil
}

// statKinds says which kinds of statistics a type= value keeps.
type statKinds struct{ counters, gauges, histograms bool }

// statTypes are Envoy's type= values (exact spelling; empty is All). Gantry has no text readouts, so
// TextReadouts selects nothing.
var statTypes = map[string]statKinds{
	"": {true, true, true}, "All": {true, true, true},
	"Counters": {counters: true}, "Gauges": {gauges: true}, "Histograms": {histograms: true}, "TextReadouts": {},
}

// selectStats applies filter (a name regex), usedonly (stats ever written, histograms with samples)
// and type (the kinds to keep).
func (s *Service) selectStats(filter *regexp.Regexp, usedOnly bool, kinds statKinds) ([]stats.Stat, []stats.HistogramSnapshot) {
	var all []stats.Stat
	if kinds.counters || kinds.gauges {
		snapshot := s.proxy.Stats()
		all = make([]stats.Stat, 0, len(snapshot))
		for _, st := range snapshot {
			if (filter != nil && !filter.MatchString(st.Name)) || (usedOnly && !st.Used) ||
				(st.Kind == stats.KindCounter && !kinds.counters) || (st.Kind == stats.KindGauge && !kinds.gauges) {
				continue
			}
			all = append(all, st)
		}
	}
	var hists []stats.HistogramSnapshot
	if kinds.histograms {
		snapshot := s.proxy.Histograms()
		hists = make([]stats.HistogramSnapshot, 0, len(snapshot))
		for _, h := range snapshot {
			if (filter != nil && !filter.MatchString(h.Name)) || (usedOnly && h.Count == 0) {
				continue
			}
			hists = append(hists, h)
		}
	}
	return all, hists
}

// histogramLine prints a histogram as Envoy's /stats does: each quantile as P<q>(interval,cumulative);
// gantry keeps no interval histograms, so the interval value is nan.
func histogramLine(h stats.HistogramSnapshot) string {
	if h.Count == 0 {
		return h.Name + ": No recorded values\n"
	}
	var b strings.Builder
	b.WriteString(h.Name + ":")
	for _, q := range stats.Quantiles {
		fmt.Fprintf(&b, " P%s(nan,%s)", strconv.FormatFloat(q, 'f', -1, 64), strconv.FormatFloat(h.Quantile(q), 'g', 6, 64))
	}
	b.WriteString("\n")
	return b.String()
}

// statsJSON is Envoy's /stats?format=json: counters and gauges, then one entry with the histograms'
// supported and computed quantiles.
func statsJSON(all []stats.Stat, hists []stats.HistogramSnapshot) any {
	type entry struct {
		Name  string `json:"name"`
		Value int64  `json:"value"`
	}
	type quantile struct {
		Interval   *float64 `json:"interval"`
		Cumulative *float64 `json:"cumulative"`
	}
	type computed struct {
		Name   string     `json:"name"`
		Values []quantile `json:"values"`
	}
	type histograms struct {
		Supported []float64  `json:"supported_quantiles"`
		Computed  []computed `json:"computed_quantiles"`
	}
	out := struct {
		Stats []any `json:"stats"`
	}{Stats: []any{}}
	for _, st := range all {
		out.Stats = append(out.Stats, entry{st.Name, st.Value})
	}
	if len(hists) > 0 {
		hs := histograms{Supported: stats.Quantiles}
		for _, h := range hists {
			c := computed{Name: h.Name}
			for _, q := range stats.Quantiles {
				var cum *float64
				if h.Count > 0 {
					v := h.Quantile(q)
					cum = &v
				}
				c.Values = append(c.Values, quantile{Cumulative: cum})
			}
			hs.Computed = append(hs.Computed, c)
		}
		out.Stats = append(out.Stats, struct {
			Histograms histograms `json:"histograms"`
		}{hs})
	}
	return out
}

// Prometheus serves /stats/prometheus; filter, usedonly and type work as on /stats.
func (s *Service) Prometheus(rawQuery string) Page {
	q, all, hists, bad := s.queryStats(rawQuery)
	if bad != nil {
		return *bad
	}
	return prometheusPage(all, hists, unselected(q))
}

// unselected reports whether a stats query asks for every stat (no filter, no type but All): only
// then do the process's and the Go runtime's series come too, since a filter or a type selects
// gantry's own stats by name or kind.
func unselected(q url.Values) bool {
	_, filtered := q["filter"]
	typ := q.Get("type")
	return !filtered && (typ == "" || typ == "All")
}
