package chat

import (
	"context"
	"testing"

	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/rpcpolicy"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
)

// TestAccessInterceptorRefusesMethodsWithoutPolicy: a chat method missing from the policy table never
// reaches its handler.
func TestAccessInterceptorRefusesMethodsWithoutPolicy(t *testing.T) {
	s := &Server{logger: zaptest.NewLogger(t)}
	called := false
	handler := func(context.Context, any) (any, error) { called = true; return nil, nil }
	_, err := s.accessInterceptor(rpcpolicy.Table{})(context.Background(), &chatv1.GetTeamRequest{TeamName: "acme"},
		&grpc.UnaryServerInfo{FullMethod: "/chat.v1.ChatService/GetTeam"}, handler)
	if status.Code(err) != codes.PermissionDenied || called {
		t.Fatalf("err = %v, handler called %v", err, called)
	}
}

func TestRoutePathsSpellBothPrefixes(t *testing.T) {
	p, _ := policies.Lookup("/chat.v1.ChatService/PerformAction")
	got := routePaths(p.Routes, &chatv1.PerformActionRequest{TeamName: "acme", BotName: "pingbot"})
	want := []string{"/api/v2/chat/action/acme/pingbot", "/api/v2/slack/action/acme/pingbot", "/api/v1/chat/action/acme/pingbot", "/api/v1/slack/action/acme/pingbot"}
	if len(got) != len(want) {
		t.Fatalf("paths %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("paths %v, want %v", got, want)
		}
	}
}
