package chat

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/slack-go/slack"
	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/gantry-dev/gantry/pkg/audit"
	"github.com/gantry-dev/gantry/pkg/logging"
	"github.com/gantry-dev/gantry/pkg/wirekeys"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
	"github.com/gantry-dev/gantry/services/chat/events"
)

// Server is the gRPC transport of the chat service. Access is checked before dispatch, by
// AccessInterceptor, from the policy each RPC declares in the proto, so gRPC callers pass the same
// checks as REST callers through the gateway and no handler can forget them.
type Server struct {
	chatv1.UnsafeChatServiceServer
	svc    *Service
	logger *zap.Logger
	// audit is the trail of the chat service's actions and denials; refusals bounds its denials.
	audit    *audit.Sink
	refusals audit.RefusalLimiter
	// denials samples the "request denied" lines: a caller without an identity can cause them at any rate.
	denials *logging.Sampler
}

var _ chatv1.ChatServiceServer = (*Server)(nil)

// NewServer returns the gRPC server of svc, writing its audit records to trail (nil: none kept).
func NewServer(svc *Service, logger *zap.Logger, trail *audit.Sink) *Server {
	if logger == nil {
		logger = zap.NewNop()
	}
	if trail == nil {
		trail = audit.Discard()
	}
	return &Server{svc: svc, logger: logger, audit: trail, denials: logging.NewSampler(logger, 0, 0)}
}

// authorize runs access control with the request metadata: x-proxy-internal and the caller identity
// count only as the gateway set them (internal TLS drops them from any other peer). It is the one
// place chat reads request metadata.
func (s *Server) authorize(ctx context.Context, r AccessRequest) error {
	// One key at a time: metadata.FromIncomingContext would copy the whole metadata.
	r.Header = func(name string) string { return firstMetadata(ctx, name) }
	err := s.svc.Authorize(r)
	if err != nil {
		s.denials.Warn("chat.denied", "request denied", zap.String("method", r.Method), logging.Untrusted("path", r.Called), zap.Error(err))
	}
	return err
}

// GetTeam implements chatv1.ChatServiceServer.
func (s *Server) GetTeam(ctx context.Context, req *chatv1.GetTeamRequest) (*chatv1.GetTeamResponse, error) {
	id, err := s.svc.TeamID(req.GetTeamName())
	if err != nil {
		return nil, toStatus(ctx, s.logger, err)
	}
	return &chatv1.GetTeamResponse{TeamId: id}, nil
}

// GetUser implements chatv1.ChatServiceServer.
func (s *Server) GetUser(ctx context.Context, req *chatv1.GetUserRequest) (*chatv1.GetUserResponse, error) {
	u, err := s.svc.GetUser(ctx, req.GetTeamName(), req.GetBotName(), req.GetEmail())
	if err != nil {
		return nil, toStatus(ctx, s.logger, err)
	}
	// Omnibot reports the email as asked, not as Slack spells it.
	pb := &chatv1.User{Email: req.GetEmail(), Name: u.Name, TeamId: u.TeamID, UserId: u.ID}
	return &chatv1.GetUserResponse{Email: pb.Email, Name: pb.Name, TeamId: pb.TeamId, UserId: pb.UserId, User: pb}, nil
}

// GetChannel implements chatv1.ChatServiceServer.
func (s *Server) GetChannel(ctx context.Context, req *chatv1.GetChannelRequest) (*chatv1.GetChannelResponse, error) {
	ch, err := s.svc.GetChannel(ctx, req.GetTeamName(), req.GetBotName(), req.GetChannelName())
	if err != nil {
		return nil, toStatus(ctx, s.logger, err)
	}
	return &chatv1.GetChannelResponse{Channel: channelToPB(ch.Channel), Conversation: s.slackObject(ch.Raw)}, nil
}

// GetIms implements chatv1.ChatServiceServer.
func (s *Server) GetIms(ctx context.Context, req *chatv1.GetImsRequest) (*chatv1.GetImsResponse, error) {
	ims, err := s.svc.GetIMs(ctx, req.GetTeamName(), req.GetBotName())
	if err != nil {
		return nil, toStatus(ctx, s.logger, err)
	}
	out := &chatv1.GetImsResponse{Ims: make([]*chatv1.Im, 0, len(ims))}
	for _, im := range ims {
		out.Ims = append(out.Ims, &chatv1.Im{
			Id: im.ID, Created: uint32(im.Created), IsIm: im.IsIM, IsOrgShared: im.IsOrgShared, User: im.User,
			IsUserDeleted: im.IsUserDeleted, Priority: im.Priority, Conversation: s.slackObject(im.Raw),
		})
	}
	return out, nil
}

// SendIm implements chatv1.ChatServiceServer.
func (s *Server) SendIm(ctx context.Context, req *chatv1.SendImRequest) (*chatv1.SendImResponse, error) {
	res, err := s.svc.SendIM(ctx, req.GetTeamName(), req.GetBotName(), req.GetEmail(), actionRequest(req.GetAction(), req.GetKwargs().AsMap, req.Kwargs != nil, req.GetOmnibotParse().AsMap, req.OmnibotParse != nil))
	if err != nil {
		// Omnibot's send_im errors name what was asked for.
		return nil, toStatus(ctx, s.logger, withFields(actionError(err), map[string]any{"team_name": req.GetTeamName(), "bot_name": req.GetBotName(), "email": req.GetEmail()}))
	}
	return &chatv1.SendImResponse{Result: s.passThrough(ctx, res)}, nil
}

