package chat

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-dev/gantry/pkg/audit"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/rpcpolicy"
	"github.com/gantry-dev/gantry/pkg/wirekeys"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
)

// TestAccessInterceptorRefusesMethodsWithoutPolicy: a chat method missing from the policy table never
// reaches its handler.
func TestAccessInterceptorRefusesMethodsWithoutPolicy(t *testing.T) {
	s := &Server{logger: logtest.New(t), audit: audit.Discard()}
	called := false
	handler := func(context.Context, any) (any, error) { called = true; return nil, nil }
	_, err := s.accessInterceptor(rpcpolicy.Table{})(context.Background(), &chatv1.GetTeamRequest{TeamName: "acme"},
		&grpc.UnaryServerInfo{FullMethod: "/chat.v1.ChatService/GetTeam"}, handler)
	if status.Code(err) != codes.PermissionDenied || called {
		t.Fatalf("err = %v, handler called %v", err, called)
	}
}

// TestAccessAliasesAreRoutesOfOneMethod: every alias and its target are routes of one method.
func TestAccessAliasesAreRoutesOfOneMethod(t *testing.T) {
	for alias, target := range accessAliases {
		found := false
		for _, p := range policies {
			_, a := p.Route(alias)
			_, b := p.Route(target)
			found = found || a && b
		}
		if !found {
			t.Errorf("%s -> %s: not two routes of one method", alias, target)
		}
	}
}

// TestAccessIsDecidedOnTheSpellingUsed: through the interceptor, with the route the gateway names,
// a pattern opens the spellings it matches and no other (Omnibot's request.path): Omnibot's /api/v1/
// and /api/v1/slack/ never open an action (its v2 route, nor gantry's v1 alias, decided as v2), and a
// denial names the path the caller used. A direct gRPC caller (no route named) is decided on gantry's
// path; a route the method does not have is refused.
func TestAccessIsDecidedOnTheSpellingUsed(t *testing.T) {
	action := &chatv1.PerformActionRequest{TeamName: "acme", BotName: "pingbot"}
	team := &chatv1.GetTeamRequest{TeamName: "acme"}
	const (
		v2Chat   = "/api/v2/chat/action/{team_name}/{bot_name}"
		v1Chat   = "/api/v1/chat/action/{team_name}/{bot_name}"
		v2Slack  = "/api/v2/slack/action/{team_name}/{bot_name}"
		teamChat = "/api/v1/chat/get_team/{team_name}"
		teamOmni = "/api/v1/slack/get_team/{team_name}"
		direct   = "" // a direct gRPC caller: no route named
	)
	tests := []struct {
		pattern, route string
		req            proto.Message
		denied         string // the denial's path, "" when allowed
	}{
		{"/api/v1/", v2Slack, action, "/api/v2/slack/action/acme/pingbot"},
		{"/api/v1/", v2Chat, action, "/api/v2/chat/action/acme/pingbot"},
		{"/api/v1/", v1Chat, action, "/api/v1/chat/action/acme/pingbot (checked as /api/v2/chat/action/acme/pingbot)"},
		{"/api/v1/", teamOmni, team, ""},
		{"/api/v1/", teamChat, team, ""},
		{"/api/v1/slack/", v2Slack, action, "/api/v2/slack/action/acme/pingbot"},
		{"/api/v1/slack/", teamOmni, team, ""},
		{"/api/v1/slack/", teamChat, team, "/api/v1/chat/get_team/acme"},
		{"/api/v1/slack/", direct, team, "/api/v1/chat/get_team/acme"},
		{"/api/v2/slack/action/acme/pingbot$", v2Slack, action, ""},
		{"/api/v2/slack/action/acme/pingbot$", v2Chat, action, "/api/v2/chat/action/acme/pingbot"},
		{"/api/v2/chat/action/", v2Chat, action, ""},
		{"/api/v2/chat/action/", v1Chat, action, ""}, // gantry's v1 alias is its v2 route
		{"/api/v2/chat/action/", direct, action, ""},
		{"/api/v2/chat/action/", v2Slack, action, "/api/v2/slack/action/acme/pingbot"},
		{"/api/v1/chat/", v1Chat, action, "/api/v1/chat/action/acme/pingbot (checked as /api/v2/chat/action/acme/pingbot)"},
		{"/api/v1/chat/", teamChat, team, ""},
		{"/api/", teamOmni, team, ""},
		{"/api/", v2Slack, action, ""},
	}
	for _, tt := range tests {
		srv := NewServer(&Service{acl: mustACL(t, "checks: [{module: allowed_paths, kwargs: {paths: ['"+tt.pattern+"']}}]")}, logtest.New(t), nil)
		method := "/chat.v1.ChatService/PerformAction"
		if _, ok := tt.req.(*chatv1.GetTeamRequest); ok {
			method = "/chat.v1.ChatService/GetTeam"
		}
		md := metadata.MD{}
		if tt.route != "" {
			md = metadata.Pairs(wirekeys.ProxyRoute, tt.route)
		}
		called := false
		_, err := srv.AccessInterceptor()(metadata.NewIncomingContext(context.Background(), md), tt.req, &grpc.UnaryServerInfo{FullMethod: method},
			func(context.Context, any) (any, error) { called = true; return nil, nil })
		if tt.denied == "" {
			if err != nil || !called {
				t.Errorf("%s on %q: %v, want allowed", tt.pattern, tt.route, err)
			}
			continue
		}
		if want := "access denied: path " + tt.denied + " is not allowed"; called || status.Code(err) != codes.PermissionDenied || status.Convert(err).Message() != want {
			t.Errorf("%s on %q: %v (handler called %v), want %q", tt.pattern, tt.route, err, called, want)
		}
	}
	// A route the method does not have, or two, is refused whatever the file allows.
	srv := NewServer(&Service{acl: mustACL(t, "checks: [{module: allowed_paths, kwargs: {paths: ['/']}}]")}, logtest.New(t), nil)
	for _, md := range []metadata.MD{
		metadata.Pairs(wirekeys.ProxyRoute, teamChat),
		metadata.Pairs(wirekeys.ProxyRoute, v2Chat, wirekeys.ProxyRoute, v2Slack),
	} {
		_, err := srv.AccessInterceptor()(metadata.NewIncomingContext(context.Background(), md), action, &grpc.UnaryServerInfo{FullMethod: "/chat.v1.ChatService/PerformAction"},
			func(context.Context, any) (any, error) { return nil, nil })
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("route metadata %v: %v, want refused", md, err)
		}
	}
}
