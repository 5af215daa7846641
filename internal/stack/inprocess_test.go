package stack

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/gantry-dev/gantry/pkg/grpcserver"
	"github.com/gantry-dev/gantry/pkg/inprocgrpc"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
	secretsadminv1 "github.com/gantry-dev/gantry/proto/secretsadmin/v1"
)

// TestEveryMethodServedInProcessRunsTheChain: every unary method the services' gRPC servers serve
// (the secrets, secrets admin and chat APIs, health and reflection) is served in process too, and
// only through the server's interceptor chain: a chain that refuses everything refuses every method
// in process before its handler, and a method registered on the gRPC server but missing from the
// in-process path would fail here as an unknown service. Streaming methods are refused in process.
func TestEveryMethodServedInProcessRunsTheChain(t *testing.T) {
	seen := map[string]bool{}
	refuse := func(_ context.Context, _ any, info *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
		seen[info.FullMethod] = true
		return nil, status.Error(codes.PermissionDenied, "refused by the chain")
	}
	srv := grpcserver.NewService(logtest.New(t), grpcserver.Service{Unary: []grpc.UnaryServerInterceptor{refuse}})
	secretsv1.RegisterSecretsServiceServer(srv, secretsv1.UnimplementedSecretsServiceServer{})
	secretsadminv1.RegisterSecretsAdminServiceServer(srv, secretsadminv1.UnimplementedSecretsAdminServiceServer{})
	chatv1.RegisterChatServiceServer(srv, chatv1.UnimplementedChatServiceServer{})
	conn := srv.Direct(inprocgrpc.ConnOptions{})

	unary := 0
	for name, info := range srv.GetServiceInfo() {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		methods := d.(protoreflect.ServiceDescriptor).Methods()
		for _, m := range info.Methods {
			full := "/" + name + "/" + m.Name
			md := methods.ByName(protoreflect.Name(m.Name))
			in, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
			if err != nil {
				t.Fatal(err)
			}
			out, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
			if err != nil {
				t.Fatal(err)
			}
			err = conn.Invoke(context.Background(), full, in.New().Interface(), out.New().Interface())
			if m.IsClientStream || m.IsServerStream {
				if status.Code(err) != codes.Unimplemented || seen[full] {
					t.Errorf("streaming %s in process: %v", full, err)
				}
				continue
			}
			unary++
			if status.Convert(err).Message() != "refused by the chain" || !seen[full] {
				t.Errorf("%s in process: %v (chain ran: %v)", full, err, seen[full])
			}
		}
	}
	want := len(secretsv1.SecretsService_ServiceDesc.Methods) + len(chatv1.ChatService_ServiceDesc.Methods)
	if unary < want {
		t.Fatalf("%d unary methods called in process, want at least %d", unary, want)
	}
}

// TestInProcessServicesHaveNoStreamingRoutes: the gateway calls the secrets and chat APIs in
// process, where streams are not served (package inprocgrpc); a streaming method added to either
// would need real gRPC for its route.
func TestInProcessServicesHaveNoStreamingRoutes(t *testing.T) {
	for _, sd := range []grpc.ServiceDesc{secretsv1.SecretsService_ServiceDesc, chatv1.ChatService_ServiceDesc} {
		if len(sd.Streams) > 0 {
			t.Errorf("%s has streaming methods %v: route them over gRPC (gateway.InProcessServices) or serve streams in process", sd.ServiceName, sd.Streams)
		}
	}
}
