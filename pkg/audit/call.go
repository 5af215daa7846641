package audit

import (
	"context"
	"net"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/gantry-dev/gantry/pkg/wirekeys"
)

// Call is what the transport knows about one call that every record of it carries: the service, the
// RPC, the request id and the client address. The domain code finds it in the context (CallFrom),
// so it can write records without knowing gRPC.
type Call struct {
	Service    string
	Method     string
	RequestID  string
	ClientAddr string
	// concluded is set once a record with the call's outcome (allowed, denied or failed) was
	// written, so the transport does not write a second one. Atomic: a handler may fan out.
	concluded atomic.Bool
}

type callKey struct{}

// WithCall returns ctx carrying c.
func WithCall(ctx context.Context, c *Call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

// CallFrom returns the call of ctx; a context without one (a test calling the domain directly) gets
// an empty call.
func CallFrom(ctx context.Context) *Call {
	if c, ok := ctx.Value(callKey{}).(*Call); ok {
		return c
	}
	return &Call{}
}

// Record is a record of the call with its transport fields filled in.
func (c *Call) Record(outcome Outcome) Record {
	return Record{Service: c.Service, Method: c.Method, RequestID: c.RequestID, ClientAddr: c.ClientAddr, Outcome: outcome}
}

// Conclude marks the call's outcome as recorded.
func (c *Call) Conclude() { c.concluded.Store(true) }

// Concluded reports whether the call's outcome was recorded.
func (c *Call) Concluded() bool { return c.concluded.Load() }

// GRPCCall reads the call facts of a gRPC server context. The request id is the x-request-id
// metadata. The client address is the one the gateway forwards (grpc-gateway's x-forwarded-for, the
// last entry: the address the gateway's listener saw), else the gRPC peer's: x-forwarded-for is
// gateway-only metadata, which the internal-TLS interceptors remove from every other peer before
// this runs, so a direct caller cannot claim another address.
func GRPCCall(ctx context.Context, service, method string) *Call {
	c := &Call{Service: service, Method: method}
	if v := metadata.ValueFromIncomingContext(ctx, wirekeys.RequestID); len(v) > 0 {
		c.RequestID = v[0]
	}
	if v := metadata.ValueFromIncomingContext(ctx, wirekeys.ForwardedFor); len(v) > 0 {
		last := v[len(v)-1]
		if i := strings.LastIndexByte(last, ','); i >= 0 {
			last = last[i+1:]
		}
		c.ClientAddr = strings.TrimSpace(last)
	} else if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		c.ClientAddr = p.Addr.String()
		if host, _, err := net.SplitHostPort(c.ClientAddr); err == nil {
			c.ClientAddr = host
		}
	}
	return c
}
