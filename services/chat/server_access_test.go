package chat

import (
	"context"
	"slices"
	"testing"

	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-dev/gantry/pkg/audit"
	"github.com/gantry-dev/gantry/pkg/rpcpolicy"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
)

// TestAccessInterceptorRefusesMethodsWithoutPolicy: a chat method missing from the policy table never
// reaches its handler.
func TestAccessInterceptorRefusesMethodsWithoutPolicy(t *testing.T) {
	s := &Server{logger: zaptest.NewLogger(t), audit: audit.Discard()}
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
	// Omnibot serves the action route at v2 only: /api/v1/slack/action is no spelling of it.
	want := []string{"/api/v2/chat/action/acme/pingbot", "/api/v1/chat/action/acme/pingbot", "/api/v2/slack/action/acme/pingbot"}
	if !slices.Equal(got, want) {
		t.Errorf("paths %v, want %v", got, want)
	}
	p, _ = policies.Lookup("/chat.v1.ChatService/SendIm")
	got = routePaths(p.Routes, &chatv1.SendImRequest{TeamName: "acme", BotName: "pingbot", Email: "a@b.c"})
	want = []string{"/api/v1/chat/send_im/acme/pingbot/a@b.c", "/api/v1/slack/send_im/acme/pingbot/a@b.c"}
	if !slices.Equal(got, want) {
		t.Errorf("paths %v, want %v", got, want)
	}
}

// TestOmnibotPatternsMatchWhatTheyMatchedInOmnibot: an Omnibot file's patterns grant the routes they
// granted in Omnibot, no more: /api/v1/slack/ opens the lookups and send_im, never the action route.
func TestOmnibotPatternsMatchWhatTheyMatchedInOmnibot(t *testing.T) {
	calls := map[string]proto.Message{
		"GetTeam":       &chatv1.GetTeamRequest{TeamName: "acme"},
		"GetUser":       &chatv1.GetUserRequest{TeamName: "acme", BotName: "pingbot", Email: "a@b.c"},
		"GetChannel":    &chatv1.GetChannelRequest{TeamName: "acme", BotName: "pingbot", ChannelName: "general"},
		"GetIms":        &chatv1.GetImsRequest{TeamName: "acme", BotName: "pingbot"},
		"SendIm":        &chatv1.SendImRequest{TeamName: "acme", BotName: "pingbot", Email: "a@b.c"},
		"PerformAction": &chatv1.PerformActionRequest{TeamName: "acme", BotName: "pingbot"},
	}
	tests := []struct {
		pattern string
		allows  []string
	}{
		{"/api/v1/slack/", []string{"GetTeam", "GetUser", "GetChannel", "GetIms", "SendIm"}},
		{"/api/v1/slack/get_", []string{"GetTeam", "GetUser", "GetChannel", "GetIms"}},
		{"/api/v2/slack/action/acme/pingbot$", []string{"PerformAction"}},
		{"/api/v2/slack/", []string{"PerformAction"}},
		{"/api/v1/chat/", []string{"GetTeam", "GetUser", "GetChannel", "GetIms", "SendIm", "PerformAction"}}, // gantry's v1 action alias
	}
	for _, tt := range tests {
		a := mustACL(t, "checks: [{module: allowed_paths, kwargs: {paths: ['"+tt.pattern+"']}}]")
		for method, req := range calls {
			p, _ := policies.Lookup("/chat.v1.ChatService/" + method)
			err := a.authorize(AccessRequest{Method: p.Routes[0].Method, Paths: routePaths(p.Routes, req), Header: func(string) string { return "" }})
			if want := slices.Contains(tt.allows, method); (err == nil) != want {
				t.Errorf("%s on %s: err = %v, want allowed %v", tt.pattern, method, err, want)
			}
		}
	}
}
