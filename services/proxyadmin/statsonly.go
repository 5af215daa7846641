package proxyadmin

import (
	"net/http"
	"time"

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
// usedonly, format), for a process that runs no gateway and so has no admin port (-target=secrets or
// chat, -stats-listen). Every other path answers 404, and only GET and HEAD are served: it is read-only.
func StatsHandler(st *stats.Store) http.Handler {
	s := NewService(storeOnly{st: st}, time.Now())
	write := func(w http.ResponseWriter, p Page) {
		w.Header().Set("Content-Type", p.ContentType)
		w.WriteHeader(p.Code)
		_, _ = w.Write([]byte(p.Body))
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
		default:
			write(w, textPage(http.StatusNotFound, "this listener serves /stats and /stats/prometheus only\n"))
		}
	})
}
