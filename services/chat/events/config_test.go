package events

import (
	"strings"
	"testing"
)

func TestConfigValidateSQS(t *testing.T) {
	const (
		std  = "https://sqs.us-east-1.amazonaws.com/123456789012/chat"
		fifo = "https://sqs.us-east-1.amazonaws.com/123456789012/chat.fifo"
	)
	tests := []struct {
		name              string
		queue, dead, endp string
		wantFlag          string // "" when valid
	}{
		{"standard pair", std, std + "-dead", "", ""},
		{"FIFO pair", fifo, strings.TrimSuffix(fifo, ".fifo") + "-dead.fifo", "", ""},
		{"endpoint override", std, std + "-dead", "http://127.0.0.1:4566", ""},
		{"no queue", "", std, "", "chat-inbound-sqs-queue-url"},
		{"no dead letter", std, "", "", "chat-inbound-sqs-dead-letter-url"},
		{"FIFO queue, standard dead letter", fifo, std, "", "chat-inbound-sqs-dead-letter-url"},
		{"standard queue, FIFO dead letter", std, fifo, "", "chat-inbound-sqs-dead-letter-url"},
		{"endpoint not a URL", std, std + "-dead", "localhost:4566", "chat-inbound-sqs-endpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Queue, c.SQSQueueURL, c.SQSDeadLetterURL, c.SQSEndpoint = QueueSQS, tt.queue, tt.dead, tt.endp
			err := c.Validate()
			switch {
			case tt.wantFlag == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.wantFlag != "" && (err == nil || !strings.Contains(err.Error(), tt.wantFlag)):
				t.Errorf("Validate() = %v, want an error naming -%s", err, tt.wantFlag)
			}
		})
	}
}
