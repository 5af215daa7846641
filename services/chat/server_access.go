package chat

import (
	"context"
	"strings"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-dev/gantry/pkg/rpcpolicy"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
	optionsv1 "github.com/gantry-dev/gantry/proto/gantry/options/v1"
)

// policies is the access policy and REST routes of every RPC of the chat service, as the proto
// declares them; TestEveryChatRPCHasAPolicy keeps it complete.
var policies = rpcpolicy.MustFor(chatv1.File_chat_v1_chat_proto.Services().ByName("ChatService"))

// errNoPolicy answers a chat method without an access policy the service enforces: fail closed.
var errNoPolicy = status.Error(codes.PermissionDenied, "access denied: this method has no access policy")

// AccessInterceptor runs the Omnibot-style access control before any chat handler, on the route the
// call stands for: the method's REST routes (google.api.http and its additional bindings, which
// include Omnibot's paths) with the request's fields filled in, so patterns of either kind match.
// Calls to other services on the server (health, reflection) pass.
func (s *Server) AccessInterceptor() grpc.UnaryServerInterceptor {
	return s.accessInterceptor(policies)
}

func (s *Server) accessInterceptor(table rpcpolicy.Table) grpc.UnaryServerInterceptor {
	prefix := "/" + chatv1.ChatService_ServiceDesc.ServiceName + "/"
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !strings.HasPrefix(info.FullMethod, prefix) {
			return handler(ctx, req)
		}
		policy, ok := table.Lookup(info.FullMethod)
		if ok && policy.Access == optionsv1.Access_ACCESS_SLACK_SIGNED {
			// Slack's own requests: the handler verifies the signature over the raw body; no
			// caller identity or internal header is involved.
			return handler(ctx, req)
		}
		msg, isProto := req.(proto.Message)
		if !ok || policy.Access != optionsv1.Access_ACCESS_CHAT_ROUTE || len(policy.Routes) == 0 || !isProto {
			s.logger.Error("refused a method without a chat access policy", zap.String("method", info.FullMethod))
			return nil, errNoPolicy
		}
		if err := s.authorize(ctx, policy.Routes[0].Method, routePaths(policy.Routes, msg)); err != nil {
			return nil, toStatus(ctx, s.logger, err)
		}
		return handler(ctx, req)
	}
}

// routePaths spells the call's route as access control sees it: every REST path the proto binds it
// to (gantry's first, then its aliases and Omnibot's), with the request's fields filled in. A request
// is checked against all of them whichever path it came by, so the decision cannot depend on the
// spelling a caller picks; and since the set holds only paths that are served, a pattern written for
// Omnibot's paths matches exactly the routes it matched in Omnibot (/api/v1/slack/ never matches the
// action route, which Omnibot serves at /api/v2/slack/action/ only).
func routePaths(routes []rpcpolicy.Route, req proto.Message) []string {
	out := make([]string, 0, len(routes))
	for _, r := range routes {
		out = append(out, r.Path(req))
	}
	return out
}
