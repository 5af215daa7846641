// Package inprocgrpc calls gRPC services of the same process directly: a Conn is a
// grpc.ClientConnInterface whose Invoke runs the service's own unary interceptor chain and handler in
// this process, with no HTTP/2 framing, no TLS records and no marshalling of the messages, yet with
// what the handler and its interceptors see over a real connection:
//
//   - incoming metadata built from the caller's outgoing metadata as grpc-go's transport builds it
//     (keys lower case, reserved keys dropped, :authority, content-type and user-agent added; the
//     caller's metadata is validated as grpc-go's client validates it);
//   - the peer the Conn was opened with (the process gives it the gateway's verified identity);
//   - the caller's deadline and cancellation, and nothing else of the caller's context (its values,
//     its outgoing metadata, stay on the caller's side as they would across a network);
//   - grpc.SetHeader, SendHeader and SetTrailer, whose metadata reaches the caller's grpc.Header and
//     grpc.Trailer call options with grpc-go's rules (a failed call with no header metadata is
//     "trailers-only": its content-type arrives among the trailers; a status's details arrive as
//     grpc-status-details-bin);
//   - status errors as the server sends them (a plain error becomes Unknown, a context error its code);
//   - the server's limit on received messages (MaxRecvMsgSize) and the client's (4 MiB by default,
//     grpc.MaxCallRecvMsgSize), on the size the message would have on the wire.
//
// The request is copied before Invoke hands it over, so the handler never sees the caller change it,
// even when a call outlives its caller's deadline: it returns to the caller at the deadline, as over
// the network, while the handler finishes in the background on a cancelled context (and a retry on
// another host sends the request as built). The answer is not copied: its fields move into the
// caller's reply, which the caller must treat as read-only, as a handler must treat a response it
// has returned (grpc-go's server marshals it after the handler returns).
//
// One difference from grpc-go is known: metadata whose keys are not lower case (a metadata.MD
// literal; metadata.Pairs, metadata.New and grpc-gateway lower-case them) is refused by grpc-go's
// client and lower-cased here, as metadata.FromOutgoingContext gives no view of the raw keys.
//
// Streaming methods are not served here: NewStream answers Unimplemented. The gateway routes no
// streaming method (internal/stack's TestInProcessServicesHaveNoStreamingRoutes keeps it so).
//
// Why not grpchan's in-process channel (github.com/fullstorydev/grpchan/inprocgrpc, as read at its
// commit 92fb34f of 2026-08-14): it is the same idea, a ClientConnInterface and ServiceRegistrar that
// runs the registered handler on a goroutine behind one server unary interceptor, with client and
// server stats handlers, and it serves streams too. But what the gateway relies on it does not do.
// Its peer is one fixed value (address "inproc", auth type "inproc"), where the services'
// authentication must see the gateway's verified identity (ConnOptions.Peer). The handler's
// incoming metadata is the caller's outgoing metadata as it is: no lower-casing, no dropping of
// reserved keys, no validation, no :authority, content-type or user-agent. No message size limit is
// enforced. Either gap lets a call pass in process that a real connection refuses. It also copies
// the answer as well as the request, through jhump/protoreflect's dynamic.TryMerge on the deprecated
// github.com/golang/protobuf API, which would link both into the binary. Streaming, the one thing
// it has that this package lacks, is what the gateway does not use.
package inprocgrpc

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	grpcstats "google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// DefaultMaxRecvMsgSize is grpc-go's default limit on a received message, on both sides.
const DefaultMaxRecvMsgSize = 4 << 20

// Config is the server side of the calls: what the grpc.Server of the same services enforces.
type Config struct {
	// Unary is the server's unary interceptor chain, outermost first: the very interceptors given to
	// the grpc.Server (grpc.ChainUnaryInterceptor), so every call runs the same checks on both paths.
	Unary []grpc.UnaryServerInterceptor
	// MaxRecvMsgSize bounds a request's encoded size, as grpc.MaxRecvMsgSize does; 0 is grpc-go's
	// default.
	MaxRecvMsgSize int
}

// Server holds the services registered on it and the interceptor chain they are called through. It
// implements grpc.ServiceRegistrar; register every service before the first call.
type Server struct {
	chain   grpc.UnaryServerInterceptor
	maxRecv int
	// services maps a service name to its methods, by method name.
	services map[string]map[string]method
	// base is the parent of every call's server context: Stop cancels it.
	base context.Context
	stop context.CancelFunc
	// mu guards draining and inflight; idle is signalled when inflight drops to zero.
	mu       sync.Mutex
	idle     *sync.Cond
	draining bool
	inflight int
	// workers run the handlers.
	workers workers
}

