package secrets

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
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// TestInProcessCallsRefuseAMethodWithoutPolicy: the gateway's in-process path runs the policy
// interceptor as gRPC does, so a method missing from the policy table is refused before its handler
// both ways (the server here has no service behind it: a call that got past the policy would fail
// with Internal, from the recovered panic).
func TestInProcessCallsRefuseAMethodWithoutPolicy(t *testing.T) {
	table := maps.Clone(policies)
	delete(table, secretsv1.SecretsService_GetCredential_FullMethodName)
	s := &Server{logger: logtest.New(t)}
	srv := grpcserver.NewService(logtest.New(t), grpcserver.Service{Unary: []grpc.UnaryServerInterceptor{s.authInterceptor(table)}})
	secretsv1.RegisterSecretsServiceServer(srv, s)
	lis := memconn.Listen("secrets")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	cc, err := grpc.NewClient("passthrough:///secrets", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.Dial(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	for name, conn := range map[string]grpc.ClientConnInterface{"in process": srv.Direct(inprocgrpc.ConnOptions{}), "gRPC": cc} {
		client := secretsv1.NewSecretsServiceClient(conn)
		_, err := client.GetCredential(context.Background(), &secretsv1.GetCredentialRequest{Id: "x"})
		if status.Code(err) != codes.PermissionDenied || status.Convert(err).Message() != status.Convert(errNoPolicy).Message() {
			t.Errorf("%s: GetCredential without a policy: %v", name, err)
		}
	}
}
