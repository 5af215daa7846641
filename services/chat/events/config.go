package events

import (
	"net/url"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/awsconfig"
	"github.com/gantry-dev/gantry/pkg/settings"
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
	// MaxDepth bounds the messages the queue holds, waiting or in flight (dead letters aside): a
	// request that would pass it is refused with 503, which Slack retries. 0: no bound.
	MaxDepth int
	// MaxAge bounds how long a request waits for its dispatch: an older one is moved to the dead
	// letter undelivered. 0: no bound.
	MaxAge time.Duration
	// ResponseURLPrefixes are the URL prefixes a response_url must start with before gantry POSTs a
	// handler's responses to it (comma list).
	ResponseURLPrefixes string
	// ShutdownGrace is how long dispatches in flight may finish once the service is told to stop;
	// those still running then are abandoned, and their requests released to be dispatched again.
	// Not a flag of its own: the process's -shutdown-timeout (internal/stack sets it).
	ShutdownGrace time.Duration
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
		CallbackTimeout:     50 * time.Second,
		MaxDepth:            10000,
		MaxAge:              15 * time.Minute,
		SyncTimeout:         2500 * time.Millisecond,
		MaxSkew:             5 * time.Minute,
		ResponseURLPrefixes: "https://hooks.slack.com/",
		ShutdownGrace:       10 * time.Second,
	}
}

// Settings declares the inbound settings for the settings table (group "chat-inbound"); the signing
// secrets are a family of the chat service's (CREDENTIALS_SLACK_SIGNING_SECRET_<APP>).
func (c *Config) Settings() settings.Part {
	const group = "chat-inbound"
	return settings.Part{Settings: []settings.Setting{
		{Name: "chat-inbound-queue", Group: group, Value: settings.String(&c.Queue), Usage: "queue of received Slack requests: bolt (file in the data folder) or sqs (shared by replicas)"},
		{Name: "chat-inbound-queue-path", Group: group, Value: settings.String(&c.QueuePath), Default: "<data-dir>/chat-queue.db", Usage: "bbolt file of the bolt queue (default <data-dir>/chat-queue.db)"},
		{Name: "chat-inbound-sqs-queue-url", Group: group, Value: settings.String(&c.SQSQueueURL), Usage: "SQS queue URL of the sqs queue (a .fifo queue also deduplicates Slack retries across replicas)"},
		{Name: "chat-inbound-sqs-dead-letter-url", Group: group, Value: settings.String(&c.SQSDeadLetterURL), Usage: "SQS queue URL dead-lettered messages move to"},
		{Name: "chat-inbound-sqs-endpoint", Group: group, Value: settings.String(&c.SQSEndpoint), Usage: "SQS endpoint URL (empty: AWS's for the region)"},
		{Name: "chat-inbound-workers", Group: group, Value: settings.Int(&c.Workers), Usage: "concurrent dispatchers of received Slack requests"},
		{Name: "chat-inbound-visibility-timeout", Group: group, Value: settings.Duration(&c.VisibilityTimeout), Usage: "how long a dispatcher holds a queued request before another may take it"},
		{Name: "chat-inbound-max-attempts", Group: group, Value: settings.Int(&c.MaxAttempts), Usage: "failed dispatches after which a request goes to the dead letter"},
		{Name: "chat-inbound-retry-backoff", Group: group, Value: settings.Duration(&c.RetryBackoff), Usage: "wait before the first retry of a failed dispatch (doubles, up to 1m)"},
		{Name: "chat-inbound-dedupe-window", Group: group, Value: settings.Duration(&c.DedupeWindow), Usage: "how long an event id keeps Slack's retries of it out of the queue"},
		{Name: "chat-inbound-callback-timeout", Group: group, Value: settings.Duration(&c.CallbackTimeout), Usage: "timeout of one POST to a handler's backend (below the visibility timeout); a call that timed out is not sent again unless its handler sets retry_on_timeout"},
		{Name: "chat-inbound-max-depth", Group: group, Value: settings.Int(&c.MaxDepth), Usage: "most requests the queue holds (waiting or in flight); more are answered 503, which Slack retries (0: no bound)"},
		{Name: "chat-inbound-max-age", Group: group, Value: settings.Duration(&c.MaxAge), Usage: "longest a request waits for dispatch; older ones go to the dead letter undelivered (0: no bound)"},
		{Name: "chat-inbound-sync-timeout", Group: group, Value: settings.Duration(&c.SyncTimeout), Usage: "timeout of a synchronous interactive callback (Slack waits 3s)"},
		{Name: "chat-inbound-max-skew", Group: group, Value: settings.Duration(&c.MaxSkew), Usage: "largest difference between X-Slack-Request-Timestamp and now"},
		{Name: "chat-inbound-allow-verification-token", Group: group, Value: settings.Bool(&c.AllowVerificationToken), Usage: "accept Slack's legacy verification token for apps without a signing secret (migration from Omnibot)"},
		{Name: "chat-inbound-response-url-prefixes", Group: group, Value: settings.String(&c.ResponseURLPrefixes), Usage: "comma list of URL prefixes a response_url must start with"},
	}}
}