type method struct {
	impl    any
	handler grpc.MethodHandler
	// stream is set for a streaming method, which is not served in process.
	stream bool
}

// NewServer returns a server that calls its services through cfg's chain.
func NewServer(cfg Config) *Server {
	if cfg.MaxRecvMsgSize <= 0 {
		cfg.MaxRecvMsgSize = DefaultMaxRecvMsgSize
	}
	base, stop := context.WithCancel(context.Background())
	s := &Server{chain: chainUnary(cfg.Unary), maxRecv: cfg.MaxRecvMsgSize, services: map[string]map[string]method{}, base: base, stop: stop,
		workers: workers{tasks: make(chan func()), idle: workerIdle, stop: base.Done()}}
	s.idle = sync.NewCond(&s.mu)
	return s
}

// RegisterService implements grpc.ServiceRegistrar, with grpc.Server's check that impl implements
// the service.
func (s *Server) RegisterService(desc *grpc.ServiceDesc, impl any) {
	if impl != nil {
		ht := reflect.TypeOf(desc.HandlerType).Elem()
		if st := reflect.TypeOf(impl); !st.Implements(ht) {
			panic(fmt.Sprintf("inprocgrpc: RegisterService found the handler of type %v that does not satisfy %v", st, ht))
		}
	}
	if _, dup := s.services[desc.ServiceName]; dup {
		panic(fmt.Sprintf("inprocgrpc: RegisterService found duplicate service registration for %q", desc.ServiceName))
	}
	methods := map[string]method{}
	for _, m := range desc.Methods {
		methods[m.MethodName] = method{impl: impl, handler: m.Handler}
	}
	for _, sd := range desc.Streams {
		methods[sd.StreamName] = method{stream: true}
	}
	s.services[desc.ServiceName] = methods
}

// Serves reports whether service is registered.
func (s *Server) Serves(service string) bool {
	_, ok := s.services[service]
	return ok
}

// Drain refuses every new call (Unavailable, as a connection closing for a graceful stop does);
// the calls in flight go on. Wait waits for them.
func (s *Server) Drain() {
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()
}

// Wait blocks until every call in flight has returned from its handler.
func (s *Server) Wait() {
	s.mu.Lock()
	for s.inflight > 0 {
		s.idle.Wait()
	}
	s.mu.Unlock()
}

// Stop refuses new calls and cancels the context of every call in flight, as grpc.Server.Stop
// closes its connections.
func (s *Server) Stop() {
	s.Drain()
	s.stop()
}

// begin counts a call in, unless the server drains.
func (s *Server) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return false
	}
	s.inflight++
	return true
}

func (s *Server) end() {
	s.mu.Lock()
	s.inflight--
	if s.inflight == 0 {
		s.idle.Broadcast()
	}
	s.mu.Unlock()
}

// errStopping is a call refused because the server stops: the caller sees what a closed connection
// gives, and no answer of the service (no trailers).
var errStopping = status.Error(codes.Unavailable, "inprocgrpc: the server is stopping")

// ConnOptions describe the caller of a Conn, as the services see it.
type ConnOptions struct {
	// Peer is what peer.FromContext returns in the services: the caller's address and authentication
	// (without an address, Addr("unnamed")).
	Peer *peer.Peer
	// Authority is the :authority of every call (the address the caller would dial).
	Authority string
	// StatsHandler, when set, hears the arrival of each call's answer (grpcstats.InTrailer, with
	// Client set) on the caller's context, as a grpc.WithStatsHandler of a real connection does.
	StatsHandler grpcstats.Handler
}

// Conn calls the services of a Server. It implements grpc.ClientConnInterface; it is safe for
// concurrent use.
type Conn struct {
	srv    *Server
	opts   ConnOptions
	closed atomic.Bool
}

// Conn returns a connection to s for a caller described by opts.
func (s *Server) Conn(opts ConnOptions) *Conn {
	if opts.Peer == nil {
		opts.Peer = &peer.Peer{}
	}
	if opts.Peer.Addr == nil {
		// A grpc.Server's peer always has an address, and code reads it without a check.
		p := *opts.Peer
		p.Addr, p.LocalAddr = Addr("unnamed"), Addr("unnamed")
		opts.Peer = &p
	}
	return &Conn{srv: s, opts: opts}
}

// Addr is the default address of a Conn's peer.
type Addr string

// Network implements net.Addr.
func (Addr) Network() string { return "inprocess" }

// String implements net.Addr.
func (a Addr) String() string { return "inprocess:" + string(a) }

