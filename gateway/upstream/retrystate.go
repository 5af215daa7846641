package upstream

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// retryState is the retry policy of one call at work (Envoy's RetryStateImpl): whether an attempt is
// bounded by the per-try timeout, whether its outcome may be retried, and on which host, within the
// cluster's num_retries and retry budget. Invoke keeps one per call.
type retryState struct {
	c          *cluster
	info       *RequestInfo
	idempotent bool
	// tried are the hosts of the attempts that failed so far.
	tried []*host
	// release gives back the retry slot of the attempt in flight; nil on the first attempt.
	release func()
}

// perTryBounded reports whether the attempt on h gets the per-try timeout. It cuts an attempt short
// when a retry can follow on another host: on a lone healthy host it would turn a slow answer into a
// 504 for nothing. That host may be one tried before (see next), so a retry that lands on a frozen
// host is cut short too. In panic mode every try is cut, the last one and a lone host's too: the
// hosts failed their checks, so a try that outlasts the per-try timeout is most likely on a frozen
// host, and waiting for the upstream timeout would hold every reader for as long as the freeze
// (Envoy bounds every try).
func (r *retryState) perTryBounded(h *host) bool {
	return r.idempotent && r.c.retry.PerTryTimeout > 0 &&
		((len(r.tried) < r.c.retry.NumRetries && r.c.hasOtherHost(h)) || r.c.panicking())
}

// writeGuarded reports whether the write try on h is watched for a frozen host (frozen.go): with a
// per-try timeout set, when another host could take the traffic that follows (or in panic mode, as
// perTryBounded).
func (r *retryState) writeGuarded(h *host) bool {
	return !r.idempotent && r.c.retry.PerTryTimeout > 0 && (r.c.hasOtherHost(h) || r.c.panicking())
}

// eligible reports whether the policy retries an attempt that ended so, budget aside: a call that
// never reached its host is retried whatever the method; one that reached it only when the method is
// idempotent and the host did not answer (a reset, a timeout) or answered Unavailable.
func (r *retryState) eligible(ctx context.Context, out outcome) bool {
	return out.err != nil && ctx.Err() == nil &&
		((!out.answered && !out.reached && status.Code(out.err) == codes.Unavailable) || // never reached the host
			(r.idempotent && (!out.answered || status.Code(out.err) == codes.Unavailable)))
}

// next returns the host of the retry of the eligible attempt that failed on h, holding a slot of the
// retry budget until that retry ends (tryDone); nil when the call is to end with h's answer: the
// retries are used up, no host is left, or the budget (upstream_rq_retry_overflow) refuses.
func (r *retryState) next(h *host) *host {
	if len(r.tried) >= r.c.retry.NumRetries {
		return nil
	}
	r.tried = append(r.tried, h)
	next := r.c.pick(r.tried...)
	if next == nil {
		// No healthy host is left: a host marked unhealthy may still answer (its checks may have
		// timed out under load), and it is a better last try than an error.
		next = r.c.anyOtherHost(r.tried...)
	}
	if next == nil {
		// Every host was tried: try again a healthy one other than the host that just failed (it may
		// only have been slow under load, while the one tried after it is frozen).
		next = r.c.pick(h)
	}
	if next == nil {
		return nil
	}
	release, ok := r.c.limits.acquireRetry()
	if !ok {
		r.c.rqRetryOverflow.Inc()
		return nil
	}
	r.c.rqRetry.Inc()
	r.release = release
	return next
}

// tryDone ends an attempt: a retry gives its slot back to the budget, and counts
// upstream_rq_retry_success when it succeeded. attempt defers it, so every path gives the slot back.
func (r *retryState) tryDone(out *outcome) {
	if r.release == nil {
		return
	}
	r.release()
	r.release = nil
	if out.err == nil {
		r.c.rqRetrySuccess.Inc()
	}
}
