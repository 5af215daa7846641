package gateway

import (
	"context"
	"net/http"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
)

// upstreamCalls is what a call to a service gets from the edge, whichever way the request came: the
// REST routes (through wrap and the REST mux) and the calls the gateway makes itself beside them, a
// Slack receiver's and the credential check before a large body (through context). Each gets the
// same upstream deadline and the same metadata, so a service logs every call with its request id and
// no call waits on a frozen host longer than a REST call does.
type upstreamCalls struct {
	// annotate is a REST mux without routes, built with the REST mux's options: a call carries exactly
	// the metadata a routed call would (the allow-listed headers, the request id among them; the
	// route; the x-forwarded-* of the connection).
	annotate *runtime.ServeMux
	timeout  time.Duration
}

func (g *Gateway) newUpstreamCalls() *upstreamCalls {
	return &upstreamCalls{annotate: runtime.NewServeMux(g.muxOptions()...), timeout: g.cfg.UpstreamTimeout}
}

// deadline bounds a call made for a request: -upstream-timeout from now, never a client's
// Grpc-Timeout (the edge drops it). Callers start it once the request's body is read, as Envoy
// starts its route timeout at the end of the downstream request.
func (u *upstreamCalls) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, u.timeout)
}

// wrap gives every request through next the upstream deadline, which grpc-gateway passes on to the
// call of the route it matches.
func (u *upstreamCalls) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := u.deadline(r.Context())
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// context returns the context of a call of fullMethod the gateway makes for r, which came by the
// route template: r's, bounded by the upstream deadline and carrying the metadata the REST mux gives
// a call of that route. The error is grpc-gateway's, a status (a header it cannot pass on).
func (u *upstreamCalls) context(r *http.Request, fullMethod, template string) (context.Context, context.CancelFunc, error) {
	ctx, cancel := u.deadline(r.Context())
	annotated, err := runtime.AnnotateContext(ctx, u.annotate, r, fullMethod, runtime.WithHTTPPathPattern(template))
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return annotated, cancel, nil
}
