package gateway

import (
	"context"
	"net/http"
	"strconv"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	"github.com/gantry-dev/gantry/pkg/wirekeys"
)

// errorMetadata applies what a service said about a failed call through response metadata: an
// x-http-code for errors gRPC has no code for (the chat service's 502 when Slack stays down), and a
// Retry-After for rate limits. Only error statuses are honoured, so a failure can never be rendered as
// a success; other response headers (cookies) are not sent with errors.
func errorMetadata(ctx context.Context, w http.ResponseWriter, code int) int {
	md, ok := runtime.ServerMetadataFromContext(ctx)
	if !ok {
		return code
	}
	if vals := md.HeaderMD.Get(wirekeys.RetryAfter); len(vals) > 0 {
		w.Header().Set(wirekeys.RetryAfter, vals[0])
	}
	if vals := md.HeaderMD.Get(wirekeys.HTTPCode); len(vals) > 0 {
		if c, err := strconv.Atoi(vals[0]); err == nil && c >= 400 && c < 600 {
			return c
		}
	}
	return code
}
