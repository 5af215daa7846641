package gateway

import (
	"context"
	"strconv"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
)

// errorStatusOverride returns the HTTP status a service chose for a failed call through the
// x-http-code response header, for errors gRPC has no code for (the chat service's 502 when Slack
// stays down). Only error statuses are honoured, so a failure can never be rendered as a success.
func errorStatusOverride(ctx context.Context, code int) int {
	md, ok := runtime.ServerMetadataFromContext(ctx)
	if !ok {
		return code
	}
	if vals := md.HeaderMD.Get(statusHeader); len(vals) > 0 {
		if c, err := strconv.Atoi(vals[0]); err == nil && c >= 400 && c < 600 {
			return c
		}
	}
	return code
}
