package chat

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/gantry-dev/gantry/pkg/stats"
)

// The chat service's statistics of its Slack calls and its cache (docs/operations.md, "Metrics"),
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
}

func (t *slackStatsTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	method := req.URL.Path
	if i := bytes.LastIndexByte([]byte(method), '/'); i >= 0 {
		method = method[i+1:]
	}
	if !slackMethodName.MatchString(method) {
		method = "other"
	}
	p := "chat.slack." + method + "."
	start := t.now()
	resp, err := t.next.RoundTrip(req)
	t.stats.Histogram(p + "upstream_rq_time").Record(t.now().Sub(start))
	t.stats.Counter(p + "upstream_rq_total").Inc()
	// The method's error counters exist (at zero) from its first call, so ratios have both sides.
	failures, errs := t.stats.Counter(p+"upstream_rq_failure"), t.stats.Counter(p+"upstream_rq_error")
	if err != nil {
		failures.Inc()
		return resp, err
	}
	t.stats.Counter(p + "upstream_rq_" + strconv.Itoa(resp.StatusCode)).Inc()
	if resp.StatusCode == http.StatusOK && !slackOK(resp) {
		errs.Inc()
	}
	return resp, nil
}

// maxSlackStatsBody bounds what slackOK reads of an answer to find its "ok" field; a longer answer
// (a large users.list page) is counted ok when its field is not found in the first bytes.
const maxSlackStatsBody = 64 << 10

// slackOK reads whether a JSON answer says "ok": true, leaving the body whole for the client.
func slackOK(resp *http.Response) bool {
	head, err := io.ReadAll(io.LimitReader(resp.Body, maxSlackStatsBody))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	if err != nil {
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
