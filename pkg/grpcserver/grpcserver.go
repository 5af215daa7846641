// Package grpcserver builds the gRPC servers every gantry service runs on: panic recovery, one
// request-logging interceptor, the gRPC health service and server reflection (so grpcurl works without
// .proto files), and a Serve that stops gracefully when its context ends.
//
// A server built with NewService also serves its unary methods in process (Direct): the gateway of
// the same process calls them through the very same interceptor chain, without gRPC's transport
// (package inprocgrpc).
package grpcserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/inprocgrpc"
	"github.com/gantry-dev/gantry/pkg/logging"
	"github.com/gantry-dev/gantry/pkg/memconn"
	"github.com/gantry-dev/gantry/pkg/netlimits"
	"github.com/gantry-dev/gantry/pkg/wirekeys"
)

// Server is a gRPC server with its health service.
type Server struct {
	*grpc.Server
	Health *health.Server
	logger *zap.Logger
	// probe, set by FollowProbe, drives the health status while serving.
	probe                       func(context.Context) error
	probeInterval, probeTimeout time.Duration
	// also are listeners Serve serves besides its own (ServeAlso).
	also []net.Listener
	// direct serves the unary methods in process (NewService); nil for New's servers.
	direct *inprocgrpc.Server
}

// New returns a server whose unary and streaming calls pass through panic recovery and request
// logging. Register services on it, then call MarkServing and Serve. The default connection limits of
// netlimits always apply, so no server runs unbounded; pass netlimits.Config.GRPCOptions in opts to
// apply configured ones (later options win).
func New(logger *zap.Logger, opts ...grpc.ServerOption) *Server {
	if logger == nil {
		logger = zap.NewNop()
	}
	opts = append(append(netlimits.DefaultConfig().GRPCOptions(),
		grpc.ChainUnaryInterceptor(logUnary(logger), recoverUnary(logger)),
		grpc.ChainStreamInterceptor(recoverStream(logger)),
	), opts...)
	s := &Server{Server: grpc.NewServer(opts...), Health: health.NewServer(), logger: logger}
	healthpb.RegisterHealthServer(s.Server, s.Health)
	reflection.Register(s.Server)
	return s
}

// Service is what a service's server adds to New's recovery and logging: its transport and limits,
// and its interceptors. NewService keeps the interceptors as values, so that the in-process path
// (Direct) runs the very chain the grpc.Server runs.
type Service struct {
	// Limits are the connection and message limits (netlimits.Config.GRPCOptions); the in-process
	// path enforces their largest request (GRPCMaxRecvMsgBytes) too. The zero value is the defaults.
	Limits netlimits.Config
	// Credentials secure the listeners; nil is plaintext.
	Credentials credentials.TransportCredentials
	// Unary and Stream run after recovery and logging, in order.
	Unary  []grpc.UnaryServerInterceptor
	Stream []grpc.StreamServerInterceptor
	// Polls are full method names that a client calls every few seconds (chat's approval relay):
	// their successful calls log at debug, like health checks, so a quiet relay is a quiet log.
	Polls []string
}

