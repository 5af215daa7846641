package proxyadmin

import (
	"net/http"
	"strconv"
	"time"
	"unsafe"

	"github.com/gantry-dev/gantry/pkg/stats"
)

// storeOnly is the Proxy of a process that runs no gateway: it has statistics and nothing else.
// Only StatsHandler uses it, which reaches none of the other methods (the embedded nil Proxy).
type storeOnly struct {
	Proxy
	st *stats.Store
}

func (p storeOnly) Stats() []stats.Stat                   { return p.st.Snapshot() }
func (p storeOnly) Histograms() []stats.HistogramSnapshot { return p.st.Histograms() }

// StatsHandler serves /stats and /stats/prometheus of st exactly as the admin port does (filter,
// usedonly, format), for Prometheus to scrape without reaching the admin port (which can drain and
// stop the gateway), and two probes for an orchestrator's kubelet:
//
//   - /ready answers 200 SERVING while health reports nothing wrong (the gRPC health of every service of
//     the process: NOT_SERVING once a store fails its probe or its writes stall), else 503 with the
//     reason; nil health is always ready.
//   - /live answers 200 LIVE whenever the process serves HTTP at all (a liveness probe must not restart
//     a process whose store, not the process, is down).
//
// Every other path answers 404, and only GET and HEAD are served: it is read-only.
func StatsHandler(st *stats.Store, health func() error) http.Handler {
	s := NewService(storeOnly{st: st}, time.Now())
	write := func(w http.ResponseWriter, p Page) {
		w.Header().Set("Content-Type", p.ContentType)
		w.Header().Set("Content-Length", strconv.Itoa(len(p.Body)))
		w.WriteHeader(p.Code)
		// One Write of the whole page: net/http sends a large []byte in one system call, while a
		// string (io.WriteString) would go through its 2 KB buffer, a write per 2 KB. The bytes are
		// the string's own, not a copy of a 100 KB page per scrape: Write only reads them.
		_, _ = w.Write(unsafe.Slice(unsafe.StringData(p.Body), len(p.Body)))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			write(w, textPage(http.StatusMethodNotAllowed, "only GET and HEAD are served here\n"))
			return
		}
		switch r.URL.Path {
		case "/stats":
			write(w, s.Stats(r.URL.RawQuery))
		case "/stats/prometheus":
			write(w, s.Prometheus(r.URL.RawQuery))
		case "/ready":
			if health != nil {
				if err := health(); err != nil {
					write(w, textPage(http.StatusServiceUnavailable, "NOT_SERVING: "+err.Error()+"\n"))
					return
				}
			}
			write(w, textPage(http.StatusOK, "SERVING\n"))
		case "/live":
			write(w, textPage(http.StatusOK, "LIVE\n"))
		default:
			write(w, textPage(http.StatusNotFound, "this listener serves /stats, /stats/prometheus, /ready and /live only\n"))
		}
	})
}
