package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/rpcpolicy"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
	optionsv1 "github.com/gantry-dev/gantry/proto/gantry/options/v1"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// invokeEmpty calls a method of sd with an empty request over conn and returns the status.
func invokeEmpty(t *testing.T, ctx context.Context, conn *grpc.ClientConn, m protoreflect.MethodDescriptor) *status.Status {
	t.Helper()
	newMsg := func(name protoreflect.FullName) proto.Message {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(name)
		if err != nil {
			t.Fatal(err)
		}
		return mt.New().Interface()
	}
	full := "/" + string(m.Parent().FullName()) + "/" + string(m.Name())
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return status.Convert(conn.Invoke(ctx, full, newMsg(m.Input().FullName()), newMsg(m.Output().FullName())))
}

// TestSecretsPoliciesAreEnforcedForEveryRPC walks the secrets service's descriptor: a browser session
// (header login, as the gateway forwards it) without the XSRF proof is refused by every method the
// proto declares a write, and passes authentication on every read; public methods need no
// authentication at all.
func TestSecretsPoliciesAreEnforcedForEveryRPC(t *testing.T) {
	s := startStack(t, func(c *stack.Config) {
		c.Secrets.Auth.UserAuthModule = "header"
		c.Secrets.Auth.HeaderUsername = "X-Forwarded-User"
		c.Secrets.Auth.HeaderEmail = "X-Forwarded-Email"
	})
	conn := s.dialAsGateway(s.SecretsAddr)
	// Without browser login, unauthenticated calls are refused with "authentication required".
	plain := startStack(t, nil)
	plainConn := plain.dialAsGateway(plain.SecretsAddr)
	browser := metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-user", "alice", "x-forwarded-email", "alice@example.com")
	sd := secretsv1.File_secrets_v1_secrets_proto.Services().ByName("SecretsService")
	table := rpcpolicy.MustFor(sd)
	for i := 0; i < sd.Methods().Len(); i++ {
		m := sd.Methods().Get(i)
		p, _ := table.Lookup("/" + string(sd.FullName()) + "/" + string(m.Name()))
		t.Run(string(m.Name()), func(t *testing.T) {
			st := invokeEmpty(t, browser, conn, m)
			xsrfRefused := st.Code() == codes.Unauthenticated && strings.Contains(st.Message(), "XSRF")
			switch p.Access {
			case optionsv1.Access_ACCESS_AUTHENTICATED_WRITE:
				if !xsrfRefused {
					t.Errorf("write without XSRF: %v, want Unauthenticated (XSRF)", st.Err())
				}
			case optionsv1.Access_ACCESS_AUTHENTICATED:
				if xsrfRefused || st.Code() == codes.Unauthenticated {
					t.Errorf("read by a logged-in browser: %v", st.Err())
				}
				if anon := invokeEmpty(t, context.Background(), conn, m); anon.Code() != codes.Unauthenticated {
					t.Errorf("read without credentials: %v, want Unauthenticated", anon.Err())
				}
			case optionsv1.Access_ACCESS_PUBLIC:
				if anon := invokeEmpty(t, context.Background(), plainConn, m); strings.Contains(anon.Message(), "authentication required") {
					t.Errorf("public method without credentials: %v", anon.Err())
				}
			default:
				t.Errorf("policy %v", p.Access)
			}
		})
	}
}

// TestChatPoliciesAreEnforcedForEveryRPC walks the chat service's descriptor: a configuration that
// allows nothing denies every method before its handler, one that allows every route lets every
// method through to its handler, over real gRPC from the gateway's certificate. Slack's requests
// (ACCESS_SLACK_SIGNED) are not Omnibot routes: whatever the route checks, an unsigned one is
// refused as unauthenticated.
func TestChatPoliciesAreEnforcedForEveryRPC(t *testing.T) {
	sd := chatv1.File_chat_v1_chat_proto.Services().ByName("ChatService")
	table := rpcpolicy.MustFor(sd)
	for _, tc := range []struct {
		name, conf string
		denied     bool
	}{
		{"deny all", "teams: {acme: T0FAKE001}\nauthorization:\n  checks:\n    - module: \"omnibot.authnz:allowed_paths\"\n      kwargs: {paths: [\"/nothing/\"]}\n", true},
		{"allow all", "teams: {acme: T0FAKE001}\nauthorization:\n  checks:\n    - module: \"omnibot.authnz:allowed_paths\"\n      kwargs: {paths: [\"/api/\"]}\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "chat.yaml")
			if err := os.WriteFile(file, []byte(tc.conf), 0o600); err != nil {
				t.Fatal(err)
			}
			s := startStack(t, func(c *stack.Config) { c.Chat.ConfigFile = file })
			conn := s.dialAsGateway(s.ChatAddr)
			for i := 0; i < sd.Methods().Len(); i++ {
				m := sd.Methods().Get(i)
				st := invokeEmpty(t, context.Background(), conn, m)
				if p, _ := table.Lookup("/" + string(sd.FullName()) + "/" + string(m.Name())); p.Access == optionsv1.Access_ACCESS_SLACK_SIGNED {
					if st.Code() != codes.Unauthenticated && st.Code() != codes.InvalidArgument {
						t.Errorf("%s without a signature: %v, want Unauthenticated or InvalidArgument", m.Name(), st.Err())
					}
					continue
				}
				if denied := st.Code() == codes.PermissionDenied; denied != tc.denied {
					t.Errorf("%s: %v, want denied=%v", m.Name(), st.Err(), tc.denied)
				}
			}
		})
	}
}