// NewService returns a server as New does, with svc's credentials, limits and interceptors, whose
// unary methods are also callable in process (Direct). Register services on it with its own
// RegisterService (pass the Server, not its embedded grpc.Server), so they are served both ways.
func NewService(logger *zap.Logger, svc Service) *Server {
	if logger == nil {
		logger = zap.NewNop()
	}
	limits := svc.Limits
	if limits.GRPCMaxRecvMsgBytes == 0 {
		limits = netlimits.DefaultConfig()
	}
	unary := append([]grpc.UnaryServerInterceptor{logUnary(logger, svc.Polls...), recoverUnary(logger)}, svc.Unary...)
	stream := append([]grpc.StreamServerInterceptor{recoverStream(logger)}, svc.Stream...)
	opts := append(limits.GRPCOptions(), grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	if svc.Credentials != nil {
		opts = append(opts, grpc.Creds(svc.Credentials))
	}
	s := &Server{Server: grpc.NewServer(opts...), Health: health.NewServer(), logger: logger,
		direct: inprocgrpc.NewServer(inprocgrpc.Config{Unary: unary, MaxRecvMsgSize: limits.GRPCMaxRecvMsgBytes})}
	healthpb.RegisterHealthServer(s, s.Health)
	reflection.Register(s) // streams: registered in process too, where they are refused
	return s
}

// RegisterService registers a service on the gRPC server and, for a NewService server, on its
// in-process path.
func (s *Server) RegisterService(desc *grpc.ServiceDesc, impl any) {
	s.Server.RegisterService(desc, impl)
	if s.direct != nil {
		s.direct.RegisterService(desc, impl)
	}
}

// Direct returns a connection that calls this server's unary methods in process, through its
// interceptor chain (see package inprocgrpc); opts.Peer is the caller the services see. Nil for a
// server built with New.
func (s *Server) Direct(opts inprocgrpc.ConnOptions) *inprocgrpc.Conn {
	if s.direct == nil {
		return nil
	}
	return s.direct.Conn(opts)
}

// checkDirect refuses to serve a NewService server with a service registered on its embedded
// grpc.Server alone: the gateway of the process would find it missing in process.
func (s *Server) checkDirect() error {
	if s.direct == nil {
		return nil
	}
	for name := range s.GetServiceInfo() {
		if !s.direct.Serves(name) {
			return fmt.Errorf("grpcserver: %s is registered on the embedded grpc.Server only, so it is not served in process: register it with the Server's RegisterService", name)
		}
	}
	return nil
}

// MarkServing reports every registered service, and the server as a whole, as SERVING.
func (s *Server) MarkServing() { s.setAll(healthpb.HealthCheckResponse_SERVING) }

// FollowProbe makes the health status follow probe while the server serves: every interval probe
// runs (bounded by timeout) and every registered service, and the server as a whole, is SERVING
// while it returns nil and NOT_SERVING while it fails. A service whose dependency (its store) cannot
// answer is so taken out of rotation by load balancers (the gateway's health checks) and put back
// as soon as it answers. Call it before Serve.
func (s *Server) FollowProbe(interval, timeout time.Duration, probe func(context.Context) error) {
	s.probe, s.probeInterval, s.probeTimeout = probe, interval, timeout
}

// followProbe is the loop of FollowProbe; it logs each change of state. It never waits for a probe:
// a probe runs in a goroutine of its own, and one that has not returned within the probe timeout (a
// store stuck on a frozen disk, whose read ignores its context) reports NOT_SERVING at once, without
// waiting for it to return; no other probe starts until it has, and its result is then reported as
// any other. Otherwise the status would hold its last value for as long as the store hangs.
func (s *Server) followProbe(ctx context.Context) {
	serving := true
	report := func(err error) {
		switch {
		case err != nil && serving:
			s.logger.Error("health probe failed: reporting NOT_SERVING until it passes", zap.Error(err))
			s.setAll(healthpb.HealthCheckResponse_NOT_SERVING)
		case err == nil && !serving:
			s.logger.Info("health probe passes again: reporting SERVING")
			s.setAll(healthpb.HealthCheckResponse_SERVING)
		}
		serving = err == nil
	}
	t := time.NewTicker(s.probeInterval)
	defer t.Stop()
	var (
		inFlight chan error       // the running probe's result; nil when none runs
		overdue  <-chan time.Time // fires when the running probe passes its timeout
		timer    *time.Timer      // overdue's timer
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if inFlight != nil {
				continue // still running, past its timeout or not: overdue has reported it
			}
			inFlight = make(chan error, 1)
			pctx, cancel := context.WithTimeout(ctx, s.probeTimeout)
			go func(result chan<- error) {
				defer cancel()
				result <- s.probe(pctx)
			}(inFlight)
			timer = time.NewTimer(s.probeTimeout)
			overdue = timer.C
		case err := <-inFlight:
			inFlight, overdue = nil, nil
			timer.Stop()
			if ctx.Err() != nil {
				return
			}
			report(err)
		case <-overdue:
			overdue = nil
			report(fmt.Errorf("the health probe has not returned within %s (a stalled store?)", s.probeTimeout))
		}
	}
}

func (s *Server) setAll(st healthpb.HealthCheckResponse_ServingStatus) {
	s.Health.SetServingStatus("", st)
	for name := range s.GetServiceInfo() {
		s.Health.SetServingStatus(name, st)
	}
}

// ServeAlso makes Serve serve lis too, with the same server: the same services, interceptors and
// credentials on every listener (an in-memory listener for the roles of the same process beside the
// TCP one). Call it before Serve.
func (s *Server) ServeAlso(lis net.Listener) { s.also = append(s.also, lis) }

