package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/stats"
)

// The chat service's statistics of its Slack calls and its cache (docs/monitoring.md, "The services' metrics"),
// tagged on the admin port's /stats/prometheus by the proxy admin's tag rules:
//
//	chat.slack.<method>.upstream_rq_total    counter: Web API calls by method
//	chat.slack.<method>.upstream_rq_<code>   counter: by HTTP status (429: Slack's rate limit)
//	chat.slack.<method>.upstream_rq_error    counter: answers {"ok": false}
//	chat.slack.<method>.upstream_rq_failure  counter: calls with no HTTP answer (network, timeout)
//	chat.slack.<method>.upstream_rq_time     histogram (ms)
//	chat.cache.<cache>.hit|miss              counter: lookups answered from the cache or not
//
// Every attempt counts (a call retried after a 429 counts twice), as Envoy counts upstream requests.

// slackMethodName is what a Web API method name looks like (chat.postMessage); anything else in a
// URL path is counted as "other", so a misrouted call cannot create series at will.
var slackMethodName = regexp.MustCompile(`^[a-z]+(\.[A-Za-z]+)+$`)

// slackStatsTransport counts and times every Slack Web API call.
type slackStatsTransport struct {
	next  http.RoundTripper
	stats *stats.Store
	now   func() time.Time
	// methods holds each method's stats (method name → *slackMethodStats), so a call looks its
	// counters up once, not by name in the store every time. Method names are bounded by
	// slackMethodName's check ("other" for the rest) and by the methods Slack's API has.
	methods sync.Map
}

// slackMethodStats are one method's series; byCode holds its upstream_rq_<code> counters.
type slackMethodStats struct {
	prefix                 string
	time                   *stats.Histogram
	total, failure, errors *stats.Counter
	byCode                 sync.Map // int → *stats.Counter
}

func (t *slackStatsTransport) methodStats(method string) *slackMethodStats {
	if m, ok := t.methods.Load(method); ok {
		return m.(*slackMethodStats)
	}
	p := "chat.slack." + method + "."
	// The method's error counters exist (at zero) from its first call, so ratios have both sides.
	m := &slackMethodStats{prefix: p, time: t.stats.Histogram(p + "upstream_rq_time"), total: t.stats.Counter(p + "upstream_rq_total"),
		failure: t.stats.Counter(p + "upstream_rq_failure"), errors: t.stats.Counter(p + "upstream_rq_error")}
	got, _ := t.methods.LoadOrStore(method, m)
	return got.(*slackMethodStats)
}

func (m *slackMethodStats) code(t *slackStatsTransport, code int) *stats.Counter {
	if c, ok := m.byCode.Load(code); ok {
		return c.(*stats.Counter)
	}
	c, _ := m.byCode.LoadOrStore(code, t.stats.Counter(m.prefix+"upstream_rq_"+strconv.Itoa(code)))
	return c.(*stats.Counter)
}

func (t *slackStatsTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	method := req.URL.Path
	if i := strings.LastIndexByte(method, '/'); i >= 0 {
		method = method[i+1:]
	}
	if !slackMethodName.MatchString(method) {
		method = "other"
	}
	m := t.methodStats(method)
	start := t.now()
	resp, err := t.next.RoundTrip(req)
	m.time.Record(t.now().Sub(start))
	m.total.Inc()
	if err != nil {
		m.failure.Inc()
		return resp, err
	}
	m.code(t, resp.StatusCode).Inc()
	if resp.StatusCode == http.StatusOK && !slackOK(resp) {
		m.errors.Inc()
	}
	return resp, nil
}

// maxSlackStatsBody bounds what slackOK reads of an answer to find its "ok" field; a longer answer
// (a large users.list page) is counted ok when its field is not found in the first bytes.
const maxSlackStatsBody = 64 << 10

// Slack writes "ok" first in every answer: slackOK decides from these prefixes when it can, reading
// only as many bytes, and parses the JSON only for an answer that starts otherwise.
var (
	slackOKTrue  = []byte(`{"ok":true`)
	slackOKFalse = []byte(`{"ok":false`)
)

// slackOK reads whether a JSON answer says "ok": true, leaving the body whole for the client.
func slackOK(resp *http.Response) bool {
	head := make([]byte, len(slackOKFalse))
	n, err := io.ReadFull(resp.Body, head)
	head = head[:n]
	if err == nil {
		if bytes.HasPrefix(head, slackOKTrue) {
			resp.Body = prepended(head, resp.Body)
			return true
		}
		if bytes.Equal(head, slackOKFalse) {
			resp.Body = prepended(head, resp.Body)
			return false
		}
		var rest []byte
		rest, err = io.ReadAll(io.LimitReader(resp.Body, maxSlackStatsBody-int64(n)))
		head = append(head, rest...)
	}
	resp.Body = prepended(head, resp.Body)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return false
	}
	var answer struct {
		OK *bool `json:"ok"`
	}
	if json.Unmarshal(head, &answer) != nil || answer.OK == nil {
		return len(head) == maxSlackStatsBody
	}
	return *answer.OK
}

// prepended is body with head, already read from it, in front again.
func prepended(head []byte, body io.ReadCloser) io.ReadCloser {
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), body), body}
}

// cacheNames are the caches countCache counts lookups of.
var cacheNames = []string{"user", "channel"}

// registerCacheStats creates the cache counters at zero, so a hit ratio has both sides from the start.
func registerCacheStats(st *stats.Store) {
	for _, c := range cacheNames {
		st.Counter("chat.cache." + c + ".hit")
		st.Counter("chat.cache." + c + ".miss")
	}
}

// countCache counts a lookup of cache answered from it (hit) or not.
func (s *Service) countCache(cache string, hit bool) {
	if s.cfg.Stats == nil {
		return
	}
	what := "miss"
	if hit {
		what = "hit"
	}
	s.cfg.Stats.Counter("chat.cache." + cache + "." + what).Inc()
}
