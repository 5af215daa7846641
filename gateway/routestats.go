package gateway

import (
	"net/http"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	"github.com/gantry-dev/gantry/pkg/stats"
)

// Labels of the REST listener's latency by route (http.ingress.route.<method>.<route>.downstream_rq_time)
// for a request no route of the REST mux served, and for a method outside routeMethods.
const (
	routeOther  = "other"
	routeHealth = "/healthcheck"
)

// routeMethods are the methods a route label is kept for; any other is counted as routeOther, so a
// client cannot add series by inventing methods.
var routeMethods = map[string]string{
	http.MethodGet: http.MethodGet, http.MethodHead: http.MethodHead, http.MethodPost: http.MethodPost,
	http.MethodPut: http.MethodPut, http.MethodPatch: http.MethodPatch, http.MethodDelete: http.MethodDelete,
	http.MethodOptions: http.MethodOptions,
}

func routeMethod(m string) string {
	if known, ok := routeMethods[m]; ok {
		return known
	}
	return routeOther
}

// routeStats is the REST listener's latency histogram by route template and method: a read's and
// a write's latency apart, where cluster.<c>.upstream_rq_time mixes every call of a service. The
// labels are bounded: a route is the path template of a route the REST mux matched (the proto's
// google.api.http template, e.g. /v1/credentials/{id}), /healthcheck, or "other" (the web UI, paths
// and methods no route serves, requests refused before routing); never a request's own path.
type routeStats struct {
	store  *stats.Store
	prefix string // http.ingress.route.
	mu     sync.RWMutex
	hists  map[routeKey]*stats.Histogram
}

type routeKey struct{ method, route string }

func newRouteStats(store *stats.Store, listener string) *routeStats {
	return &routeStats{store: store, prefix: "http." + listener + ".route.", hists: map[routeKey]*stats.Histogram{}}
}

// record adds one request's latency. The stat is http.<listener>.route.<method>.<route>.downstream_rq_time
// (the route keeps its slashes and braces; /stats/prometheus makes method and route labels).
func (s *routeStats) record(method, route string, took time.Duration) {
	if route == "" {
		route, method = routeOther, routeMethod(method)
	}
	k := routeKey{method, route}
	s.mu.RLock()
	h := s.hists[k]
	s.mu.RUnlock()
	if h == nil {
		s.mu.Lock()
		if h = s.hists[k]; h == nil {
			h = s.store.Histogram(s.prefix + method + "." + route + ".downstream_rq_time")
			s.hists[k] = h
		}
		s.mu.Unlock()
	}
	h.Record(took)
}

// setRoute names the route a request went to on the listener's statusRecorder, found by unwrapping
// w (every ResponseWriter wrapper between the listener and the mux has Unwrap, as
// http.ResponseController needs). It allocates nothing.
func setRoute(w http.ResponseWriter, method, route string) {
	for {
		switch x := w.(type) {
		case *statusRecorder:
			x.method, x.route = method, route
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return
		}
	}
}

// labelRoute is the REST mux's middleware that names the route it matched for routeStats: the
// template of the route's pattern, worked out on the route's first request.
func labelRoute(next runtime.HandlerFunc) runtime.HandlerFunc {
	var template atomic.Pointer[string]
	return func(w http.ResponseWriter, r *http.Request, params map[string]string) {
		t := template.Load()
		if t == nil {
			s := routeOther
			if pat, ok := runtime.HTTPPattern(r.Context()); ok {
				s = routeTemplate(pat.String())
			}
			t = &s
			template.Store(t)
		}
		setRoute(w, routeMethod(r.Method), *t)
		next(w, r, params)
	}
}

// simpleVar is a variable of a pattern's string that matches one segment: {id=*}.
var simpleVar = regexp.MustCompile(`\{([^=}]+)=\*\}`)

// routeTemplate turns grpc-gateway's spelling of a pattern (/v1/credentials/{id=*}) into the
// proto's path template (/v1/credentials/{id}); a variable of several segments keeps its =**.
func routeTemplate(pattern string) string {
	return simpleVar.ReplaceAllString(pattern, "{$1}")
}
