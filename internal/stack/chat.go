package stack

import (
	"context"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/settings"
	"github.com/gantry-dev/gantry/services/chat"
	"github.com/gantry-dev/gantry/services/chat/events"
	"github.com/gantry-dev/gantry/services/chat/queue"
	"github.com/gantry-dev/gantry/services/chat/queue/boltqueue"
	"github.com/gantry-dev/gantry/services/chat/queue/sqsqueue"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

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
