package stack

import (
	"errors"
	"fmt"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/pkg/settings"
	"github.com/gantry-dev/gantry/services/chat/events"
	"github.com/gantry-dev/gantry/services/chat/queue"
	"github.com/gantry-dev/gantry/services/chat/queue/boltqueue"
)

// ChatQueuePath is the bbolt file of the chat inbound queue that cfg names: -chat-inbound-queue-path,
// else the data folder's chat-queue.db, as gantry serve opens it.
func ChatQueuePath(cfg Config) string {
	if cfg.Chat.Inbound.QueuePath != "" {
		return cfg.Chat.Inbound.QueuePath
	}
	return filepath.Join(cfg.DataDir, chatQueueFile)
}

// OpenChatQueue opens the chat inbound queue that cfg's -chat-inbound-* settings select, for an
// operator's command (gantry queue) working on the queue gantry serve uses. Unlike serve it never
// creates a bolt queue: a missing file is a wrong -data-dir or -chat-inbound-queue-path, and a file a
// running gantry holds is refused with the advice to stop it.
func OpenChatQueue(cfg Config, logger *zap.Logger) (queue.Queue, error) {
	inbound := cfg.Chat.Inbound
	switch inbound.Queue {
	case events.QueueSQS:
		if inbound.SQSQueueURL == "" || inbound.SQSDeadLetterURL == "" {
			return nil, settings.Invalid("chat-inbound-queue", "sqs needs -chat-inbound-sqs-queue-url and -chat-inbound-sqs-dead-letter-url")
		}
		return openChatQueue(inbound, logger)
	case events.QueueBolt:
		path := ChatQueuePath(cfg)
		q, err := boltqueue.OpenExisting(path)
		if errors.Is(err, boltdb.ErrLocked) {
			return nil, fmt.Errorf("%s is held by a running gantry: stop it first (the bolt queue is one process's file)", path)
		}
		return q, err
	}
	return nil, settings.Invalid("chat-inbound-queue", "%q is not bolt or sqs", inbound.Queue)
}
