package secrets

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Webhook event types, as Confidant sends them.
const (
	eventCredentialUpdate = "credential_update"
	eventServiceUpdate    = "service_update"
)

// webhookEvent is Confidant's webhook body. It names ids only, never values.
type webhookEvent struct {
	EventType   string   `json:"event_type"`
	Services    []string `json:"services"`
	Credentials []string `json:"credentials"`
}

// webhookConfig tunes delivery; the zero value is replaced by defaults.
type webhookConfig struct {
	URL, Username, Password string
	Timeout                 time.Duration
	Attempts                int
	Backoff                 time.Duration
	QueueSize               int
	// CloseGrace bounds how long close keeps delivering queued events; what is left after it is
	// dropped (logged), so a hanging receiver cannot hold a shutdown.
	CloseGrace time.Duration
}

// webhooks delivers events off the request path: a write enqueues and returns at once; a worker
// posts each event with a timeout and bounded retries. A full queue drops the event (logged), so a
// slow or dead receiver can never slow or fail a write.
type webhooks struct {
	cfg    webhookConfig
	client *http.Client
	logger *zap.Logger
	queue  chan webhookEvent
	done   chan struct{}
	once   sync.Once
	// ctx ends when close's grace has passed: the delivery in flight is cancelled and the rest dropped.
	ctx    context.Context
	cancel context.CancelFunc
}

func newWebhooks(cfg webhookConfig, logger *zap.Logger) *webhooks {
	if cfg.Timeout == 0 {
		cfg.Timeout = 3 * time.Second
	}
	if cfg.Attempts == 0 {
		cfg.Attempts = 3
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = 500 * time.Millisecond
	}
	if cfg.QueueSize == 0 {
		cfg.QueueSize = 1024
	}
	if cfg.CloseGrace == 0 {
		cfg.CloseGrace = 5 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &webhooks{
		ctx: ctx, cancel: cancel,
		cfg: cfg, logger: logger,
		client: &http.Client{Timeout: cfg.Timeout},
		queue:  make(chan webhookEvent, cfg.QueueSize),
		done:   make(chan struct{}),
	}
	if cfg.URL != "" {
		go w.run()
	} else {
		close(w.done)
	}
	return w
}

// send enqueues an event; it never blocks.
// enabled reports whether a webhook URL is configured (events are sent at all).
func (w *webhooks) enabled() bool { return w.cfg.URL != "" }

func (w *webhooks) send(ev webhookEvent) {
	if !w.enabled() {
		return
	}
	select {
	case w.queue <- ev:
	default:
		w.logger.Warn("webhook queue full; event dropped", zap.String("event_type", ev.EventType))
	}
}

// close stops the worker after the queued events were attempted, or after CloseGrace, whichever
// comes first: then the delivery in flight is cancelled and the events still queued are dropped.
func (w *webhooks) close() {
	w.once.Do(func() {
		if w.cfg.URL != "" {
			close(w.queue)
		}
	})
	select {
	case <-w.done:
	case <-time.After(w.cfg.CloseGrace):
		w.cancel()
		<-w.done
	}
	w.cancel()
}

func (w *webhooks) run() {
	defer close(w.done)
	dropped := 0
	for ev := range w.queue {
		if w.ctx.Err() != nil {
			dropped++
			continue
		}
		w.deliver(ev)
	}
	if dropped > 0 {
		w.logger.Warn("webhook events dropped at shutdown: the receiver did not take them in time", zap.Int("dropped", dropped))
	}
}

func (w *webhooks) deliver(ev webhookEvent) {
	body, _ := json.Marshal(ev)
	for attempt := 1; attempt <= w.cfg.Attempts; attempt++ {
		err := w.post(body)
		if err == nil {
			return
		}
		w.logger.Warn("webhook delivery failed", zap.String("event_type", ev.EventType), zap.Int("attempt", attempt), zap.Error(err))
		if attempt < w.cfg.Attempts {
			select {
			case <-time.After(w.cfg.Backoff * time.Duration(attempt)):
			case <-w.ctx.Done():
				return
			}
		}
	}
}

type webhookStatusError int

func (e webhookStatusError) Error() string {
	return "receiver answered HTTP " + http.StatusText(int(e))
}

func (w *webhooks) post(body []byte) error {
	ctx, cancel := context.WithTimeout(w.ctx, w.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/plain")
	if w.cfg.Username != "" || w.cfg.Password != "" {
		req.SetBasicAuth(w.cfg.Username, w.cfg.Password)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode >= 300 {
		return webhookStatusError(resp.StatusCode)
	}
	return nil
}
