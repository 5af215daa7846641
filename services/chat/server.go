package chat

import (
	"context"

	"go.uber.org/zap"

	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
)

// Server is the gRPC transport of the chat service.
//
// It embeds the generated Unimplemented server while the Slack-backed RPCs are built; they answer
// codes.Unimplemented (HTTP 501) until then. Once every RPC exists, switch to UnsafeChatServiceServer.
type Server struct {
	chatv1.UnimplementedChatServiceServer
	svc    *Service
	logger *zap.Logger
}

var _ chatv1.ChatServiceServer = (*Server)(nil)

// NewServer returns the gRPC server of svc.
func NewServer(svc *Service, logger *zap.Logger) *Server {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Server{svc: svc, logger: logger}
}

// GetTeam implements chatv1.ChatServiceServer.
func (s *Server) GetTeam(_ context.Context, req *chatv1.GetTeamRequest) (*chatv1.GetTeamResponse, error) {
	id, err := s.svc.TeamID(req.GetTeamName())
	if err != nil {
		return nil, toStatus(s.logger, err)
	}
	return &chatv1.GetTeamResponse{TeamId: id}, nil
}