// Serve serves on lis (and the listeners of ServeAlso) until ctx ends, then reports NOT_SERVING, lets
// calls in flight finish for up to grace, and stops. A listener that fails stops the server.
func (s *Server) Serve(ctx context.Context, lis net.Listener, grace time.Duration) error {
	if err := s.checkDirect(); err != nil {
		return err
	}
	s.MarkServing()
	probeCtx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	if s.probe != nil {
		go s.followProbe(probeCtx)
	}
	all := append([]net.Listener{lis}, s.also...)
	errc := make(chan error, len(all))
	for _, l := range all {
		go func() { errc <- s.Server.Serve(l) }()
	}
	select {
	case err := <-errc:
		s.Stop()
		if s.direct != nil {
			s.direct.Stop()
		}
		for range len(all) - 1 {
			<-errc
		}
		return err
	case <-ctx.Done():
	}
	s.Health.Shutdown()
	stopped := make(chan struct{})
	go func() {
		// In-process calls stop with the listeners: new ones are refused, those in flight finish.
		if s.direct != nil {
			s.direct.Drain()
		}
		s.GracefulStop()
		if s.direct != nil {
			s.direct.Wait()
		}
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(grace):
		s.logger.Warn("graceful stop timed out; closing remaining calls", zap.Duration("grace", grace))
		s.Stop()
	}
	if s.direct != nil {
		// The in-process calls have returned (or the grace is over): end their idle workers too, which
		// would otherwise outlive the stopped server by their idle timeout.
		s.direct.Stop()
	}
	var first error
	for range all {
		if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) && first == nil {
			first = err
		}
	}
	return first
}

// healthMethodPrefix starts the full method names of the gRPC health service.
const healthMethodPrefix = "/grpc.health.v1.Health/"

func logUnary(logger *zap.Logger, polls ...string) grpc.UnaryServerInterceptor {
	// Refusals (no or bad credentials, no permission) are what an unauthenticated client can cause at
	// any rate: their lines are sampled per code, and the rest counted in a summary line.
	refusals := logging.NewSampler(logger, 0, 0)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		code := status.Code(err)
		// Every call of a service logs at info, successful ones too: the line's request_id is what
		// ties a replica's work to the gateway's access log (at debug, off by default, a replica showed
		// no trace of the calls it served). The health service's calls are the load balancers' checks,
		// several a second: debug. So are the successful calls of the gateway of this same process
		// (package inprocgrpc, whose peer is in memory): there is no other replica to tell apart, the
		// gateway's access log and the audit trail hold them, and a second line per request was a
		// twelfth of a read's CPU and 400 bytes of log each.
		level := zapcore.InfoLevel
		switch {
		case code == codes.OK && strings.HasPrefix(info.FullMethod, healthMethodPrefix):
			level = zapcore.DebugLevel
		case code == codes.OK && inProcess(ctx):
			level = zapcore.DebugLevel
		case code == codes.OK && slices.Contains(polls, info.FullMethod):
			level = zapcore.DebugLevel
		case code == codes.Internal, code == codes.Unknown, code == codes.DataLoss:
			level = zapcore.ErrorLevel
		}
		// The fields are built only when the line is written (a health check's success, at debug, is
		// off by default, and building them cost allocations on every call).
		ce := logger.Check(level, "grpc call")
		if ce == nil {
			return resp, err
		}
		if (code == codes.Unauthenticated || code == codes.PermissionDenied) && !refusals.Allow("grpc."+code.String()) {
			return resp, err
		}
		fields := make([]zap.Field, 0, 5)
		fields = append(fields,
			zap.String("method", info.FullMethod),
			zap.String("code", code.String()),
			zap.Duration("duration", time.Since(start)),
		)
		if p, ok := peer.FromContext(ctx); ok {
			fields = append(fields, zap.String("peer", p.Addr.String()))
		}
		// The gateway's request id ties this line to its access and error logs.
		if ids := metadata.ValueFromIncomingContext(ctx, wirekeys.RequestID); len(ids) > 0 {
			fields = append(fields, zap.String("request_id", ids[0]))
		}
		ce.Write(fields...)
		return resp, err
	}
}

// inProcess reports whether the call came from this process's own gateway, in memory.
func inProcess(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	return ok && p.Addr != nil && p.Addr.Network() == memconn.Network
}

// errPanic is what a caller sees when a handler panics: the detail stays in the log.
var errPanic = status.Error(codes.Internal, "internal error")

func recoverUnary(logger *zap.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				logger.Error("panic in grpc handler", zap.String("method", info.FullMethod),
					zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
				resp, err = nil, errPanic
			}
		}()
		return handler(ctx, req)
	}
}

func recoverStream(logger *zap.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				logger.Error("panic in grpc stream handler", zap.String("method", info.FullMethod),
					zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
				err = errPanic
			}
		}()
		return handler(srv, ss)
	}
}
