package grpcserver

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/inprocgrpc"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/memconn"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
)

type panickyChat struct {
	chatv1.UnimplementedChatServiceServer
}

func (panickyChat) GetTeam(_ context.Context, req *chatv1.GetTeamRequest) (*chatv1.GetTeamResponse, error) {
	if req.GetTeamName() == "panic" {
		panic("bug")
	}
	return &chatv1.GetTeamResponse{TeamId: "T1"}, nil
}

func start(t *testing.T) (*grpc.ClientConn, context.CancelFunc, <-chan error) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(logtest.New(t))
	chatv1.RegisterChatServiceServer(srv.Server, panickyChat{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, time.Second) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, cancel, done
}

func TestPanicBecomesInternalAndServerKeepsServing(t *testing.T) {
	conn, cancel, done := start(t)
	defer func() { cancel(); <-done }()
	client := chatv1.NewChatServiceClient(conn)
	ctx := context.Background()
	_, err := client.GetTeam(ctx, &chatv1.GetTeamRequest{TeamName: "panic"})
	if st := status.Convert(err); st.Code() != codes.Internal || st.Message() != "internal error" {
		t.Fatalf("panic: got %v, want Internal 'internal error'", err)
	}
	if resp, err := client.GetTeam(ctx, &chatv1.GetTeamRequest{TeamName: "ok"}); err != nil || resp.GetTeamId() != "T1" {
		t.Fatalf("after panic: %v %v", resp, err)
	}
}

func TestHealthReflectionAndGracefulStop(t *testing.T) {
	conn, cancel, done := start(t)
	ctx := context.Background()
	for _, svc := range []string{"", "chat.v1.ChatService"} {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q = %v, %v; want SERVING", svc, resp, err)
		}
	}

	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range resp.GetListServicesResponse().GetService() {
		found = found || s.GetName() == "chat.v1.ChatService"
	}
	if !found {
		t.Errorf("reflection does not list chat.v1.ChatService: %v", resp)
	}
	_ = stream.CloseSend()

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after cancel: %v", err)
	}
}

