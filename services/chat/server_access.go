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
	"github.com/gantry-dev/gantry/pkg/wirekeys"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
	optionsv1 "github.com/gantry-dev/gantry/proto/gantry/options/v1"
)

// policies is the access policy and REST routes of every RPC of the chat service, as the proto
// declares them; rpcpolicy's TestEveryRPCHasAPolicy keeps it complete.
var policies = rpcpolicy.MustFor(chatv1.File_chat_v1_chat_proto.Services().ByName("ChatService"))

// errNoPolicy answers a chat method without an access policy the service enforces: fail closed.
var errNoPolicy = status.Error(codes.PermissionDenied, "access denied: this method has no access policy")

// AccessInterceptor runs the Omnibot-style access control before any chat handler, on the path the
// call came by: the REST route the gateway names (wirekeys.ProxyRoute) with the request's fields
// filled in, as Omnibot matches request.path; gantry's route of the method for a direct gRPC caller
// (see accessRequest). Calls to other services on the server (health, reflection) pass.
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
		ar, err := accessRequest(policy, metadata.ValueFromIncomingContext(ctx, wirekeys.ProxyRoute), func(r rpcpolicy.Route) (string, bool) { return r.Path(msg), true })
		called := ar.Called
		if called == "" {
			called = policy.Routes[0].Path(msg) // a refused route metadata: the trail names gantry's path
		}
		if err == nil {
			err = s.authorize(ctx, ar)
		}
		if err != nil {
			refused := toStatus(ctx, s.logger, err)
			// Denials need no credentials to cause: past a burst per second they are counted.
			if suppressed, ok := s.refusals.Allow(); ok {
				r := s.auditRecord(ctx, call, audit.Denied, req, called)
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
		if err := s.audit.Write(s.auditRecord(ctx, call, audit.Pending, req, called)); err != nil {
			return nil, errAuditUnavailable
		}
		resp, err := handler(ctx, req)
		outcome := audit.Allowed
		if err != nil {
			outcome = audit.Failed
		}
		r := s.auditRecord(ctx, call, outcome, req, called)
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
	r.Principal, r.AuthType = firstMetadata(ctx, wirekeys.DownstreamServiceCluster), "gateway-identity"
	r.PrincipalType = "external"
	if firstMetadata(ctx, wirekeys.ProxyInternal) == "true" {
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

// accessAliases are the routes decided on as another route of their method: gantry's v1 spelling of
// the action route, which the spec's sample request uses, is checked as gantry's v2 path. Omnibot
// never had a v1 action route, so a v1 grant of an Omnibot file (/api/v1/, /api/v1/slack/) must not
// open an action, whatever spelling is asked; a grant of /api/v2/chat/action/... opens both of
// gantry's spellings, as before. TestAccessAliasesAreRoutesOfOneMethod keeps the table true.
var accessAliases = map[string]string{
	"/api/v1/chat/action/{team_name}/{bot_name}": "/api/v2/chat/action/{team_name}/{bot_name}",
}

// errUnknownRoute refuses a call whose route metadata names no route of its method, or several: the
// metadata is the gateway's alone, so this is a gateway of another version or a forged call.
var errUnknownRoute = deny("the call names no route of this method")

// accessRequest is the request access control decides on, for a call that came by the route whose
// template the gateway named (named: the values of wirekeys.ProxyRoute; none for a direct gRPC
// caller, which is decided on gantry's route of the method, the first). fill spells a route's path
// from the call (its fields, or the gateway's path parameters before the body); ok false means it
// cannot, and the request is returned with an empty Path.
func accessRequest(policy rpcpolicy.Policy, named []string, fill func(rpcpolicy.Route) (string, bool)) (AccessRequest, error) {
	route := policy.Routes[0]
	switch len(named) {
	case 0:
	case 1:
		r, ok := policy.Route(named[0])
		if !ok {
			return AccessRequest{Method: route.Method}, errUnknownRoute
		}
		route = r
	default:
		return AccessRequest{Method: route.Method}, errUnknownRoute
	}
	called, ok := fill(route)
	if !ok {
		return AccessRequest{Method: route.Method}, nil
	}
	ar := AccessRequest{Method: route.Method, Path: called, Called: called}
	if alias, ok := accessAliases[route.Template]; ok {
		if r, found := policy.Route(alias); found {
			if ar.Path, ok = fill(r); !ok {
				ar.Path = ""
			}
		}
	}
	return ar, nil
}
