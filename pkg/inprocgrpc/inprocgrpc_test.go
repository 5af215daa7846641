package inprocgrpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	grpcstats "google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// echoer is the test service: Echo does what its request names (see echoServer.Echo).
type echoer interface {
	Echo(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
}

const echoMethod = "/test.Echo/Echo"

// echoDesc is what protoc-gen-go-grpc would generate for the test service, plus a streaming method.
var echoDesc = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*echoer)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Echo", Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		handler := func(ctx context.Context, req any) (any, error) {
			return srv.(echoer).Echo(ctx, req.(*wrapperspb.StringValue))
		}
		if interceptor == nil {
			return handler(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: echoMethod}, handler)
	}}},
	Streams: []grpc.StreamDesc{{StreamName: "Watch", ServerStreams: true, Handler: func(any, grpc.ServerStream) error { return nil }}},
}

type echoServer struct{ entered chan struct{} }

// Echo answers by the request's value: it shows the metadata and deadline it got, sets headers and
// trailers, fails in the ways a handler fails, or panics.
func (e echoServer) Echo(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	switch in.GetValue() {
	case "metadata":
		md, _ := metadata.FromIncomingContext(ctx)
		var lines []string
		for k, v := range md {
			lines = append(lines, fmt.Sprintf("%s=%q", k, v))
		}
		slices.Sort(lines)
		return wrapperspb.String(strings.Join(lines, "\n")), nil
	case "deadline":
		d, ok := ctx.Deadline()
		return wrapperspb.String(fmt.Sprint(ok, ok && time.Until(d) > 0 && time.Until(d) < time.Minute)), nil
	case "outgoing":
		// The caller's outgoing metadata must not leak into the handler's own outgoing calls.
		md, ok := metadata.FromOutgoingContext(ctx)
		return wrapperspb.String(fmt.Sprint(ok, md.Len())), nil
	case "header":
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-http-code", "302", "location", "/x"))
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "t"))
		return wrapperspb.String("ok"), nil
	case "header-twice":
		_ = grpc.SendHeader(ctx, metadata.Pairs("a", "1"))
		err := grpc.SetHeader(ctx, metadata.Pairs("b", "2"))
		return wrapperspb.String(fmt.Sprint(status.Code(err))), nil
	case "error-with-header":
		_ = grpc.SetHeader(ctx, metadata.Pairs("retry-after", "3", "x-http-code", "429"))
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "t"))
		return nil, status.Error(codes.ResourceExhausted, "slow down")
	case "error-after-send-header":
		_ = grpc.SendHeader(ctx, metadata.Pairs("retry-after", "3"))
		return nil, status.Error(codes.Unavailable, "draining")
	case "status-details":
		st, _ := status.New(codes.FailedPrecondition, "with details").WithDetails(durationpb.New(time.Second))
		return nil, st.Err()
	case "plain-error":
		return nil, errors.New("not a status")
	case "wrapped-status":
		return nil, fmt.Errorf("wrapped: %w", status.Error(codes.NotFound, "gone"))
	case "context-error":
		return nil, context.DeadlineExceeded
	case "nil":
		return nil, nil
	case "big":
		return wrapperspb.String(strings.Repeat("x", DefaultMaxRecvMsgSize)), nil
	case "panic":
		panic("boom")
	case "block":
		close(e.entered)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return wrapperspb.String("echo:" + in.GetValue()), nil
}

// recoverUnary is a server's recovery interceptor, as grpcserver's.
func recoverUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			resp, err = nil, status.Error(codes.Internal, "internal error")
		}
	}()
	return handler(ctx, req)
}

const maxRecv = 1 << 10

