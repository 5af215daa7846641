package upstream

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
)

// What the edge and the upstream side share about one request: the edge puts a RequestInfo in the
// call's context for its access log, and forwards the request id as metadata; the cluster records
// into the one and logs the other.

// Envoy's response flags the upstream side sets.
const (
	FlagNoHealthyUpstream = "UH"  // no healthy host to send the request to
	FlagUpstreamFailure   = "UF"  // the host could not be reached or the connection broke
	FlagUpstreamTimeout   = "UT"  // the upstream deadline passed
	FlagUpstreamOverflow  = "UO"  // refused by a circuit breaker
	FlagRetryLimit        = "URX" // the retries were used up (or refused by the budget)
)

// RequestInfo travels in the request context from the edge into the cluster, which records what
// happened upstream: the host of the last attempt, the time spent on all of them, and the response
// flags. A nil *RequestInfo records nothing.
type RequestInfo struct {
	mu           sync.Mutex
	upstreamHost string
	upstreamTime time.Duration
	flags        []string
}

type requestInfoKey struct{}

// WithRequestInfo returns ctx carrying ri for the cluster to record into.
func WithRequestInfo(ctx context.Context, ri *RequestInfo) context.Context {
	return context.WithValue(ctx, requestInfoKey{}, ri)
}

func requestInfoFrom(ctx context.Context) *RequestInfo {
	ri, _ := ctx.Value(requestInfoKey{}).(*RequestInfo)
	return ri
}

// Upstream returns what was recorded: host is "" when no attempt was made.
func (ri *RequestInfo) Upstream() (host string, took time.Duration, flags []string) {
	ri.mu.Lock()
	defer ri.mu.Unlock()
	return ri.upstreamHost, ri.upstreamTime, ri.flags
}

func (ri *RequestInfo) attempt(host string, took time.Duration) {
	if ri == nil {
		return
	}
	ri.mu.Lock()
	ri.upstreamHost, ri.upstreamTime = host, ri.upstreamTime+took
	ri.mu.Unlock()
}

func (ri *RequestInfo) flag(f string) {
	if ri == nil {
		return
	}
	ri.mu.Lock()
	if !slices.Contains(ri.flags, f) {
		ri.flags = append(ri.flags, f)
	}
	ri.mu.Unlock()
}

// HTTPStatusFromCode is the HTTP status a REST client gets for a gRPC code, which the clusters'
// upstream_rq_<code> stats count: grpc-gateway's mapping but for FailedPrecondition, which gantry's
// services use only for a failed request precondition (a stale If-Match revision): 412 Precondition
// Failed, where grpc-gateway would answer 400.
func HTTPStatusFromCode(code codes.Code) int {
	if code == codes.FailedPrecondition {
		return http.StatusPreconditionFailed
	}
	return runtime.HTTPStatusFromCode(code)
}
