package chat

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/testwait"
	"github.com/gantry-dev/gantry/services/chat/events"
	"github.com/gantry-dev/gantry/services/chat/queue/boltqueue"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// TestRunReturnsAfterTheDispatchInFlight: Run, stopped while one of Slack's requests is being
// dispatched to its handler's backend, returns only once that dispatch has finished (within the
// inbound shutdown grace), so the stack that runs it waits for the dispatcher, and Close never
// closes the queue under a dispatch.
func TestRunReturnsAfterTheDispatchInFlight(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	var calls atomic.Int32
	release := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		calls.Add(1)
		<-release
		_, _ = io.WriteString(w, "{}")
	}))
	defer backend.Close()
	var released sync.Once
	releaseBackend := func() { released.Do(func() { close(release) }) }
	defer releaseBackend() // before Close, which waits for the call a failed test still holds
	const secret = "run-signing-secret"
	cfg := DefaultConfig()
	cfg.SlackAPIURL = f.APIURL()
	cfg.RefreshInterval = -1
	cfg.Inbound.ShutdownGrace = time.Minute // only bounds a hang: the backend answers when the test says
	cfg.ConfigFile = filepath.Join(t.TempDir(), "chat.yaml")
	handlers := fmt.Sprintf(`
handlers:
  message_handlers:
    - match: "ping"
      match_type: "command"
      bots: {acme: [pingbot]}
      callbacks:
        - module: "omnibot.callbacks.network_callbacks:http_callback"
          kwargs: {request_kwargs: {url: %q}}
`, backend.URL)
	if err := os.WriteFile(cfg.ConfigFile, []byte(testFile+handlers), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Credentials = func(name string) string {
		if name == "CREDENTIALS_SLACK_SIGNING_SECRET_A0PING001" {
			return secret
		}
		return testCreds(name)
	}
	core, logs := observer.New(zap.InfoLevel)
	logger := zap.New(zapcore.NewTee(logtest.New(t).Core(), core))
	q, err := boltqueue.Open(filepath.Join(t.TempDir(), "queue.db"), boltqueue.Options{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(context.Background(), cfg, Deps{Queue: q, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Close() }()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- svc.Run(ctx) }()
	body, _ := json.Marshal(map[string]any{
		"token": "legacy", "team_id": "T0FAKE001", "api_app_id": "A0PING001", "type": "event_callback",
		"event_id": "Ev0RUN0001", "event_time": time.Now().Unix(),
		"event": map[string]any{"type": "message", "channel": "C0GENERAL", "channel_type": "channel", "user": "U0ALICE01",
			"text": "<@U0BOT0001> ping", "ts": "1700000000.000100", "event_ts": "1700000000.000100"},
	})
	now := time.Now().Unix()
	if _, err := svc.ReceiveSlack(ctx, events.Request{Kind: events.KindEvent, Body: body,
		Signature: events.Sign(secret, now, body), Timestamp: fmt.Sprint(now)}); err != nil {
		t.Fatalf("receive: %v", err)
	}
	testwait.Until(t, "the dispatch to the handler's backend", func() bool { return calls.Load() == 1 })

	cancel()
	testwait.Until(t, "Run to wait for the dispatch in flight", func() bool {
		return logs.FilterMessageSnippet("waiting for the dispatches in flight").Len() > 0
	})
	select {
	case err := <-ran:
		t.Fatalf("Run returned (%v) while a dispatch was in flight", err)
	default:
	}
	releaseBackend()
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := logs.FilterMessageSnippet("abandoned").Len(); n != 0 {
		t.Errorf("%d abandoned dispatches logged, want none", n)
	}
}
