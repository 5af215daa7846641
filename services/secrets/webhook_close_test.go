package secrets

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/testwait"
)

// TestWebhookCloseIsBoundedWithAHangingReceiver: events queued behind a receiver that never answers
// are dropped after the close grace instead of holding shutdown for attempts × timeout each.
func TestWebhookCloseIsBoundedWithAHangingReceiver(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer receiver.Close()
	defer close(release)
	hooks := newWebhooks(webhookConfig{URL: receiver.URL, Timeout: time.Hour, Attempts: 3, CloseGrace: 50 * time.Millisecond}, logtest.New(t))
	for range 100 {
		hooks.send(webhookEvent{EventType: eventCredentialUpdate})
	}
	testwait.Until(t, "the receiver's first call", func() bool { return calls.Load() > 0 })
	hooks.close() // returns once the grace has passed: the in-flight post is cancelled, the rest dropped
	if n := calls.Load(); n != 1 {
		t.Errorf("the receiver got %d calls, want 1 (the rest dropped at shutdown)", n)
	}
}
