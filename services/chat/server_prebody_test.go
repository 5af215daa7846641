package chat

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/wirekeys"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
)

// TestRefuseBeforeBodyAnswersAsTheInterceptor: for every chat route, access-control file and set of
// headers, the gateway's check before the body refuses only calls that AccessInterceptor refuses,
// with the same code and message, on every spelling of the route; it refuses the calls access control
// denies whenever it knows every header the decision reads. A custom header name of the file is read
// as gantry's header, which the gateway forwards, so those calls are refused early too.
func TestRefuseBeforeBodyAnswersAsTheInterceptor(t *testing.T) {
	params := map[string]string{"team_name": "acme", "bot_name": "pingbot", "email": "a@b.c", "channel_name": "general"}
	calls := map[string]proto.Message{
		"GetTeam":       &chatv1.GetTeamRequest{TeamName: "acme"},
		"GetUser":       &chatv1.GetUserRequest{TeamName: "acme", BotName: "pingbot", Email: "a@b.c"},
		"GetChannel":    &chatv1.GetChannelRequest{TeamName: "acme", BotName: "pingbot", ChannelName: "general"},
		"GetIms":        &chatv1.GetImsRequest{TeamName: "acme", BotName: "pingbot"},
		"SendIm":        &chatv1.SendImRequest{TeamName: "acme", BotName: "pingbot", Email: "a@b.c"},
		"PerformAction": &chatv1.PerformActionRequest{TeamName: "acme", BotName: "pingbot"},
	}
	headerSets := map[string]metadata.MD{
		"none":              {},
		"internal":          metadata.Pairs(wirekeys.ProxyInternal, "true"),
		"identity":          metadata.Pairs(wirekeys.DownstreamServiceCluster, "billing"),
		"internal identity": metadata.Pairs(wirekeys.ProxyInternal, "true", wirekeys.DownstreamServiceCluster, "billing"),
		"other identity":    metadata.Pairs(wirekeys.ProxyInternal, "true", wirekeys.DownstreamServiceCluster, "intruder"),
		"custom header":     metadata.Pairs("x-caller", "billing"),
	}
	forwarded := map[string]bool{wirekeys.ProxyInternal: true, wirekeys.DownstreamServiceCluster: true}
	for _, tc := range []struct {
		name, doc   string
		refusesNone bool // a call without headers is refused before the body
		refused     int  // else: how many spellings of the calls without headers are
	}{
		{name: "no checks", doc: "{}", refusesNone: true},
		{name: "paths and internal", doc: `checks: [{module: allowed_paths, kwargs: {paths: ["/api/v1/chat/"]}}, {module: envoy_internal_check}]`, refusesNone: true},
		{name: "permissions", doc: `
checks: [{module: allowed_paths, kwargs: {paths: ["/api/"]}}, {module: envoy_internal_check}, {module: envoy_permissions_check}]
permissions:
  lookups: {methods: [GET], paths: ["/api/v1/chat/get_"]}
  send: {methods: [POST], paths: ["/api/v1/chat/send_im/"], internal_only: false}
bindings:
  billing: [lookups, send]`, refusesNone: true},
		{name: "a custom header name", doc: `checks: [{module: envoy_permissions_check, kwargs: {header: X-Caller}}]
permissions: {all: {methods: [GET, POST], paths: ["/api/"]}}
bindings: {billing: [all]}`, refusesNone: true},
		// Omnibot's v1 routes and gantry's two action paths (v1 decided as v2) are open: 13 spellings less 7.
		{name: "one spelling", doc: `checks: [{module: allowed_paths, kwargs: {paths: ["/api/v1/slack/", "/api/v2/chat/"]}}]`, refused: 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := NewServer(&Service{acl: mustACL(t, tc.doc)}, logtest.New(t), nil)
			interceptor := srv.AccessInterceptor()
			refusedNone, spellings := 0, 0
			for method, req := range calls {
				fullMethod := "/chat.v1.ChatService/" + method
				policy, _ := policies.Lookup(fullMethod)
				for _, route := range policy.Routes {
					spellings++
					for setName, headers := range headerSets {
						md := metadata.Join(headers, metadata.Pairs(wirekeys.ProxyRoute, route.Template))
						early := srv.RefuseBeforeBody(fullMethod, route.Template, params, func(name string) (string, bool) {
							v := md.Get(name)
							if len(v) == 0 {
								return "", forwarded[name]
							}
							return v[0], forwarded[name]
						})
						called := false
						ctx := metadata.NewIncomingContext(context.Background(), md)
						_, err := interceptor(ctx, req, &grpc.UnaryServerInfo{FullMethod: fullMethod}, func(context.Context, any) (any, error) {
							called = true
							return nil, nil
						})
						if early == nil {
							if err != nil && setName != "custom header" {
								t.Errorf("%s %s with %s: let through before the body, the service refuses it: %v", method, route.Template, setName, err)
							}
							continue
						}
						if setName == "none" {
							refusedNone++
						}
						if called || status.Code(err) != status.Code(early) || status.Convert(err).Message() != status.Convert(early).Message() {
							t.Errorf("%s %s with %s: refused before the body with %v, the service answers %v (handler called: %v)", method, route.Template, setName, early, err, called)
						}
					}
				}
			}
			if tc.refusesNone && refusedNone != spellings {
				t.Errorf("%d of %d calls without headers refused before the body", refusedNone, spellings)
			}
			if !tc.refusesNone && refusedNone != tc.refused {
				t.Errorf("%d spellings of the calls without headers refused before the body, want %d", refusedNone, tc.refused)
			}
		})
	}
}
