package chat

import (
	"context"
	"errors"
	"strconv"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/gantry-dev/gantry/pkg/wirekeys"
	"github.com/gantry-dev/gantry/services/chat/events"
)

// Sentinel errors of the chat domain. Routes answer them with Omnibot's messages (see Error).
var (
	ErrTeamNotFound    = errors.New("chat: team not configured")
	ErrBotNotFound     = errors.New("chat: bot not configured or without a token")
	ErrUserNotFound    = errors.New("chat: user not found")
	ErrChannelNotFound = errors.New("chat: channel not found")
	ErrIMNotFound      = errors.New("chat: IM channel not found")
	ErrForbidden       = errors.New("chat: access denied")
	ErrBadRequest      = errors.New("chat: bad request")
	// ErrSlackUnavailable is a Slack that kept failing (network errors, 5xx, answers that are not
	// Slack's JSON) through the retries: 502.
	ErrSlackUnavailable = errors.New("slack unavailable")
	// ErrSlackTimeout is a Slack that did not answer within the request's deadline: 504.
	ErrSlackTimeout = errors.New("slack did not answer in time")
	// ErrSlackRateLimited is a typed lookup Slack kept rate-limiting: 429.
	ErrSlackRateLimited = errors.New("slack rate limit")
)

// Error is a domain error with the message the caller sees (Omnibot's wording) and extra fields of
// the JSON error body (send_im's team_name, bot_name and email, the action routes' "ok": false).
type Error struct {
	Kind    error
	Message string
	Fields  map[string]any
}

func (e *Error) Error() string { return e.Message }
func (e *Error) Unwrap() error { return e.Kind }

func newError(kind error, message string) *Error { return &Error{Kind: kind, Message: message} }

// withFields adds body fields to err, keeping its kind, message and the fields it had.
func withFields(err error, fields map[string]any) error {
	var e *Error
	if !errors.As(err, &e) {
		return &Error{Kind: err, Message: err.Error(), Fields: fields}
	}
	cp := *e
	cp.Fields = make(map[string]any, len(e.Fields)+len(fields))
	for k, v := range e.Fields {
		cp.Fields[k] = v
	}
	for k, v := range fields {
		cp.Fields[k] = v
	}
	return &cp
}

// toStatus is the one place where domain errors become gRPC status codes. Unknown errors become
// Internal with a generic message; their detail goes to the log only.
func toStatus(ctx context.Context, logger *zap.Logger, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	var fields map[string]any
	var de *Error
	var ee *events.Error
	if errors.As(err, &de) {
		msg, fields = de.Message, de.Fields
	} else if errors.As(err, &ee) {
		msg = ee.Message
	}
	var code codes.Code
	switch {
	case errors.Is(err, events.ErrUnauthenticated):
		code = codes.Unauthenticated
	case errors.Is(err, events.ErrBadRequest):
		code = codes.InvalidArgument
	case errors.Is(err, events.ErrUnavailable):
		code = codes.Unavailable
	case errors.Is(err, ErrForbidden):
		code = codes.PermissionDenied
	case errors.Is(err, ErrBadRequest):
		code = codes.InvalidArgument
	case errors.Is(err, ErrTeamNotFound), errors.Is(err, ErrBotNotFound), errors.Is(err, ErrUserNotFound),
		errors.Is(err, ErrChannelNotFound), errors.Is(err, ErrIMNotFound):
		code = codes.NotFound
	case errors.Is(err, ErrSlackTimeout):
		logger.Warn("Slack timed out", zap.Error(err))
		code, msg = codes.DeadlineExceeded, ErrSlackTimeout.Error()
	case errors.Is(err, ErrSlackRateLimited):
		logger.Warn("Slack rate limit", zap.Error(err))
		code, msg = codes.ResourceExhausted, "slack rate limit reached, try again later"
		var rl *rateLimitError
		if errors.As(err, &rl) {
			_ = grpc.SetHeader(ctx, metadata.Pairs(wirekeys.RetryAfter, strconv.Itoa(int(rl.after.Seconds()))))
		}
	case errors.Is(err, ErrSlackUnavailable):
		logger.Warn("Slack unavailable", zap.Error(err))
		code, msg = codes.Unavailable, "slack unavailable, try again later"
		_ = grpc.SetHeader(ctx, metadata.Pairs(wirekeys.HTTPCode, "502"))
	case errors.Is(err, context.Canceled):
		code, msg = codes.Canceled, "request canceled"
	case errors.Is(err, context.DeadlineExceeded):
		code, msg = codes.DeadlineExceeded, "request timed out"
	default:
		logger.Error("unexpected error", zap.Error(err))
		return status.Error(codes.Internal, "internal error")
	}
	st := status.New(code, msg)
	if len(fields) > 0 {
		if s, serr := structpb.NewStruct(fields); serr == nil {
			if withDetails, derr := st.WithDetails(s); derr == nil {
				st = withDetails
			}
		}
	}
	return st.Err()
}
