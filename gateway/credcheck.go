package gateway

import (
	"context"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// credentialChecker asks the secrets service, before a body over -large-body-threshold is read,
// whether the request's credentials would be accepted by the method its route goes to
// (SecretsService.CheckCallCredentials): a forged kmsauth token, JWT or session cookie then costs a
// small call, never the reading, decoding and forwarding of its body (measured: 64 connections with
// forged credentials and 900 KB bodies multiplied a read's p99 by 4-19). The service decides, with
// its own keys, caches and logout list, so every credential it accepts is checked the same way a
// call is; the gateway holds no key.
type credentialChecker struct {
	client secretsv1.SecretsServiceClient
	// calls gives the check exactly the metadata the call itself would get (the allow-listed headers,
	// the route, the request id), so the service authenticates the same material, and its deadline.
	calls *upstreamCalls
}

// check returns nil when the call may go on (its credentials are accepted, or the service is too old
// to be asked), else the service's refusal, or the failure to ask it, and a context holding the
// answer's header metadata (Retry-After of a 503) for the error handler.
func (c *credentialChecker) check(r *http.Request, fullMethod, template string) (context.Context, error) {
	ctx, cancel, err := c.calls.context(r, fullMethod, template)
	if err != nil {
		return r.Context(), status.Error(codes.InvalidArgument, err.Error())
	}
	defer cancel()
	var header metadata.MD
	_, err = c.client.CheckCallCredentials(ctx, &secretsv1.CheckCallCredentialsRequest{FullMethod: fullMethod}, grpc.Header(&header))
	if status.Code(err) == codes.Unimplemented {
		// A secrets service older than the check: its calls are bounded by the large-body slots
		// alone, as before.
		return r.Context(), nil
	}
	return runtime.NewServerMetadataContext(r.Context(), runtime.ServerMetadata{HeaderMD: header}), err
}