// GetState is Ready until Close (calls need no connection to be set up), then Shutdown.
func (c *Conn) GetState() connectivity.State {
	if c.closed.Load() {
		return connectivity.Shutdown
	}
	return connectivity.Ready
}

// Close makes every later call fail as on a closed grpc.ClientConn. It does not stop the server.
func (c *Conn) Close() error {
	c.closed.Store(true)
	return nil
}

// errConnClosing is grpc.ErrClientConnClosing's answer.
var errConnClosing = status.Error(codes.Canceled, "grpc: the client connection is closing")

// NewStream implements grpc.ClientConnInterface: streams are not served in process.
func (c *Conn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "inprocgrpc: streaming calls are not served in process")
}

// result is what a handler returned.
type result struct {
	resp any
	err  error
}

// Invoke implements grpc.ClientConnInterface: it runs the method's interceptor chain and handler.
func (c *Conn) Invoke(ctx context.Context, fullMethod string, args, reply any, opts ...grpc.CallOption) error {
	if c.closed.Load() {
		return errConnClosing
	}
	call := callOptions(opts)
	md, _ := metadata.FromOutgoingContext(ctx)
	if err := validate(md); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	in, ok := args.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "grpc: error while marshaling: proto: failed to marshal, message is %T, want proto.Message", args)
	}
	if !c.srv.begin() {
		return errStopping
	}
	if call.peer != nil {
		*call.peer = *c.opts.Peer
	}
	// The handler may outlive the call: it gets a copy of the request, never the caller's message.
	req := proto.Clone(in)
	stream := &transportStream{method: fullMethod}
	sctx, cancel := c.serverContext(ctx, md, stream)
	done := make(chan result, 1)
	c.srv.workers.run(func() {
		defer c.srv.end()
		defer cancel()
		resp, err := c.srv.serve(sctx, fullMethod, req)
		done <- result{resp, err}
	})
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		// The caller stopped waiting: over the network it would get its context's error, and the
		// service no answer; the handler goes on with a cancelled context.
		return status.FromContextError(ctx.Err()).Err()
	}
	if c.srv.base.Err() != nil {
		return errStopping // Stop cut the call short: a closed connection, not an answer
	}
	var st *status.Status
	if r.err != nil {
		st = appStatus(r.err)
	}
	header, trailer := stream.finish(st)
	if call.header != nil {
		*call.header = header
	}
	if call.trailer != nil {
		*call.trailer = trailer
	}
	err := st.Err()
	if st == nil {
		err = c.answer(r.resp, reply, call)
	}
	if c.opts.StatsHandler != nil {
		c.opts.StatsHandler.HandleRPC(ctx, &grpcstats.InTrailer{Client: true, Trailer: trailer})
	}
	return err
}

// answer moves a successful handler's response into the caller's reply, with the client's checks.
func (c *Conn) answer(resp any, reply any, call calls) error {
	msg, ok := resp.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "grpc: error while marshaling: proto: failed to marshal, message is %T, want proto.Message", resp)
	}
	if size, limit := proto.Size(msg), call.maxRecv; size > limit {
		return status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", size, limit)
	}
	out, ok := reply.(proto.Message)
	if !ok || out.ProtoReflect().Descriptor().FullName() != msg.ProtoReflect().Descriptor().FullName() {
		return status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %T is not a %T", reply, resp)
	}
	proto.Reset(out)
	// A typed nil answer is the empty message on the wire.
	if src := msg.ProtoReflect(); src.IsValid() {
		moveFields(out.ProtoReflect(), src)
	}
	return nil
}

// moveFields hands src's fields to dst without copying them: the top-level fields are set, maps,
// lists and messages shared. It serves the request (the call's own clone, which no one else holds) and
// the answer: a handler gives up its response when it returns, as grpc-go's server marshals it only
// after that (a handler that changed a response it had returned would race with the marshalling), and
// the caller reads its reply and never changes it (the gateway only marshals it). A deep copy of the
// answer cost 157 allocations and about a fifth of a service read's CPU (BenchmarkAnswerCopy).
func moveFields(dst, src protoreflect.Message) {
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(fd, v)
		return true
	})
	if u := src.GetUnknown(); len(u) > 0 {
		dst.SetUnknown(u)
	}
}

// appStatus is the status the server sends for a handler's error (grpc.Server's rule): a status
// error as it is, a context error with its code, anything else Unknown. The caller gets a copy, as
// decoded from the wire.
func appStatus(err error) *status.Status {
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	return status.FromProto(st.Proto())
}

