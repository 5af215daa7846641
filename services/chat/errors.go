package chat

import (
	"context"
	"errors"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrTeamNotFound is returned for a team name that is not configured.
var ErrTeamNotFound = errors.New("chat: team not configured")

// toStatus is the one place where domain errors become gRPC status codes. Unknown errors become
// Internal with a generic message; their detail goes to the log only.
func toStatus(logger *zap.Logger, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrTeamNotFound):
		// Omnibot's exact message, which its callers may match on.
		return status.Error(codes.NotFound, "provided team_name is not configured.")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request canceled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "request timed out")
	default:
		logger.Error("unexpected error", zap.Error(err))
		return status.Error(codes.Internal, "internal error")
	}
}