// TestFollowProbe: the health status of the server and of every service follows the probe, both
// ways, while the server serves.
func TestFollowProbe(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(logtest.New(t))
	chatv1.RegisterChatServiceServer(srv.Server, panickyChat{})
	var failing atomic.Bool
	srv.FollowProbe(10*time.Millisecond, time.Second, func(ctx context.Context) error {
		if failing.Load() {
			return errors.New("store down")
		}
		return ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, time.Second) }()
	defer func() { cancel(); <-done }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	waitFor := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			all, svc := true, true
			for _, name := range []string{"", chatv1.ChatService_ServiceDesc.ServiceName} {
				r, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
				if err != nil || r.GetStatus() != want {
					if name == "" {
						all = false
					} else {
						svc = false
					}
				}
			}
			if all && svc {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("health never became %v (server %v, service %v)", want, all, svc)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor(healthpb.HealthCheckResponse_SERVING)
	failing.Store(true)
	waitFor(healthpb.HealthCheckResponse_NOT_SERVING)
	failing.Store(false)
	waitFor(healthpb.HealthCheckResponse_SERVING)
}

// TestFollowProbeDoesNotWaitForAHungProbe: a probe that ignores its context and hangs (a store read
// stuck on a frozen disk) turns the health NOT_SERVING once it has run past the probe timeout, while
// it still hangs; no second probe starts meanwhile, and once it returns the health follows probes
// again. Before, the loop waited for the probe and the status held its last value, SERVING, for as
// long as the store hung.
func TestFollowProbeDoesNotWaitForAHungProbe(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(logtest.New(t))
	chatv1.RegisterChatServiceServer(srv.Server, panickyChat{})
	var hang atomic.Bool
	var running atomic.Int32
	hung := make(chan struct{}, 1)
	release := make(chan struct{})
	srv.FollowProbe(5*time.Millisecond, 20*time.Millisecond, func(ctx context.Context) error {
		if n := running.Add(1); n > 1 {
			t.Errorf("%d probes run at once: a new one started while one hung", n)
		}
		defer running.Add(-1)
		if hang.Load() {
			select {
			case hung <- struct{}{}:
			default:
			}
			<-release // ignores ctx, as a bbolt read does
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, time.Second) }()
	defer func() { cancel(); <-done }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	status := func() healthpb.HealthCheckResponse_ServingStatus {
		r, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatalf("health check: %v", err)
		}
		return r.GetStatus()
	}
	waitFor := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for status() != want {
			if time.Now().After(deadline) {
				t.Fatalf("health never became %v", want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor(healthpb.HealthCheckResponse_SERVING)
	hang.Store(true)
	<-hung
	waitFor(healthpb.HealthCheckResponse_NOT_SERVING)
	if running.Load() != 1 {
		t.Errorf("the hung probe is not running (%d)", running.Load())
	}
	hang.Store(false)
	close(release)
	waitFor(healthpb.HealthCheckResponse_SERVING)
}

// TestServeAlsoServesTheSameServerInMemory checks that a listener added with ServeAlso reaches the
// same services and interceptors (panic recovery here) as the main one, and stops with it.
func TestServeAlsoServesTheSameServerInMemory(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mem := memconn.Listen("chat")
	srv := New(logtest.New(t))
	chatv1.RegisterChatServiceServer(srv.Server, panickyChat{})
	srv.ServeAlso(mem)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, time.Second) }()
	conn, err := grpc.NewClient("passthrough:///chat", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return mem.Dial(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := chatv1.NewChatServiceClient(conn)
	if resp, err := client.GetTeam(context.Background(), &chatv1.GetTeamRequest{TeamName: "acme"}); err != nil || resp.GetTeamId() != "T1" {
		t.Fatalf("in-memory call: %v %v", resp, err)
	}
	if _, err := client.GetTeam(context.Background(), &chatv1.GetTeamRequest{TeamName: "panic"}); status.Code(err) != codes.Internal {
		t.Fatalf("panic over the in-memory listener: %v, want Internal from the recovery interceptor", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := mem.Dial(context.Background()); err == nil {
		t.Fatal("the in-memory listener still accepts after Serve returned")
	}
}

// TestSuccessfulCallLogsItsRequestID: at the default level (info) a successful call writes its "grpc
// call" line with the gateway's request id, so an operator can follow a request from the gateway's
// access log to the replica that served it (on main successful calls logged at debug only: replicas
// showed no request id); the health checks' successes stay at debug.
func TestSuccessfulCallLogsItsRequestID(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(zap.New(core))
	chatv1.RegisterChatServiceServer(srv.Server, panickyChat{})
	srv.MarkServing()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, time.Second) }()
	defer func() { cancel(); <-done }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	callCtx := metadata.AppendToOutgoingContext(context.Background(), "x-request-id", "req-42")
	if _, err := chatv1.NewChatServiceClient(conn).GetTeam(callCtx, &chatv1.GetTeamRequest{TeamName: "ok"}); err != nil {
		t.Fatal(err)
	}
	lines := logs.FilterMessage("grpc call").AllUntimed()
	if len(lines) != 1 {
		t.Fatalf("%d grpc call lines at info, want 1 (the GetTeam call; not the health check): %v", len(lines), lines)
	}
	got := lines[0].ContextMap()
	if got["request_id"] != "req-42" || got["method"] != "/chat.v1.ChatService/GetTeam" || got["code"] != "OK" {
		t.Errorf("grpc call line %v, want request_id req-42, method GetTeam, code OK", got)
	}
}

// TestDirectRunsRecoveryAndLogging: an in-process call passes through the server's own recovery and
// logging: a panic is Internal, logged, and the server keeps answering. The gateway of the same
// process logs its successful calls itself (access log, audit trail): their grpc call lines are at
// debug, the failed one at error.
func TestDirectRunsRecoveryAndLogging(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	srv := NewService(zap.New(core), Service{})
	chatv1.RegisterChatServiceServer(srv, panickyChat{})
	client := chatv1.NewChatServiceClient(srv.Direct(inprocgrpc.ConnOptions{Peer: &peer.Peer{Addr: memconn.Addr("chat")}}))
	if _, err := client.GetTeam(context.Background(), &chatv1.GetTeamRequest{TeamName: "panic"}); status.Code(err) != codes.Internal || status.Convert(err).Message() != "internal error" {
		t.Fatalf("panic in process: %v", err)
	}
	if r, err := client.GetTeam(context.Background(), &chatv1.GetTeamRequest{TeamName: "ok"}); err != nil || r.GetTeamId() != "T1" {
		t.Fatalf("after the panic: %v %v", r, err)
	}
	if logs.FilterMessage("panic in grpc handler").Len() != 1 {
		t.Error("the panic was not logged")
	}
	calls := logs.FilterMessage("grpc call").All()
	if len(calls) != 1 || calls[0].ContextMap()["peer"] != "memory:chat" || calls[0].ContextMap()["code"] != "Internal" {
		t.Errorf("grpc call lines at info: %v, want the failed call only", calls)
	}
}

// TestServeRefusesAServiceMissingInProcess: a NewService server whose service was registered on the
// embedded grpc.Server alone would be served over gRPC but not to the gateway of its process: Serve
// refuses to start.
func TestServeRefusesAServiceMissingInProcess(t *testing.T) {
	srv := NewService(logtest.New(t), Service{})
	chatv1.RegisterChatServiceServer(srv.Server, panickyChat{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	if err := srv.Serve(context.Background(), lis, time.Second); err == nil || !strings.Contains(err.Error(), "chat.v1.ChatService") {
		t.Fatalf("Serve: %v", err)
	}
}

// TestPollsLogAtDebug: a method named a poll logs its successes at debug (a relay asking every two
// seconds would fill the log) and its failures as any call does.
func TestPollsLogAtDebug(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	intercept := logUnary(zap.New(core), "/pkg.Svc/Poll")
	call := func(method string, err error) {
		_, _ = intercept(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) { return nil, err })
	}
	call("/pkg.Svc/Poll", nil)
	if n := logs.FilterMessage("grpc call").Len(); n != 0 {
		t.Fatalf("a successful poll logged %d lines at info", n)
	}
	call("/pkg.Svc/Other", nil)
	call("/pkg.Svc/Poll", status.Error(codes.Unavailable, "down"))
	if n := logs.FilterMessage("grpc call").Len(); n != 2 {
		t.Fatalf("%d lines at info, want the other method's and the failed poll's", n)
	}
}