// Validate reports the first bad setting, by flag name.
func (c Config) Validate() error {
	switch c.Queue {
	case QueueBolt:
	case QueueSQS:
		if _, err := url.ParseRequestURI(c.SQSQueueURL); err != nil || c.SQSQueueURL == "" {
			return settings.Invalid("chat-inbound-sqs-queue-url", "must be the queue's URL with -chat-inbound-queue=sqs")
		}
		if _, err := url.ParseRequestURI(c.SQSDeadLetterURL); err != nil || c.SQSDeadLetterURL == "" {
			return settings.Invalid("chat-inbound-sqs-dead-letter-url", "must be a queue URL with -chat-inbound-queue=sqs")
		}
		if strings.HasSuffix(c.SQSQueueURL, ".fifo") != strings.HasSuffix(c.SQSDeadLetterURL, ".fifo") {
			return settings.Invalid("chat-inbound-sqs-dead-letter-url", "must be a FIFO queue (.fifo) exactly when -chat-inbound-sqs-queue-url is one")
		}
		if err := awsconfig.ValidateEndpoint(c.SQSEndpoint); err != nil {
			return settings.Invalid("chat-inbound-sqs-endpoint", "%v", err)
		}
	default:
		return settings.Invalid("chat-inbound-queue", "%q is not bolt or sqs", c.Queue)
	}
	switch {
	case c.Workers < 1 || c.Workers > 256:
		return settings.Invalid("chat-inbound-workers", "must be between 1 and 256, got %d", c.Workers)
	case c.VisibilityTimeout < time.Second:
		return settings.Invalid("chat-inbound-visibility-timeout", "must be at least 1s, got %v", c.VisibilityTimeout)
	case c.MaxAttempts < 1:
		return settings.Invalid("chat-inbound-max-attempts", "must be at least 1, got %d", c.MaxAttempts)
	case c.RetryBackoff < 0:
		return settings.Invalid("chat-inbound-retry-backoff", "must not be negative, got %v", c.RetryBackoff)
	case c.DedupeWindow <= 0:
		return settings.Invalid("chat-inbound-dedupe-window", "must be positive, got %v", c.DedupeWindow)
	case c.CallbackTimeout <= 0 || c.CallbackTimeout >= c.VisibilityTimeout:
		return settings.Invalid("chat-inbound-callback-timeout", "must be positive and below -chat-inbound-visibility-timeout, got %v", c.CallbackTimeout)
	case c.SyncTimeout <= 0 || c.SyncTimeout > 3*time.Second:
		return settings.Invalid("chat-inbound-sync-timeout", "must be positive and at most Slack's 3s, got %v", c.SyncTimeout)
	case c.MaxDepth < 0:
		return settings.Invalid("chat-inbound-max-depth", "must not be negative (0: no bound), got %d", c.MaxDepth)
	case c.MaxAge < 0:
		return settings.Invalid("chat-inbound-max-age", "must not be negative (0: no bound), got %v", c.MaxAge)
	case c.MaxSkew <= 0:
		return settings.Invalid("chat-inbound-max-skew", "must be positive, got %v", c.MaxSkew)
	}
	for _, p := range c.responsePrefixes() {
		if u, err := url.Parse(p); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return settings.Invalid("chat-inbound-response-url-prefixes", "%q is not an http(s) URL prefix", p)
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