// serve runs one call on the server side; in is the call's own copy of the request.
func (s *Server) serve(ctx context.Context, fullMethod string, in proto.Message) (any, error) {
	m, err := s.lookup(fullMethod)
	if err != nil {
		return nil, err
	}
	if size := proto.Size(in); size > s.maxRecv {
		return nil, status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", size, s.maxRecv)
	}
	// The generated handler allocates its own request and fills it with dec: the fields of the call's
	// copy move into it (no one else holds that copy, so its values are not copied again).
	dec := func(dst any) error {
		msg, ok := dst.(proto.Message)
		if !ok || msg.ProtoReflect().Descriptor().FullName() != in.ProtoReflect().Descriptor().FullName() {
			return status.Errorf(codes.Internal, "grpc: error unmarshalling request: %T is not a %T", in, dst)
		}
		moveFields(msg.ProtoReflect(), in.ProtoReflect())
		return nil
	}
	return m.handler(m.impl, ctx, dec, s.chain)
}

// lookup finds a method as grpc.Server does, with its answers for unknown ones.
func (s *Server) lookup(fullMethod string) (method, error) {
	sm, found := strings.CutPrefix(fullMethod, "/")
	pos := strings.LastIndex(sm, "/")
	if !found || pos == -1 {
		return method{}, status.Errorf(codes.Unimplemented, "malformed method name: %q", fullMethod)
	}
	service, name := sm[:pos], sm[pos+1:]
	methods, ok := s.services[service]
	if !ok {
		return method{}, status.Errorf(codes.Unimplemented, "unknown service %v", service)
	}
	m, ok := methods[name]
	if !ok {
		return method{}, status.Errorf(codes.Unimplemented, "unknown method %v for service %v", name, service)
	}
	if m.stream {
		return method{}, status.Errorf(codes.Unimplemented, "inprocgrpc: %s is a streaming method, not served in process", fullMethod)
	}
	return m, nil
}

// serverContext is the context the handler gets: none of the caller's values, the caller's deadline
// and cancellation, and what a grpc.Server puts there (peer, incoming metadata, the stream).
func (c *Conn) serverContext(ctx context.Context, md metadata.MD, stream *transportStream) (context.Context, context.CancelFunc) {
	// One cancelable context, with the deadline when the caller has one: a deadline context is
	// canceled by its own cancel func too, so a second WithCancel would only add allocations.
	var sctx context.Context
	var cancel context.CancelFunc
	if d, ok := ctx.Deadline(); ok {
		sctx, cancel = context.WithDeadline(c.srv.base, d)
	} else {
		sctx, cancel = context.WithCancel(c.srv.base)
	}
	stopAfter := context.AfterFunc(ctx, cancel)
	sctx = peer.NewContext(sctx, c.opts.Peer)
	sctx = metadata.NewIncomingContext(sctx, c.incoming(md))
	sctx = grpc.NewContextWithServerTransportStream(sctx, stream)
	return sctx, func() {
		stopAfter()
		cancel()
	}
}

// userAgent is what grpc-go's client sends, and its server passes on.
var userAgent = "grpc-go/" + grpc.Version

// incoming is the metadata a grpc.Server would give the handler for the caller's outgoing md.
func (c *Conn) incoming(md metadata.MD) metadata.MD {
	// Every value goes into one backing array, as the transport decodes a header block into one
	// buffer: the handler gets its own copy (it may change it) for two allocations, not one per key.
	n := 3
	for _, v := range md {
		n += len(v)
	}
	values := make([]string, 0, n)
	in := make(metadata.MD, len(md)+3)
	for k, v := range md {
		if reserved(k) {
			continue
		}
		start := len(values)
		values = append(values, v...)
		in[k] = values[start:len(values):len(values)]
	}
	own := len(values)
	values = append(values, c.opts.Authority, "application/grpc", userAgent)
	in[":authority"] = values[own : own+1 : own+1]
	in["content-type"] = values[own+1 : own+2 : own+2]
	in["user-agent"] = values[own+2 : own+3 : own+3]
	return in
}

// reserved reports the keys grpc-go's transport never sends as metadata (pseudo-headers and its
// own headers; user-agent is its own).
func reserved(key string) bool {
	if key != "" && key[0] == ':' {
		return true
	}
	switch key {
	case "content-type", "user-agent", "grpc-message-type", "grpc-encoding", "grpc-message", "grpc-status", "grpc-timeout", "te":
		return true
	}
	return false
}