// PerformAction implements chatv1.ChatServiceServer.
func (s *Server) PerformAction(ctx context.Context, req *chatv1.PerformActionRequest) (*chatv1.PerformActionResponse, error) {
	res, err := s.svc.Action(ctx, req.GetTeamName(), req.GetBotName(), actionRequest(req.GetAction(), req.GetKwargs().AsMap, req.Kwargs != nil, req.GetOmnibotParse().AsMap, req.OmnibotParse != nil))
	if err != nil {
		return nil, toStatus(ctx, s.logger, actionError(err))
	}
	return &chatv1.PerformActionResponse{Result: s.passThrough(ctx, res)}, nil
}

// actionError gives a payload the action could not be performed with (400) the "ok": false of
// Omnibot's answer to a missing action or kwargs, so callers that read resp["ok"] as they read Slack's
// own 400 answers work on every 400 of the action routes.
func actionError(err error) error {
	if errors.Is(err, ErrBadRequest) {
		return withFields(err, map[string]any{"ok": false})
	}
	return err
}

// actionRequest converts the body; a missing kwargs stays nil so the service can tell it apart from
// an empty object.
func actionRequest(action string, kwargs func() map[string]any, hasKwargs bool, parse func() map[string]any, hasParse bool) ActionRequest {
	req := ActionRequest{Action: action}
	if hasKwargs {
		req.Kwargs = kwargs()
	}
	if hasParse {
		req.Parse = parse()
	}
	return req
}

// passThrough returns Slack's JSON as it came and sets the HTTP status the gateway answers with: 200
// when Slack said ok, 429 (with Retry-After) when it kept rate-limiting, 400 otherwise.
func (s *Server) passThrough(ctx context.Context, res ActionResult) *httpbody.HttpBody {
	switch {
	case res.RateLimited:
		_ = grpc.SetHeader(ctx, metadata.Pairs(wirekeys.HTTPCode, "429", wirekeys.RetryAfter, strconv.Itoa(int(res.RetryAfter.Seconds()))))
	case !res.OK:
		_ = grpc.SetHeader(ctx, metadata.Pairs(wirekeys.HTTPCode, "400"))
	}
	return &httpbody.HttpBody{ContentType: "application/json", Data: res.Body}
}

// slackObject is Slack's JSON object as a Struct, nil when there is none.
func (s *Server) slackObject(raw json.RawMessage) *structpb.Struct {
	if len(raw) == 0 {
		return nil
	}
	var obj structpb.Struct
	if err := protojson.Unmarshal(raw, &obj); err != nil {
		// Slack's objects are JSON objects (the client decoded this one); the typed fields remain.
		s.logger.Error("Slack object is not a JSON object", zap.Error(err))
		return nil
	}
	return &obj
}

func channelToPB(ch slack.Channel) *chatv1.Channel {
	members := ch.Members
	if members == nil {
		members = []string{}
	}
	prev := ch.PreviousNames
	if prev == nil {
		prev = []string{}
	}
	return &chatv1.Channel{
		Id: ch.ID, Name: ch.Name, IsChannel: ch.IsChannel, Created: uint32(ch.Created), Creator: ch.Creator,
		IsArchived: ch.IsArchived, IsGeneral: ch.IsGeneral, Unlinked: int32(ch.Unlinked), NameNormalized: ch.NameNormalized,
		IsShared: ch.IsShared, IsOrgShared: ch.IsOrgShared, IsMember: ch.IsMember, IsPrivate: ch.IsPrivate, IsMpim: ch.IsMpIM,
		Members: members, PreviousNames: prev, NumMembers: int32(ch.NumMembers),
		Topic:   &chatv1.ChannelText{Value: ch.Topic.Value, Creator: ch.Topic.Creator, LastSet: uint32(ch.Topic.LastSet)},
		Purpose: &chatv1.ChannelText{Value: ch.Purpose.Value, Creator: ch.Purpose.Creator, LastSet: uint32(ch.Purpose.LastSet)},
	}
}

// slackKinds maps the receiver of the request to the queue's kind names.
var slackKinds = map[chatv1.SlackRequestKind]string{
	chatv1.SlackRequestKind_SLACK_REQUEST_KIND_EVENT:         events.KindEvent,
	chatv1.SlackRequestKind_SLACK_REQUEST_KIND_SLASH_COMMAND: events.KindSlash,
	chatv1.SlackRequestKind_SLACK_REQUEST_KIND_INTERACTIVE:   events.KindInteractive,
}

// ReceiveSlackRequest implements chatv1.ChatServiceServer.
func (s *Server) ReceiveSlackRequest(ctx context.Context, req *chatv1.ReceiveSlackRequestRequest) (*chatv1.ReceiveSlackRequestResponse, error) {
	kind, ok := slackKinds[req.GetKind()]
	if !ok {
		return nil, toStatus(ctx, s.logger, &events.Error{Kind: events.ErrBadRequest, Message: "unknown Slack receiver"})
	}
	res, err := s.svc.ReceiveSlack(ctx, events.Request{
		Kind: kind, Body: req.GetBody(), Signature: req.GetSignature(), Timestamp: req.GetTimestamp(),
		RetryNum: int(req.GetRetryNum()), RetryReason: req.GetRetryReason(),
	})
	if err != nil {
		return nil, toStatus(ctx, s.logger, err)
	}
	out := &chatv1.ReceiveSlackRequestResponse{Status: 200, Body: res.Body}
	if len(res.Body) > 0 {
		out.ContentType = "application/json"
	}
	return out, nil
}