// conns serves echoServer through the same chain on a real gRPC server (over an in-memory pipe)
// and in process.
func conns(t *testing.T, chain ...grpc.UnaryServerInterceptor) (real, direct grpc.ClientConnInterface) {
	t.Helper()
	impl := echoServer{entered: make(chan struct{})}
	chain = append([]grpc.UnaryServerInterceptor{recoverUnary}, chain...)
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(chain...), grpc.MaxRecvMsgSize(maxRecv))
	gs.RegisterService(&echoDesc, impl)
	lis := bufconn.Listen(1 << 20)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient("passthrough:///echo", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })

	s := NewServer(Config{Unary: chain, MaxRecvMsgSize: maxRecv})
	s.RegisterService(&echoDesc, impl)
	return cc, s.Conn(ConnOptions{Authority: "echo"})
}

// outcome is everything a caller observes of one call.
type outcome struct {
	reply            string
	code             codes.Code
	message          string
	details          int
	header, trailers metadata.MD
}

func call(ctx context.Context, conn grpc.ClientConnInterface, value string) outcome {
	var header, trailer metadata.MD
	reply := new(wrapperspb.StringValue)
	err := conn.Invoke(ctx, echoMethod, wrapperspb.String(value), reply, grpc.Header(&header), grpc.Trailer(&trailer))
	st := status.Convert(err)
	return outcome{reply: reply.GetValue(), code: st.Code(), message: st.Message(), details: len(st.Details()), header: header, trailers: trailer}
}

func (o outcome) String() string {
	return fmt.Sprintf("reply %q, %v %q (%d details), header %v, trailers %v", o.reply, o.code, o.message, o.details, o.header, o.trailers)
}

