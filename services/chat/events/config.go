package events

import (
	"flag"
	"net/url"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/awsconfig"
	"github.com/gantry-dev/gantry/pkg/envflag"
)

// Queue kinds.
const (
	QueueBolt = "bolt"
	QueueSQS  = "sqs"
)

// Config holds every setting of the inbound direction (flags -chat-inbound-*). Bots, their signing
// secrets and the handlers come from the chat configuration file and CREDENTIALS_SLACK_* variables.
type Config struct {
	// Queue is where received requests wait for a dispatcher: bolt (a file in the data folder) or
	// sqs (AWS SQS, shared by chat replicas).
	Queue string
	// QueuePath is the bbolt file of the bolt queue; empty is <data-dir>/chat-queue.db.
	QueuePath string
	// SQSQueueURL is the SQS queue of the sqs mode; a FIFO queue (.fifo) also deduplicates Slack's
	// retries across replicas.
	SQSQueueURL string
	// SQSDeadLetterURL is the SQS queue dead-lettered messages are moved to.
	SQSDeadLetterURL string
	// SQSEndpoint overrides the SQS endpoint (tests, VPC endpoints); empty uses AWS's.
	SQSEndpoint string
	// Workers is the number of concurrent dispatchers of this replica.
	Workers int
	// VisibilityTimeout is how long a dispatcher holds a message before another may take it (Omnibot's
	// SQS_VISIBILITY_TIMEOUT); longer than a callback with its actions takes.
	VisibilityTimeout time.Duration
	// MaxAttempts is how many failed dispatches send a message to the dead letter.
	MaxAttempts int
	// RetryBackoff is the wait before the first retry; it doubles with each attempt, up to a minute.
	RetryBackoff time.Duration
	// DedupeWindow is how long an event id keeps Slack's retries of it out of the queue.
	DedupeWindow time.Duration
	// CallbackTimeout bounds one POST to a handler's backend.
	CallbackTimeout time.Duration
	// SyncTimeout bounds a synchronous interactive callback, whose answer Slack waits for (3 s).
	SyncTimeout time.Duration
	// MaxSkew is how far X-Slack-Request-Timestamp may be from now (Slack's advice: 5 minutes).
	MaxSkew time.Duration
	// AllowVerificationToken accepts, for an app without a signing secret, Slack's legacy
	// verification token (CREDENTIALS_SLACK_VERIFICATION_TOKEN_<APPID>), as Omnibot did. Off: such
	// an app's requests are refused.
	AllowVerificationToken bool
	// ResponseURLPrefixes are the URL prefixes a response_url must start with before gantry POSTs a
	// handler's responses to it (comma list).
	ResponseURLPrefixes string
}

// DefaultConfig is the embedded queue with Omnibot's timings.
func DefaultConfig() Config {
	return Config{
		Queue:               QueueBolt,
		Workers:             4,
		VisibilityTimeout:   60 * time.Second,
		MaxAttempts:         5,
		RetryBackoff:        time.Second,
		DedupeWindow:        2 * time.Hour,
		CallbackTimeout:     10 * time.Second,
		SyncTimeout:         2500 * time.Millisecond,
		MaxSkew:             5 * time.Minute,
		ResponseURLPrefixes: "https://hooks.slack.com/",
	}
}