// validate is grpc-go's check of a client's outgoing metadata: keys of [0-9a-z-_.] only, and values
// of printable ASCII unless the key ends in -bin.
func validate(md metadata.MD) error {
	for k, vals := range md {
		if k == "" {
			return fmt.Errorf("there is an empty key in the header")
		}
		if k[0] == ':' {
			continue
		}
		for i := 0; i < len(k); i++ {
			r := k[i]
			if !(r >= 'a' && r <= 'z') && !(r >= '0' && r <= '9') && r != '.' && r != '-' && r != '_' {
				return fmt.Errorf("header key %q contains illegal characters not in [0-9a-z-_.]", k)
			}
		}
		if strings.HasSuffix(k, "-bin") {
			continue
		}
		for _, v := range vals {
			for i := 0; i < len(v); i++ {
				if v[i] < 0x20 || v[i] > 0x7E {
					return fmt.Errorf("header key %q contains value with non-printable ASCII characters", k)
				}
			}
		}
	}
	return nil
}

// calls are the call options Invoke honours.
type calls struct {
	header, trailer *metadata.MD
	peer            *peer.Peer
	maxRecv         int
}

func callOptions(opts []grpc.CallOption) calls {
	c := calls{maxRecv: DefaultMaxRecvMsgSize}
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			c.header = o.HeaderAddr
		case grpc.TrailerCallOption:
			c.trailer = o.TrailerAddr
		case grpc.PeerCallOption:
			c.peer = o.PeerAddr
		case grpc.MaxRecvMsgSizeCallOption:
			c.maxRecv = o.MaxRecvMsgSize
		}
	}
	return c
}

// errIllegalHeaderWrite is grpc-go's answer to a header set after the header was sent.
var errIllegalHeaderWrite = status.Error(codes.Internal, "transport: SendHeader called multiple times")

// transportStream is the grpc.ServerTransportStream of one call: it collects the header and trailer
// metadata the handler sets.
type transportStream struct {
	method string

	mu              sync.Mutex
	header, trailer metadata.MD
	headerSent      bool
	done            bool
}

func (s *transportStream) Method() string { return s.method }

func (s *transportStream) SetHeader(md metadata.MD) error {
	if md.Len() == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.headerSent || s.done {
		return errIllegalHeaderWrite
	}
	s.header = metadata.Join(s.header, md)
	return nil
}

func (s *transportStream) SendHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.headerSent || s.done {
		return errIllegalHeaderWrite
	}
	s.header = metadata.Join(s.header, md)
	s.headerSent = true
	return nil
}

func (s *transportStream) SetTrailer(md metadata.MD) error {
	if md.Len() == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return errIllegalHeaderWrite
	}
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

// finish ends the stream with the handler's status (nil: success) and returns the header and trailer
// metadata the caller receives, by grpc-go's rules: the header (with content-type) is sent unless the
// call failed with no header metadata set, which makes the answer trailers-only (the caller's header
// is empty and its trailers carry content-type); the trailers carry the status's details
// (grpc-status-details-bin) as on the wire.
func (s *transportStream) finish(st *status.Status) (header, trailer metadata.MD) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
	trailer = wire(s.trailer)
	if st != nil && len(st.Proto().GetDetails()) > 0 {
		if b, err := proto.Marshal(st.Proto()); err == nil {
			trailer["grpc-status-details-bin"] = []string{string(b)}
		}
	}
	if st != nil && !s.headerSent && s.header.Len() == 0 {
		trailer["content-type"] = []string{"application/grpc"}
		return nil, trailer
	}
	header = wire(s.header)
	header["content-type"] = []string{"application/grpc"}
	return header, trailer
}

// wire is md as the caller receives it: keys lower case, gRPC's own keys left out.
func wire(md metadata.MD) metadata.MD {
	out := make(metadata.MD, len(md)+1)
	for k, v := range md {
		k = strings.ToLower(k)
		if reserved(k) {
			continue
		}
		out[k] = append(out[k], v...)
	}
	return out
}

// chainUnary chains interceptors as grpc.ChainUnaryInterceptor does: the first is the outermost.
func chainUnary(ints []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	ints = append([]grpc.UnaryServerInterceptor(nil), ints...)
	if len(ints) == 0 {
		return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			return handler(ctx, req)
		}
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return ints[0](ctx, req, info, nextHandler(ints, 0, info, handler))
	}
}

func nextHandler(ints []grpc.UnaryServerInterceptor, curr int, info *grpc.UnaryServerInfo, final grpc.UnaryHandler) grpc.UnaryHandler {
	if curr == len(ints)-1 {
		return final
	}
	return func(ctx context.Context, req any) (any, error) {
		return ints[curr+1](ctx, req, info, nextHandler(ints, curr+1, info, final))
	}
}