func equalMD(a, b metadata.MD) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// TestSameAsOverGRPC runs the same calls over a real gRPC connection and in process and compares
// everything the caller and the handler see: metadata (keys as gRPC lower-cases and filters them,
// binary values), headers and trailers (trailers-only answers included), status codes, messages and
// details, deadlines, recovered panics and the message size limits.
func TestSameAsOverGRPC(t *testing.T) {
	real, direct := conns(t)
	md := metadata.Pairs("x-request-id", "r1", "authorization", "Basic x", "x-multi", "a", "x-multi", "b",
		"trace-bin", string([]byte{0, 1, 0xff}), "user-agent", "curl", "content-type", "text/plain", "grpc-timeout", "1S", "te", "x")
	for _, tc := range []struct {
		name, value string
		timeout     time.Duration
		md          metadata.MD
	}{
		{name: "plain", value: "hello"},
		{name: "metadata", value: "metadata", md: md},
		{name: "upper-case keys through Pairs", value: "metadata", md: metadata.Pairs("X-Forwarded-User", "alice")},
		{name: "no deadline", value: "deadline"},
		{name: "deadline", value: "deadline", timeout: 10 * time.Second},
		{name: "outgoing metadata stays with the caller", value: "outgoing", md: md},
		{name: "header and trailer", value: "header"},
		{name: "header after SendHeader", value: "header-twice"},
		{name: "error with header: trailers-only", value: "error-with-header"},
		{name: "error after SendHeader", value: "error-after-send-header"},
		{name: "status details", value: "status-details"},
		{name: "plain error", value: "plain-error"},
		{name: "wrapped status", value: "wrapped-status"},
		{name: "context error", value: "context-error"},
		{name: "nil answer", value: "nil"},
		{name: "answer over the client's limit", value: "big"},
		{name: "request over the server's limit", value: strings.Repeat("y", maxRecv)},
		{name: "panic", value: "panic"},
		{name: "non-printable metadata value", value: "metadata", md: metadata.MD{"x-bad": {"a\x01b"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.md != nil {
				ctx = metadata.NewOutgoingContext(ctx, tc.md)
			}
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			want, got := call(ctx, real, tc.value), call(ctx, direct, tc.value)
			if got.reply != want.reply || got.code != want.code || got.message != want.message || got.details != want.details ||
				!equalMD(got.header, want.header) || !equalMD(got.trailers, want.trailers) {
				t.Errorf("in process:\n  %v\nover gRPC:\n  %v", got, want)
			}
		})
	}
}

// TestUnknownMethodsAndStreams: unknown services and methods get gRPC's answers; streaming methods
// are refused in process.
func TestUnknownMethodsAndStreams(t *testing.T) {
	real, direct := conns(t)
	for _, method := range []string{"/test.Nope/Echo", "/test.Echo/Nope", "nonsense"} {
		werr := real.Invoke(context.Background(), method, wrapperspb.String(""), new(wrapperspb.StringValue))
		gerr := direct.Invoke(context.Background(), method, wrapperspb.String(""), new(wrapperspb.StringValue))
		if status.Code(werr) != codes.Unimplemented || status.Convert(gerr).Proto().String() != status.Convert(werr).Proto().String() {
			t.Errorf("%s: in process %v, over gRPC %v", method, gerr, werr)
		}
	}
	if err := direct.Invoke(context.Background(), "/test.Echo/Watch", wrapperspb.String(""), new(wrapperspb.StringValue)); status.Code(err) != codes.Unimplemented {
		t.Errorf("a streaming method called as unary: %v", err)
	}
	if _, err := direct.NewStream(context.Background(), &echoDesc.Streams[0], "/test.Echo/Watch"); status.Code(err) != codes.Unimplemented {
		t.Errorf("NewStream: %v", err)
	}
}

// TestEveryCallGoesThroughTheChain: a chain that refuses a method refuses it in process as over
// gRPC, before the handler; the interceptors run in the order given.
func TestEveryCallGoesThroughTheChain(t *testing.T) {
	var order []string
	named := func(name string) grpc.UnaryServerInterceptor {
		return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			order = append(order, name)
			if req.(*wrapperspb.StringValue).GetValue() == "refuse-at-"+name {
				return nil, status.Error(codes.PermissionDenied, "refused by "+name+" for "+info.FullMethod)
			}
			return handler(ctx, req)
		}
	}
	real, direct := conns(t, named("auth"), named("limits"))
	for _, conn := range []grpc.ClientConnInterface{real, direct} {
		order = nil
		if o := call(context.Background(), conn, "hello"); o.reply != "echo:hello" || !slices.Equal(order, []string{"auth", "limits"}) {
			t.Fatalf("%v, chain ran %v", o, order)
		}
		if o := call(context.Background(), conn, "refuse-at-limits"); o.code != codes.PermissionDenied || o.message != "refused by limits for "+echoMethod {
			t.Fatalf("refused call: %v", o)
		}
	}
}

// TestPeerAndAnswers: the handler sees the Conn's peer, the caller gets it with grpc.Peer, and the
// stats handler hears an answer only when the service gave one.
func TestPeerAndAnswers(t *testing.T) {
	var seen atomic.Pointer[peer.Peer]
	s := NewServer(Config{Unary: []grpc.UnaryServerInterceptor{func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		p, _ := peer.FromContext(ctx)
		seen.Store(p)
		return h(ctx, req)
	}}})
	impl := echoServer{entered: make(chan struct{})}
	s.RegisterService(&echoDesc, impl)
	answers := &countAnswers{}
	want := &peer.Peer{Addr: fakeAddr("memory:test")}
	conn := s.Conn(ConnOptions{Peer: want, Authority: "test", StatsHandler: answers})

	var got peer.Peer
	if err := conn.Invoke(context.Background(), echoMethod, wrapperspb.String("x"), new(wrapperspb.StringValue), grpc.Peer(&got)); err != nil {
		t.Fatal(err)
	}
	if seen.Load() != want || got.Addr != want.Addr || answers.n.Load() != 1 {
		t.Fatalf("handler saw %v, caller got %v, %d answers", seen.Load(), got, answers.n.Load())
	}
	if err := conn.Invoke(context.Background(), echoMethod, wrapperspb.String("plain-error"), new(wrapperspb.StringValue)); status.Code(err) != codes.Unknown || answers.n.Load() != 2 {
		t.Fatalf("an error is an answer too: %v, %d answers", err, answers.n.Load())
	}

	// A caller that stops waiting gets its context's error at once, and no answer; the handler's
	// context is cancelled with it.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- conn.Invoke(ctx, echoMethod, wrapperspb.String("block"), new(wrapperspb.StringValue)) }()
	<-impl.entered
	cancel()
	if err := <-errc; status.Code(err) != codes.Canceled || answers.n.Load() != 2 {
		t.Fatalf("cancelled call: %v, %d answers", err, answers.n.Load())
	}
	s.Wait() // the handler saw the cancellation and returned

	// A draining server refuses new calls without an answer; a closed Conn is closed.
	s.Drain()
	if err := conn.Invoke(context.Background(), echoMethod, wrapperspb.String("x"), new(wrapperspb.StringValue)); status.Code(err) != codes.Unavailable || answers.n.Load() != 2 {
		t.Fatalf("draining: %v, %d answers", err, answers.n.Load())
	}
	_ = conn.Close()
	if err := conn.Invoke(context.Background(), echoMethod, wrapperspb.String("x"), new(wrapperspb.StringValue)); status.Code(err) != codes.Canceled {
		t.Fatalf("closed: %v", err)
	}
}

