package chat

import "go.uber.org/zap"

// Service holds the chat domain logic.
type Service struct {
	cfg    *FileConfig
	logger *zap.Logger
}

// NewService returns a service over a loaded configuration.
func NewService(cfg *FileConfig, logger *zap.Logger) *Service {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Service{cfg: cfg, logger: logger}
}

// TeamID returns the Slack team id of a configured team name.
func (s *Service) TeamID(teamName string) (string, error) {
	id, ok := s.cfg.Teams[teamName]
	if !ok {
		return "", ErrTeamNotFound
	}
	return id, nil
}
