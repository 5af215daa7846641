package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/clusterstatus"
	"github.com/gantry-dev/gantry/pkg/settings"
	"github.com/gantry-dev/gantry/pkg/stats"
	"github.com/gantry-dev/gantry/services/proxyadmin"
)

// The gateway implements the admin interface's view of a proxy.
var _ proxyadmin.Proxy = (*Gateway)(nil)

// Draining implements proxyadmin.Proxy.
func (g *Gateway) Draining() bool { return g.draining.Load() }

// Unhealthy implements proxyadmin.Proxy: why a service of this process cannot serve, from
// Config.LocalHealth, or "".
func (g *Gateway) Unhealthy() string {
	if g.cfg.LocalHealth == nil {
		return ""
	}
	if err := g.cfg.LocalHealth(); err != nil {
		return err.Error()
	}
	return ""
}

// SetDraining implements proxyadmin.Proxy.
func (g *Gateway) SetDraining(on bool) {
	if g.draining.Swap(on) != on {
		g.logger.Warn("inbound health checks changed by the admin interface", zap.Bool("failing", on))
	}
}

// Clusters implements proxyadmin.Proxy.
func (g *Gateway) Clusters() []clusterstatus.Cluster {
	clusters := g.clusters.Load()
	if clusters == nil {
		return nil
	}
	return clusters.Status()
}

// errNotServing answers Reload before Serve.
var errNotServing = errors.New("gateway: not serving")

// Reload re-reads the clusters file (SIGHUP): on success the new clusters take new requests at once
// and requests in flight finish on the old ones; on error the running clusters stay, the error is
// logged and counted (cluster_manager.cds.update_rejected), and returned.
func (g *Gateway) Reload() error {
	clusters := g.clusters.Load()
	if clusters == nil {
		return errNotServing
	}
	return clusters.Reload()
}

// Stats implements proxyadmin.Proxy.
func (g *Gateway) Stats() []stats.Stat { return g.stats.Snapshot() }

// Histograms implements proxyadmin.Proxy.
func (g *Gateway) Histograms() []stats.HistogramSnapshot { return g.stats.Histograms() }

// ResetCounters implements proxyadmin.Proxy.
func (g *Gateway) ResetCounters() { g.stats.Reset() }

// Certs implements proxyadmin.Proxy: the certificate of the REST listener, when it serves TLS.
func (g *Gateway) Certs() []proxyadmin.CertContext {
	if g.cert == nil {
		return nil
	}
	return []proxyadmin.CertContext{{CertChain: &proxyadmin.CertDetail{
		Path:                g.cfg.TLSCertFile,
		SerialNumber:        g.cert.SerialNumber.Text(16),
		DaysUntilExpiration: daysUntil(g.cert.NotAfter, time.Now()),
	}}}
}

func daysUntil(t, now time.Time) int {
	d := int(t.Sub(now) / (24 * time.Hour))
	return max(d, 0)
}

// LogLevels implements proxyadmin.Proxy.
func (g *Gateway) LogLevels() map[string]string { return g.levels.List() }

// SetLogLevel implements proxyadmin.Proxy.
func (g *Gateway) SetLogLevel(name, level string) error { return g.levels.Set(name, level) }

// ProfilePath implements proxyadmin.Proxy.
func (g *Gateway) ProfilePath() string { return g.cfg.ProfilePath }

// Quit implements proxyadmin.Proxy: Serve stops accepting, lets requests in flight finish and
// returns. It runs after the /quitquitquit answer is on its way, because the servers wait for it.
func (g *Gateway) Quit() {
	g.logger.Warn("shutting down: /quitquitquit")
	go g.quit()
}

// loadTLS reads the REST listener's key pair; nil config when TLS is off.
func (g *Gateway) loadTLS() (*tls.Config, *x509.Certificate, error) {
	if g.cfg.TLSCertFile == "" {
		return nil, nil, nil
	}
	pair, err := tls.LoadX509KeyPair(g.cfg.TLSCertFile, g.cfg.TLSKeyFile)
	if err != nil {
		return nil, nil, settings.Invalid("tls-cert-file", "%v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, settings.Invalid("tls-cert-file", "%v", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if len(g.cfg.ClientCAs) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(g.cfg.ClientCAs) {
			return nil, nil, settings.Invalid("workload-cert-ca-file", "no PEM certificate among the CAs of client certificates")
		}
		// A client certificate is optional (browsers and kmsauth callers present none) and not
		// verified here: the handshake proves the caller holds its key, and the secrets service
		// verifies the chain, expiry and revocation, answering a refusal with a message rather than
		// a failed handshake. The pool names the accepted CAs to clients choosing a certificate.
		cfg.ClientAuth, cfg.ClientCAs = tls.RequestClientCert, pool
	}
	return cfg, leaf, nil
}

