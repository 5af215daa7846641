package chat

import (
	"context"
	"maps"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/grpcserver"
	"github.com/gantry-dev/gantry/pkg/inprocgrpc"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/memconn"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
)

// TestInProcessCallsRefuseAMethodWithoutPolicy: the gateway's in-process path runs chat's access
// interceptor as gRPC does, so a method missing from the policy table is refused before its handler
// both ways (the server has no service behind it: a call that got past the policy would fail with
// Internal, from the recovered panic).
func TestInProcessCallsRefuseAMethodWithoutPolicy(t *testing.T) {
	table := maps.Clone(policies)
	delete(table, chatv1.ChatService_GetTeam_FullMethodName)
	s := NewServer(nil, logtest.New(t), nil)
	srv := grpcserver.NewService(logtest.New(t), grpcserver.Service{Unary: []grpc.UnaryServerInterceptor{s.accessInterceptor(table)}})
	chatv1.RegisterChatServiceServer(srv, s)
	lis := memconn.Listen("chat")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	cc, err := grpc.NewClient("passthrough:///chat", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.Dial(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	for name, conn := range map[string]grpc.ClientConnInterface{"in process": srv.Direct(inprocgrpc.ConnOptions{}), "gRPC": cc} {
		_, err := chatv1.NewChatServiceClient(conn).GetTeam(context.Background(), &chatv1.GetTeamRequest{TeamName: "acme"})
		if status.Code(err) != codes.PermissionDenied || status.Convert(err).Message() != status.Convert(errNoPolicy).Message() {
			t.Errorf("%s: GetTeam without a policy: %v", name, err)
		}
	}
}
