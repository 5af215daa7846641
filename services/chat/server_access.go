package chat

import (
	"context"
	"strings"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-dev/gantry/pkg/audit"
	"github.com/gantry-dev/gantry/pkg/rpcerr"
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
		call := audit.GRPCCall(ctx, auditService, info.FullMethod)
		paths := routePaths(policy.Routes, msg)
		if err := s.authorize(ctx, policy.Routes[0].Method, paths); err != nil {
			refused := toStatus(ctx, s.logger, err)
			// Denials need no credentials to cause: past a burst per second they are counted.
			if suppressed, ok := s.refusals.Allow(); ok {
				r := s.auditRecord(ctx, call, audit.Denied, req, paths[0])
				r.Code, r.Reason, r.Suppressed = status.Code(refused).String(), err.Error(), suppressed
				_ = s.audit.Write(r)
			}
			return nil, refused
		}
		if !isAction(info.FullMethod) {
			return handler(ctx, req)
		}
		// An action changes something in Slack: like a secrets write, it needs the trail first
		// (Vault's rule), then its outcome is recorded.
		if err := s.audit.Write(s.auditRecord(ctx, call, audit.Pending, req, paths[0])); err != nil {
			return nil, errAuditUnavailable
		}
		resp, err := handler(ctx, req)
		outcome := audit.Allowed
		if err != nil {
			outcome = audit.Failed
		}
		r := s.auditRecord(ctx, call, outcome, req, paths[0])
		if err != nil {
			r.Code = status.Code(err).String()
		}
		_ = s.audit.Write(r)
		return resp, err
	}
}

// auditService is the service name of the chat service's audit records.
const auditService = "chat"

// errAuditUnavailable answers an action while no audit sink can be written: 503, nothing sent. It is
// marked as a dependency failure, so the gateway does not eject the host for it.
var errAuditUnavailable = rpcerr.DependencyUnavailable(
	"the audit trail cannot be written: actions are refused until it can; nothing was sent", "audit")

// isAction tells the RPCs that act in Slack (post, send an IM, any Web API action) from lookups.
func isAction(method string) bool {
	return method == chatv1.ChatService_PerformAction_FullMethodName || method == chatv1.ChatService_SendIm_FullMethodName
}

// auditRecord is a record of a chat call: the caller identity the gateway asserted as principal
// (internal or external, as x-proxy-internal says), the Slack action (or the RPC for a lookup) as
// action, and the bot (team/bot) as resource. The kwargs (the message) are never on the trail.
func (s *Server) auditRecord(ctx context.Context, call *audit.Call, outcome audit.Outcome, req any, path string) audit.Record {
	r := call.Record(outcome)
	r.Principal, r.AuthType = firstMetadata(ctx, HeaderIdentity), "gateway-identity"
	r.PrincipalType = "external"
	if firstMetadata(ctx, HeaderInternal) == "true" {
		r.PrincipalType = "internal"
	}
	r.Action = call.Method[strings.LastIndexByte(call.Method, '/')+1:]
	if a, ok := req.(interface{ GetAction() string }); ok && a.GetAction() != "" {
		r.Action = a.GetAction()
	}
	r.Resource, r.ResourceID = "route", path
	if b, ok := req.(interface {
		GetTeamName() string
		GetBotName() string
	}); ok && b.GetBotName() != "" {
		r.Resource, r.ResourceID = "bot", b.GetTeamName()+"/"+b.GetBotName()
	}
	return r
}

func firstMetadata(ctx context.Context, key string) string {
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
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