// TestRequestIsCopied: the handler never gets the caller's own request, which the caller may change
// or send again (a retry) while a handler that outlived the call still reads it.
func TestRequestIsCopied(t *testing.T) {
	var got *wrapperspb.StringValue
	s := NewServer(Config{Unary: []grpc.UnaryServerInterceptor{func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		got = req.(*wrapperspb.StringValue)
		return h(ctx, req)
	}}})
	s.RegisterService(&echoDesc, echoServer{})
	req := wrapperspb.String("x")
	if err := s.Conn(ConnOptions{}).Invoke(context.Background(), echoMethod, req, new(wrapperspb.StringValue)); err != nil {
		t.Fatal(err)
	}
	if got == req || !proto.Equal(got, req) {
		t.Fatalf("the handler got the caller's own message (%p, %p) or another value", got, req)
	}
}

type fakeAddr string

func (a fakeAddr) Network() string { return "memory" }
func (a fakeAddr) String() string  { return string(a) }

type countAnswers struct{ n atomic.Int64 }

func (c *countAnswers) TagRPC(ctx context.Context, _ *grpcstats.RPCTagInfo) context.Context {
	return ctx
}
func (c *countAnswers) HandleRPC(_ context.Context, s grpcstats.RPCStats) {
	if _, ok := s.(*grpcstats.InTrailer); ok {
		c.n.Add(1)
	}
}
func (c *countAnswers) TagConn(ctx context.Context, _ *grpcstats.ConnTagInfo) context.Context {
	return ctx
}
func (c *countAnswers) HandleConn(context.Context, grpcstats.ConnStats) {}

// TestAnswerMovesIntoTheReply: the caller's reply gets every field of the handler's response, its
// unknown fields included, and nothing of what the reply held before.
func TestAnswerMovesIntoTheReply(t *testing.T) {
	answer := wrapperspb.String("answer")
	answer.ProtoReflect().SetUnknown([]byte{0x98, 0x06, 0x01}) // field 99, varint 1
	s := NewServer(Config{Unary: []grpc.UnaryServerInterceptor{func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
		return answer, nil
	}}})
	s.RegisterService(&echoDesc, echoServer{})
	reply := wrapperspb.String("stale")
	reply.ProtoReflect().SetUnknown([]byte{0xa0, 0x06, 0x02}) // field 100, varint 2
	if err := s.Conn(ConnOptions{}).Invoke(context.Background(), echoMethod, wrapperspb.String("x"), reply); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(reply, answer) {
		t.Fatalf("reply %v, want the handler's answer %v", reply, answer)
	}
}
