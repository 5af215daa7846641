package upstream

import (
	"sync/atomic"

	"github.com/gantry-dev/gantry/pkg/stats"
)

// limits are a cluster's circuit breakers and retry budget (Envoy's ResourceManagerImpl). A slot is
// taken with an acquire that returns its release, which the caller defers, so no exit path can keep
// a slot: release, ok := l.acquirePending(); if !ok {refuse}; defer release().
type limits struct {
	breakers BreakerConfig
	retry    RetryConfig
	// active is upstream_rq_active, the cluster's requests in flight (begin and end count them).
	active *stats.Gauge
	// pending are the requests waiting for a host's connection to become ready; retries the
	// retries in flight.
	pending, retries atomic.Int64
	// The releases are made once: handing out a method value would allocate on every call.
	releasePending, releaseRetry func()
}

func newLimits(breakers BreakerConfig, retry RetryConfig, active *stats.Gauge) *limits {
	l := &limits{breakers: breakers, retry: retry, active: active}
	l.releasePending = func() { l.pending.Add(-1) }
	l.releaseRetry = func() { l.retries.Add(-1) }
	return l
}

// requestsFull reports whether the max_requests breaker is open: a new call is refused at once.
func (l *limits) requestsFull() bool {
	return l.active.Value() >= int64(l.breakers.MaxRequests)
}

// acquirePending takes a slot of max_pending_requests for a call that waits for a connection.
func (l *limits) acquirePending() (release func(), ok bool) {
	if l.pending.Add(1) > int64(l.breakers.MaxPendingRequests) {
		l.pending.Add(-1)
		return nil, false
	}
	return l.releasePending, true
}

// acquireRetry takes a slot for one retry when the retry budget (or, without a budget, the
// max_retries circuit breaker) has one. The budget is a share of the requests in flight.
func (l *limits) acquireRetry() (release func(), ok bool) {
	if l.retries.Add(1) > l.retryLimit() {
		l.retries.Add(-1)
		return nil, false
	}
	return l.releaseRetry, true
}

// retryLimit is how many retries may be in flight: the retry budget's share of the requests in
// flight (at least its minimum), or without a budget the max_retries circuit breaker.
func (l *limits) retryLimit() int64 {
	if l.retry.BudgetPercent > 0 {
		return max(int64(l.retry.MinRetryConcurrency), l.active.Value()*int64(l.retry.BudgetPercent)/100)
	}
	return int64(l.breakers.MaxRetries)
}

// register exports the breakers' state as Envoy does, under prefix (cluster.<name>.):
// circuit_breakers.default.{rq,rq_pending,rq_retry}_open (1 while the breaker refuses) and
// circuit_breakers.default.remaining_{rq,pending,retries} (how many more it admits).
func (l *limits) register(store *stats.Store, prefix string) {
	p := prefix + "circuit_breakers.default."
	gauge := func(name string, f func() int64) { store.GaugeFunc(p+name, f) }
	open := func(used, limit int64) int64 {
		if used >= limit {
			return 1
		}
		return 0
	}
	gauge("rq_open", func() int64 { return open(l.active.Value(), int64(l.breakers.MaxRequests)) })
	gauge("rq_pending_open", func() int64 { return open(l.pending.Load(), int64(l.breakers.MaxPendingRequests)) })
	gauge("rq_retry_open", func() int64 { return open(l.retries.Load(), l.retryLimit()) })
	gauge("remaining_rq", func() int64 { return max(0, int64(l.breakers.MaxRequests)-l.active.Value()) })
	gauge("remaining_pending", func() int64 { return max(0, int64(l.breakers.MaxPendingRequests)-l.pending.Load()) })
	gauge("remaining_retries", func() int64 { return max(0, l.retryLimit()-l.retries.Load()) })
}
