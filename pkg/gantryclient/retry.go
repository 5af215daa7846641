package gantryclient

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/wirekeys"
)

// DefaultRetryMaxWait is how long in all a client with a zero RetryPolicy waits for a server that
// asks it to come back later, per call: long enough for a script over the default write limit (20
// writes per second per caller, a burst of 200) to slow down to that rate, short enough that a
// server refusing for another reason does not hang it.
const DefaultRetryMaxWait = time.Minute

// maxRetryAfter bounds one wait, whatever the server asks: a wrong --addr or a proxy's Retry-After of
// hours must not park a command.
const maxRetryAfter = 30 * time.Second

// RetryPolicy says how a Client waits out a server that asks it to come back later.
//
// A 429 with Retry-After is retried for every method: gantry's write limit refuses a write before
// anything is done (not even its audit record), so sending it again cannot apply it twice. A 503 with
// Retry-After is retried for reads (GET, HEAD) alone: a stalled store answers 503 too, and a write
// that met it may still commit. Any other answer, and one without a Retry-After in seconds, is
// returned at once.
type RetryPolicy struct {
	// MaxWait bounds the waits of one call, in all; 0 is DefaultRetryMaxWait, negative never waits.
	// Once the next wait would pass it, the call returns the server's answer (an *APIError).
	MaxWait time.Duration
	// Notify, when set, is called before each wait with the answer being waited out and the wait
	// (the CLI tells the user once on stderr).
	Notify func(err error, wait time.Duration)
}

// allows says whether one more wait of wait fits after waited.
func (p RetryPolicy) allows(waited, wait time.Duration) bool {
	limit := p.MaxWait
	if limit == 0 {
		limit = DefaultRetryMaxWait
	}
	return limit > 0 && waited+wait <= limit
}

// retryAfter is how long to wait before sending the request of resp again, or 0 when it must not be
// sent again (see RetryPolicy). Retry-After in seconds is the only form gantry sends; an HTTP date
// (from something else in front of it) is not waited for.
func retryAfter(method string, resp *http.Response) time.Duration {
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
	case resp.StatusCode == http.StatusServiceUnavailable && (method == http.MethodGet || method == http.MethodHead):
	default:
		return 0
	}
	seconds, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get(wirekeys.RetryAfter)))
	if err != nil || seconds < 0 {
		return 0
	}
	// 0 would retry at once; a server that says 0 still means "not yet".
	return min(max(time.Duration(seconds)*time.Second, 100*time.Millisecond), maxRetryAfter)
}
