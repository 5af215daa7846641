package stack

import (
	"context"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/internaltls"
	"github.com/gantry-dev/gantry/pkg/settings"
	"github.com/gantry-dev/gantry/services/chat"
	"github.com/gantry-dev/gantry/services/chat/events"
	"github.com/gantry-dev/gantry/services/chat/queue"
	"github.com/gantry-dev/gantry/services/chat/queue/boltqueue"
	"github.com/gantry-dev/gantry/services/chat/queue/sqsqueue"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// openChat opens chat's inbound queue (the data folder's bbolt file unless -chat-inbound-queue says
// otherwise) and the chat service over it, with its bot tokens read from the secrets service at
// secretsAddr when it runs in this process. The service, which closes the queue and the demo
// workspace, is closed when the stack stops.
func openChat(ctx context.Context, p *process, secretsAddr string, logger *zap.Logger) (*chat.Service, queue.Queue, error) {
	chatCfg := chatConfig(p.cfg, secretsAddr)
	chatCfg.Secrets.Credentials = p.itls.ClientCredentials(internaltls.RoleService)
	chatCfg.Stats = p.stats
	if chatCfg.Inbound.QueuePath == "" {
		if err := os.MkdirAll(p.cfg.DataDir, 0o700); err != nil {
			return nil, nil, settings.Invalid("data-dir", "%w", err)
		}
		chatCfg.Inbound.QueuePath = filepath.Join(p.cfg.DataDir, chatQueueFile)
	}
	q, err := openChatQueue(chatCfg.Inbound, logger.Named("queue"))
	if err != nil {
		return nil, nil, err
	}
	// A New that fails closes q.
	svc, err := chat.New(ctx, chatCfg, chat.Deps{Queue: q, StartDemo: startDemoWorkspace(logger), Logger: logger})
	if err != nil {
		return nil, nil, err
	}
	p.life.onStop(func() { _ = svc.Close() })
	return svc, q, nil
}

// openChatQueue opens the queue of Slack's requests that -chat-inbound-queue selects: SQS, or the
// bbolt file at cfg.QueuePath. An error names the setting to change.
func openChatQueue(cfg events.Config, logger *zap.Logger) (queue.Queue, error) {
	if cfg.Queue == events.QueueSQS {
		q, err := sqsqueue.Open(context.Background(), sqsqueue.Options{
			QueueURL: cfg.SQSQueueURL, DeadLetterURL: cfg.SQSDeadLetterURL,
			Endpoint: cfg.SQSEndpoint, DedupeWindow: cfg.DedupeWindow,
		}, logger)
		if err != nil {
			return nil, &settings.SettingError{Flag: "chat-inbound-sqs-queue-url", Err: err}
		}
		return q, nil
	}
	q, err := boltqueue.Open(cfg.QueuePath, boltqueue.Options{DedupeWindow: cfg.DedupeWindow}, logger)
	if err != nil {
		return nil, &settings.SettingError{Flag: "chat-inbound-queue-path", Err: err}
	}
	return q, nil
}

// startDemoWorkspace serves the demo Slack workspace of -chat-demo (slacktest.NewDemo), which chat
// asks for only when no configured bot has a real token; it logs to the chat service's logger.
func startDemoWorkspace(logger *zap.Logger) func(teams map[string]string) chat.DemoWorkspace {
	return func(teams map[string]string) chat.DemoWorkspace { return slacktest.NewDemo(teams, logger) }
}