// AddFlags registers the settings on fs.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Queue, "chat-inbound-queue", c.Queue, "queue of received Slack requests: bolt (file in the data folder) or sqs (shared by replicas)")
	fs.StringVar(&c.QueuePath, "chat-inbound-queue-path", c.QueuePath, "bbolt file of the bolt queue (default <data-dir>/chat-queue.db)")
	fs.StringVar(&c.SQSQueueURL, "chat-inbound-sqs-queue-url", c.SQSQueueURL, "SQS queue URL of the sqs queue (a .fifo queue also deduplicates Slack retries across replicas)")
	fs.StringVar(&c.SQSDeadLetterURL, "chat-inbound-sqs-dead-letter-url", c.SQSDeadLetterURL, "SQS queue URL dead-lettered messages move to")
	fs.StringVar(&c.SQSEndpoint, "chat-inbound-sqs-endpoint", c.SQSEndpoint, "SQS endpoint URL (empty: AWS's for the region)")
	fs.IntVar(&c.Workers, "chat-inbound-workers", c.Workers, "concurrent dispatchers of received Slack requests")
	fs.DurationVar(&c.VisibilityTimeout, "chat-inbound-visibility-timeout", c.VisibilityTimeout, "how long a dispatcher holds a queued request before another may take it")
	fs.IntVar(&c.MaxAttempts, "chat-inbound-max-attempts", c.MaxAttempts, "failed dispatches after which a request goes to the dead letter")
	fs.DurationVar(&c.RetryBackoff, "chat-inbound-retry-backoff", c.RetryBackoff, "wait before the first retry of a failed dispatch (doubles, up to 1m)")
	fs.DurationVar(&c.DedupeWindow, "chat-inbound-dedupe-window", c.DedupeWindow, "how long an event id keeps Slack's retries of it out of the queue")
	fs.DurationVar(&c.CallbackTimeout, "chat-inbound-callback-timeout", c.CallbackTimeout, "timeout of one POST to a handler's backend")
	fs.DurationVar(&c.SyncTimeout, "chat-inbound-sync-timeout", c.SyncTimeout, "timeout of a synchronous interactive callback (Slack waits 3s)")
	fs.DurationVar(&c.MaxSkew, "chat-inbound-max-skew", c.MaxSkew, "largest difference between X-Slack-Request-Timestamp and now")
	fs.BoolVar(&c.AllowVerificationToken, "chat-inbound-allow-verification-token", c.AllowVerificationToken, "accept Slack's legacy verification token for apps without a signing secret (migration from Omnibot)")
	fs.StringVar(&c.ResponseURLPrefixes, "chat-inbound-response-url-prefixes", c.ResponseURLPrefixes, "comma list of URL prefixes a response_url must start with")
}

// Validate reports the first bad setting, by flag name.
func (c Config) Validate() error {
	switch c.Queue {
	case QueueBolt:
	case QueueSQS:
		if _, err := url.ParseRequestURI(c.SQSQueueURL); err != nil || c.SQSQueueURL == "" {
			return envflag.Invalid("chat-inbound-sqs-queue-url", "must be the queue's URL with -chat-inbound-queue=sqs")
		}
		if _, err := url.ParseRequestURI(c.SQSDeadLetterURL); err != nil || c.SQSDeadLetterURL == "" {
			return envflag.Invalid("chat-inbound-sqs-dead-letter-url", "must be a queue URL with -chat-inbound-queue=sqs")
		}
		if strings.HasSuffix(c.SQSQueueURL, ".fifo") != strings.HasSuffix(c.SQSDeadLetterURL, ".fifo") {
			return envflag.Invalid("chat-inbound-sqs-dead-letter-url", "must be a FIFO queue (.fifo) exactly when -chat-inbound-sqs-queue-url is one")
		}
		if err := awsconfig.ValidateEndpoint(c.SQSEndpoint); err != nil {
			return envflag.Invalid("chat-inbound-sqs-endpoint", "%v", err)
		}
	default:
		return envflag.Invalid("chat-inbound-queue", "%q is not bolt or sqs", c.Queue)
	}
	switch {
	case c.Workers < 1 || c.Workers > 256:
		return envflag.Invalid("chat-inbound-workers", "must be between 1 and 256, got %d", c.Workers)
	case c.VisibilityTimeout < time.Second:
		return envflag.Invalid("chat-inbound-visibility-timeout", "must be at least 1s, got %v", c.VisibilityTimeout)
	case c.MaxAttempts < 1:
		return envflag.Invalid("chat-inbound-max-attempts", "must be at least 1, got %d", c.MaxAttempts)
	case c.RetryBackoff < 0:
		return envflag.Invalid("chat-inbound-retry-backoff", "must not be negative, got %v", c.RetryBackoff)
	case c.DedupeWindow <= 0:
		return envflag.Invalid("chat-inbound-dedupe-window", "must be positive, got %v", c.DedupeWindow)
	case c.CallbackTimeout <= 0 || c.CallbackTimeout >= c.VisibilityTimeout:
		return envflag.Invalid("chat-inbound-callback-timeout", "must be positive and below -chat-inbound-visibility-timeout, got %v", c.CallbackTimeout)
	case c.SyncTimeout <= 0 || c.SyncTimeout > 3*time.Second:
		return envflag.Invalid("chat-inbound-sync-timeout", "must be positive and at most Slack's 3s, got %v", c.SyncTimeout)
	case c.MaxSkew <= 0:
		return envflag.Invalid("chat-inbound-max-skew", "must be positive, got %v", c.MaxSkew)
	}
	for _, p := range c.responsePrefixes() {
		if u, err := url.Parse(p); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return envflag.Invalid("chat-inbound-response-url-prefixes", "%q is not an http(s) URL prefix", p)
		}
	}
	return nil
}

func (c Config) responsePrefixes() []string {
	var out []string
	for _, p := range strings.Split(c.ResponseURLPrefixes, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
