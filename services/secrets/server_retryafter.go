package secrets

import (
	"context"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/wirekeys"
)

// RetryAfterInterceptor gives an Unavailable answer that carries a RetryInfo detail (a stalled
// store: WriteStalledError) the wirekeys.RetryAfter response metadata, which the gateway turns into the
// HTTP Retry-After header of the 503. gRPC callers read the RetryInfo itself. (Rate limits set their
// header where they are decided, in the auth interceptor.)
func RetryAfterInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if err == nil {
			return resp, nil
		}
		st, ok := status.FromError(err)
		if !ok || st.Code() != codes.Unavailable {
			return resp, err
		}
		for _, d := range st.Details() {
			if retry, ok := d.(*errdetails.RetryInfo); ok {
				seconds := max(1, int((retry.GetRetryDelay().AsDuration()+time.Second-1)/time.Second))
				_ = grpc.SetHeader(ctx, metadata.Pairs(wirekeys.RetryAfter, strconv.Itoa(seconds)))
				break
			}
		}
		return resp, err
	}
}
