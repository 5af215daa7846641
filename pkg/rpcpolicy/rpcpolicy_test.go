package rpcpolicy

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
	optionsv1 "github.com/gantry-dev/gantry/proto/gantry/options/v1"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// TestEveryRPCHasAPolicy is the guard the issue asks for: an RPC added to a service without an
// access policy fails here (and is denied at runtime).
func TestEveryRPCHasAPolicy(t *testing.T) {
	for _, sd := range []protoreflect.ServiceDescriptor{
		secretsv1.File_secrets_v1_secrets_proto.Services().ByName("SecretsService"),
		chatv1.File_chat_v1_chat_proto.Services().ByName("ChatService"),
	} {
		table, err := For(sd)
		if err != nil {
			t.Fatal(err)
		}
		if len(table) != sd.Methods().Len() {
			t.Errorf("%s: %d policies for %d methods", sd.FullName(), len(table), sd.Methods().Len())
		}
	}
}

// withoutPolicy rebuilds the secrets proto file with one method's access option removed.
func withoutPolicy(t *testing.T, method string) protoreflect.ServiceDescriptor {
	t.Helper()
	fdp := protodesc.ToFileDescriptorProto(secretsv1.File_secrets_v1_secrets_proto)
	fdp.Name = proto.String("secrets/v1/secrets_without_policy.proto")
	for _, m := range fdp.GetService()[0].GetMethod() {
		if m.GetName() == method {
			opts := proto.Clone(m.GetOptions()).(*descriptorpb.MethodOptions)
			proto.ClearExtension(opts, optionsv1.E_Access)
			m.Options = opts
		}
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Services().Get(0)
}

func TestAMethodWithoutPolicyIsReportedAndDenied(t *testing.T) {
	table, err := For(withoutPolicy(t, "PutService"))
	if err == nil || !strings.Contains(err.Error(), "PutService") {
		t.Fatalf("err = %v, want PutService named", err)
	}
	if _, ok := table.Lookup("/secrets.v1.SecretsService/PutService"); ok {
		t.Error("Lookup found a policy for the method without one")
	}
	if p, ok := table.Lookup("/secrets.v1.SecretsService/GetService"); !ok || p.Access != optionsv1.Access_ACCESS_AUTHENTICATED {
		t.Errorf("GetService = %v %v", p, ok)
	}
	if _, ok := table.Lookup("/secrets.v1.SecretsService/NoSuchMethod"); ok {
		t.Error("Lookup found an unknown method")
	}
}

func TestRoutesAndPaths(t *testing.T) {
	table := MustFor(chatv1.File_chat_v1_chat_proto.Services().ByName("ChatService"))
	p, _ := table.Lookup("/chat.v1.ChatService/PerformAction")
	if len(p.Routes) != 3 || p.Routes[0] != (Route{"POST", "/api/v2/chat/action/{team_name}/{bot_name}"}) || p.Routes[1].Template != "/api/v1/chat/action/{team_name}/{bot_name}" ||
		p.Routes[2].Template != "/api/v2/slack/action/{team_name}/{bot_name}" {
		t.Fatalf("routes %v", p.Routes)
	}
	got := p.Routes[0].Path(&chatv1.PerformActionRequest{TeamName: "acme", BotName: "ping bot+1"})
	if got != "/api/v2/chat/action/acme/ping bot+1" {
		t.Errorf("path %q", got)
	}
	u, _ := table.Lookup("/chat.v1.ChatService/GetUser")
	if got := u.Routes[0].Path(&chatv1.GetUserRequest{TeamName: "t", BotName: "b", Email: "a+b@example.com"}); got != "/api/v1/chat/get_user/t/b/a+b@example.com" {
		t.Errorf("path %q", got)
	}
}

// TestStateChangingRoutesAreWrites keeps declarations honest: a secrets RPC reached by POST, PUT,
// PATCH or DELETE changes state, so it must demand the browser's XSRF proof (or be a public login
// route).
func TestStateChangingRoutesAreWrites(t *testing.T) {
	// GetUserEmail answers POST too, as Confidant did for its clients; it reads only.
	readsByPost := map[string]bool{"GetUserEmail": true}
	table := MustFor(secretsv1.File_secrets_v1_secrets_proto.Services().ByName("SecretsService"))
	for name, p := range table {
		method := name[strings.LastIndex(name, "/")+1:]
		for _, r := range p.Routes {
			if r.Method == "GET" || readsByPost[method] {
				continue
			}
			if p.Access != optionsv1.Access_ACCESS_AUTHENTICATED_WRITE && p.Access != optionsv1.Access_ACCESS_PUBLIC {
				t.Errorf("%s is reached by %s %s but declared %v", method, r.Method, r.Template, p.Access)
			}
		}
	}
}