// registerServerStats adds Envoy's server.* gauges.
func (g *Gateway) registerServerStats() {
	g.stats.GaugeFunc("server.live", func() int64 {
		if g.Draining() {
			return 0
		}
		return 1
	})
	// server.state: 0 LIVE, 1 DRAINING, as Envoy numbers them.
	g.stats.GaugeFunc("server.state", func() int64 {
		if g.Draining() {
			return 1
		}
		return 0
	})
	g.stats.GaugeFunc("server.uptime", func() int64 { return int64(time.Since(g.started) / time.Second) })
	g.stats.GaugeFunc("server.hot_restart_epoch", func() int64 { return 0 })
	if g.cert != nil {
		g.stats.GaugeFunc("server.days_until_first_cert_expiring", func() int64 { return int64(daysUntil(g.cert.NotAfter, time.Now())) })
	}
}

// httpStats counts the requests and connections of one listener under http.<prefix>.*:
// downstream_rq_total, downstream_rq_active, downstream_rq_<class>xx, downstream_cx_total,
// downstream_cx_active.
type httpStats struct {
	store              *stats.Store
	prefix             string
	rqTotal, cxTotal   *stats.Counter
	rqActive, cxActive *stats.Gauge
	rqClass            [6]*stats.Counter
	cxDrainClose       *stats.Counter
	rqTime             *stats.Histogram
	// routes is the latency by route template and method; nil on the admin listener.
	routes *routeStats
}

func newHTTPStats(store *stats.Store, prefix string) *httpStats {
	p := "http." + prefix + "."
	s := &httpStats{store: store, prefix: p,
		rqTotal: store.Counter(p + "downstream_rq_total"), cxTotal: store.Counter(p + "downstream_cx_total"),
		rqActive: store.Gauge(p + "downstream_rq_active"), cxActive: store.Gauge(p + "downstream_cx_active"),
		cxDrainClose: store.Counter(p + "downstream_cx_drain_close"),
		rqTime:       store.Histogram(p + "downstream_rq_time"),
	}
	for class := 1; class <= 5; class++ {
		s.rqClass[class] = store.Counter(p + "downstream_rq_" + strconv.Itoa(class) + "xx")
	}
	return s
}

func (s *httpStats) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.rqTotal.Inc()
		s.rqActive.Add(1)
		rec := &statusRecorder{ResponseWriter: w}
		start := time.Now()
		defer func() {
			took := time.Since(start)
			s.rqTime.Record(took)
			if s.routes != nil {
				method := rec.method
				if rec.route == "" {
					method = r.Method
				}
				s.routes.record(method, rec.route, took)
			}
			s.rqActive.Add(-1)
			code := rec.code
			if code == 0 {
				code = http.StatusOK
			}
			if class := code / 100; class >= 1 && class <= 5 {
				s.rqClass[class].Inc()
			}
		}()
		next.ServeHTTP(rec, r)
	})
}

// connState counts connections (http.Server.ConnState).
func (s *httpStats) connState(_ net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		s.cxTotal.Inc()
		s.cxActive.Add(1)
	case http.StateClosed, http.StateHijacked:
		s.cxActive.Add(-1)
	}
}

// statusRecorder remembers the status code a handler wrote, and the route that served the request
// (setRoute; empty when no route did).
type statusRecorder struct {
	http.ResponseWriter
	code          int
	method, route string
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush and friends.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// healthcheck answers /healthcheck on the main listener (200 OK, or 503 once /healthcheck/fail was
// called) and, while draining, tells every downstream: Envoy's x-envoy-immediate-health-check-fail
// header, and Connection: close so HTTP/1 clients move to another gateway.
func (g *Gateway) healthcheck(hs *httpStats, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		draining := g.Draining()
		if draining {
			w.Header().Set("X-Envoy-Immediate-Health-Check-Fail", "true")
			w.Header().Set("Connection", "close")
			hs.cxDrainClose.Inc()
		}
		if r.URL.Path != "/healthcheck" {
			next.ServeHTTP(w, r)
			return
		}
		setRoute(w, routeMethod(r.Method), routeHealth)
		if draining {
			writeJSONError(w, http.StatusServiceUnavailable, "draining", nil)
			return
		}
		if reason := g.Unhealthy(); reason != "" {
			writeJSONError(w, http.StatusServiceUnavailable, "unhealthy: "+reason, nil)
			return
		}
		w.Header().Set("Content-Type", proxyadmin.TextContentType)
		w.Header().Set("Cache-Control", "no-cache, max-age=0")
		_, _ = fmt.Fprint(w, "OK\n")
	})
}
