package chat

import (
	"context"
	"crypto/sha256"
	"net/url"
	"sync"
	"time"
)

// rateLimits shares Slack's 429s between the requests of one process. Slack limits each Web API
// method per app and workspace, that is per token and method, except chat.postMessage, which it
// limits per channel (about one message a second to a channel, short bursts allowed; posting to
// other channels goes on): a window holds the token and method, and for chat.postMessage also the
// channel (rateScope). Once Slack answers 429 with Retry-After, every request of that window waits
// for the same deadline (or, when it may not wait that long, answers 429 at once) instead of each
// calling Slack, getting its own 429 and waiting on its own. When the deadline passes, one request probes Slack while the others wait for its outcome, so
// the window does not end in a burst that reopens it.
type rateLimits struct {
	mu      sync.Mutex
	windows map[rateKey]*rateWindow
}

// rateKey names a token without holding it: a digest of the token, the method and its scope.
type rateKey [sha256.Size]byte

func newRateKey(token, method, scope string) rateKey {
	return sha256.Sum256([]byte(token + "\x00" + method + "\x00" + scope))
}

// perChannelMethods are the Web API methods Slack rate-limits per channel rather than per method:
// chat.postMessage ("Special" tier: about one message per second to a channel). A 429 for one
// channel says nothing about the others, nor about send_im, which posts to the user's IM channel.
var perChannelMethods = map[string]bool{"chat.postMessage": true}

// rateScope is the part of a call, beyond its token and method, that Slack's rate limit applies
// to: the channel of a per-channel method as the caller named it, else nothing.
func rateScope(method string, form url.Values) string {
	if perChannelMethods[method] {
		return form.Get("channel")
	}
	return ""
}

type rateWindow struct {
	until   time.Time     // Slack's deadline: no call before it
	probing bool          // a request is calling Slack after the deadline; the others wait for it
	changed chan struct{} // closed when until or probing change
}

// maxRateWindows bounds the windows kept: they exist only after a 429 and until a later call goes
// through, but the action route may name any method.
const maxRateWindows = 10000

func newRateLimits() *rateLimits { return &rateLimits{windows: map[rateKey]*rateWindow{}} }

// admit decides whether a call may go to Slack now. It returns probe when the call is the one that
// tests an ended window (its outcome must be reported to done), or limitedFor > 0 when Slack's
// deadline is further than maxWait or the request's own deadline: the caller answers 429 without a
// call. It waits otherwise, until the window ends or ctx does.
func (r *rateLimits) admit(ctx context.Context, key rateKey, maxWait time.Duration) (probe bool, limitedFor time.Duration, err error) {
	for {
		r.mu.Lock()
		w := r.windows[key]
		if w == nil {
			r.mu.Unlock()
			return false, 0, nil
		}
		ch := w.changed
		rem := time.Until(w.until)
		if rem <= 0 && !w.probing {
			w.probing = true
			r.mu.Unlock()
			return true, 0, nil
		}
		r.mu.Unlock()
		if rem > maxWait || rem > 0 && !fitsDeadline(ctx, rem) {
			return false, ceilSecond(rem), nil
		}
		// Wait for the deadline, or for the probe in flight to report.
		var timer *time.Timer
		var deadline <-chan time.Time // nil while a probe is in flight: wait for its report
		if rem > 0 {
			timer = time.NewTimer(rem)
			deadline = timer.C
		}
		select {
		case <-deadline:
		case <-ch:
		case <-ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return false, 0, ctx.Err()
		}
	}
}

// done reports the outcome of a call admitted by admit: a 429 (retryAfter > 0) opens or extends the
// window; an answer (answered) from the probe closes it; a probe that got no answer (a network error)
// hands probing to the next waiter.
func (r *rateLimits) done(key rateKey, probe, answered bool, retryAfter time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.windows[key]
	switch {
	case retryAfter > 0:
		if w == nil {
			r.prune()
			w = &rateWindow{changed: make(chan struct{})}
			r.windows[key] = w
		}
		if until := time.Now().Add(retryAfter); until.After(w.until) {
			w.until = until
		}
	case w == nil || !probe:
		return
	case answered:
		delete(r.windows, key)
	}
	if probe {
		w.probing = false
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// prune drops ended windows nobody is probing when the map is full, and any window at all if that
// is not enough (they are advisory: a dropped one costs a 429 from Slack). r.mu is held.
func (r *rateLimits) prune() {
	if len(r.windows) < maxRateWindows {
		return
	}
	now := time.Now()
	for k, w := range r.windows {
		if !w.probing && !w.until.After(now) {
			delete(r.windows, k)
		}
	}
	for k, w := range r.windows {
		if len(r.windows) < maxRateWindows {
			return
		}
		delete(r.windows, k)
		close(w.changed) // its waiters look again and find no window
	}
}

// ceilSecond rounds up to whole seconds, the unit of Retry-After.
func ceilSecond(d time.Duration) time.Duration {
	return (d + time.Second - 1).Truncate(time.Second)
}
