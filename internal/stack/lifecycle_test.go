package stack_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/internal/stacktest"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/testwait"
	"github.com/gantry-dev/gantry/services/chat"
	"github.com/gantry-dev/gantry/services/chat/events"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// signingSecret is pingbot's Slack signing secret in the chat configuration of the test.
const signingSecret = "lifecycle-signing-secret"

// chatFile is a chat configuration with one bot whose "ping" command calls the backend at %q.
const chatFile = `
teams:
  acme: T0FAKE001
bots:
  acme:
    pingbot: A0PING001
primary_bot:
  acme: pingbot
handlers:
  message_handlers:
    - match: "ping"
      match_type: "command"
      bots: {acme: [pingbot]}
      callbacks:
        - module: "omnibot.callbacks.network_callbacks:http_callback"
          kwargs: {request_kwargs: {url: %q}}
`

// TestGracefulStopJoinsEveryGoroutine: a stack running every role (bbolt, chat's inbound queue, the
// stats listener), stopped while one of Slack's requests is being dispatched, waits for that
// dispatch within the shutdown grace and, once Wait has returned, has left no goroutine running:
// every long-running piece of every role was joined, on the in-memory path between the gateway and
// the services as on gRPC over loopback TCP.
func TestGracefulStopJoinsEveryGoroutine(t *testing.T) {
	for _, inMemory := range []bool{true, false} {
		t.Run(fmt.Sprintf("grpc-in-memory=%v", inMemory), func(t *testing.T) {
			testGracefulStopJoins(t, inMemory)
		})
	}
}

func testGracefulStopJoins(t *testing.T, inMemory bool) {
	before := goroutines()
	slack := slacktest.StartWorkspace(t)
	backend := startHeldBackend()
	defer backend.stop()

	core, logs := observer.New(zap.InfoLevel)
	logger := zap.New(zapcore.NewTee(logtest.New(t).Core(), core))
	cfg := stacktest.Config(t)
	cfg.InMemoryUpstreams = inMemory
	cfg.StatsListen = "127.0.0.1:0"
	cfg.ShutdownTimeout = time.Minute // only bounds a hang: the backend answers when the test says
	cfg.Chat.ConfigFile = filepath.Join(t.TempDir(), "chat.yaml")
	if err := os.WriteFile(cfg.Chat.ConfigFile, []byte(fmt.Sprintf(chatFile, backend.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Chat.SlackAPIURL = slack.APIURL()
	cfg.Chat.Credentials = chat.Credentials(func(name string) string {
		return map[string]string{
			"CREDENTIALS_SLACK_OAUTH_BOT_TOKEN_A0PING001": "xoxb-lifecycle",
			"CREDENTIALS_SLACK_SIGNING_SECRET_A0PING001":  signingSecret,
		}[name]
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := stack.Start(ctx, cfg, logger)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	client := &http.Client{Transport: &http.Transport{}, Timeout: time.Minute}
	defer client.CloseIdleConnections()
	exerciseEveryRole(t, client, cfg, st)
	testwait.Until(t, "the dispatch of Slack's request to the handler's backend", func() bool { return backend.calls() == 1 })

	stopped := make(chan error, 1)
	go func() {
		cancel()
		stopped <- st.Wait()
	}()
	testwait.Until(t, "the stop to wait for the dispatch in flight", func() bool {
		return logs.FilterMessageSnippet("waiting for the dispatches in flight").Len() > 0
	})
	select {
	case err := <-stopped:
		t.Fatalf("Wait returned (%v) while a dispatch was in flight", err)
	default:
	}
	close(backend.release)
	if err := <-stopped; err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if n := logs.FilterMessageSnippet("abandoned").Len(); n != 0 {
		t.Errorf("%d abandoned dispatches logged, want none: the dispatch had the whole grace", n)
	}

	// What the test itself started goes too; then only goroutines of the stack could be left.
	client.CloseIdleConnections()
	slack.Close()
	backend.stop()
	waitForGoroutinesOf(t, before)
}

// exerciseEveryRole makes a call to every role, so each has opened what it opens on its first call:
// the gateway's health check, a secrets call through the gateway, the stats listener, and a message
// from Slack that chat's inbound queue dispatches to the backend.
func exerciseEveryRole(t *testing.T, client *http.Client, cfg stack.Config, st *stack.Stack) {
	t.Helper()
	get := func(url string, header http.Header) int {
		t.Helper()
		req, err := http.NewRequest("GET", url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header = header
		return do(t, client, req)
	}
	if code := get("http://"+st.GatewayAddr+"/healthcheck", nil); code != 200 {
		t.Errorf("GET /healthcheck: %d", code)
	}
	token := stacktest.Token(t, cfg.DataDir, "alice", "user", 10*time.Minute)
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("2/user/alice:"+token))
	if code := get("http://"+st.GatewayAddr+"/v1/value_generator", http.Header{"Authorization": {basic}}); code != 200 {
		t.Errorf("GET /v1/value_generator: %d", code)
	}
	for _, path := range []string{"/stats/prometheus", "/ready"} {
		if code := get("http://"+st.StatsAddr+path, nil); code != 200 {
			t.Errorf("GET stats listener %s: %d", path, code)
		}
	}
	body, _ := json.Marshal(map[string]any{
		"token": "legacy", "team_id": "T0FAKE001", "api_app_id": "A0PING001", "type": "event_callback",
		"event_id": "Ev0LIFE001", "event_time": time.Now().Unix(),
		"event": map[string]any{"type": "message", "channel": "C0GENERAL", "channel_type": "channel", "user": "U0ALICE01",
			"text": "<@U0BOT0001> ping", "ts": "1700000000.000100", "event_ts": "1700000000.000100"},
	})
	req, err := http.NewRequest("POST", "http://"+st.GatewayAddr+"/api/v1/slack/event", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Slack-Request-Timestamp", fmt.Sprint(now))
	req.Header.Set("X-Slack-Signature", events.Sign(signingSecret, now, body))
	if code := do(t, client, req); code != 200 {
		t.Fatalf("POST /api/v1/slack/event: %d", code)
	}
}

func do(t *testing.T, client *http.Client, req *http.Request) int {
	t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// heldBackend is a handler's backend that answers once release is closed.
type heldBackend struct {
	*httptest.Server
	release  chan struct{}
	mu       sync.Mutex
	received int
	stopOnce sync.Once
}

func startHeldBackend() *heldBackend {
	b := &heldBackend{release: make(chan struct{})}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		b.mu.Lock()
		b.received++
		b.mu.Unlock()
		select {
		case <-b.release:
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, "{}")
	}))
	return b
}

func (b *heldBackend) calls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.received
}

// stop releases a call still held and closes the server.
func (b *heldBackend) stop() {
	b.stopOnce.Do(func() {
		select {
		case <-b.release:
		default:
			close(b.release)
		}
		b.Close()
	})
}

// goroutines are the stacks of the running goroutines, by their header line's id.
func goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		id, _, _ := strings.Cut(strings.TrimPrefix(header, "goroutine "), " ")
		out[id] = g
	}
	return out
}

// waitForGoroutinesOf waits until every goroutine running now was running at before too, and on a
// hang fails the test with the stacks of those that were not.
func waitForGoroutinesOf(t *testing.T, before map[string]string) {
	t.Helper()
	deadline := time.Now().Add(testwait.HangDeadline)
	for {
		var left []string
		for id, g := range goroutines() {
			if _, ok := before[id]; !ok {
				left = append(left, g)
			}
		}
		if len(left) == 0 {
			return
		}

		if time.Now().After(deadline) {
			slices.Sort(left)
			t.Fatalf("%d goroutines started while the stack ran are still running after Wait returned (%v later):\n\n%s",
				len(left), testwait.HangDeadline, strings.Join(left, "\n\n"))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestGracefulStopJoinsTheApprovalRelay: with -chat-secrets-service the chat service keeps its
// connection to the secrets service after reading its tokens and runs the Slack approval relay over
// it; both are joined when the stack stops, like every other piece, and leave no goroutine behind.
func TestGracefulStopJoinsTheApprovalRelay(t *testing.T) {
	before := goroutines()
	cfg := stacktest.Config(t)
	client := &http.Client{Transport: &http.Transport{}, Timeout: time.Minute}
	defer client.CloseIdleConnections()

	// First run: the chat service's own service, which it reads its tokens from.
	first := stacktest.Start(t, cfg)
	token := stacktest.Token(t, cfg.DataDir, "alice", "user", 10*time.Minute)
	req, err := http.NewRequest("PUT", "http://"+first.GatewayAddr+"/v1/services/gantry-chat", strings.NewReader(`{"enabled":true,"credentials":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("2/user/alice:"+token)))
	if code := do(t, client, req); code != 200 {
		t.Fatalf("PUT /v1/services/gantry-chat: %d", code)
	}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}

	slack := slacktest.StartWorkspace(t)
	core, logs := observer.New(zap.InfoLevel)
	cfg.Chat.ConfigFile = filepath.Join(t.TempDir(), "chat.yaml")
	if err := os.WriteFile(cfg.Chat.ConfigFile, []byte(fmt.Sprintf(chatFile, "http://127.0.0.1:1/unused")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Chat.SlackAPIURL = slack.APIURL()
	cfg.Chat.Credentials = chat.Credentials(func(name string) string {
		return map[string]string{"CREDENTIALS_SLACK_OAUTH_BOT_TOKEN_A0PING001": "xoxb-lifecycle"}[name]
	})
	cfg.Chat.Secrets.Service = "gantry-chat"
	cfg.Chat.ApprovalsPollInterval = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := stack.Start(ctx, cfg, zap.New(zapcore.NewTee(logtest.New(t).Core(), core)))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	testwait.Until(t, "the approval relay to run", func() bool {
		return logs.FilterLoggerName("chat.approvals").FilterMessageSnippet("relaying change requests").Len() == 1
	})
	cancel()
	if err := st.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	client.CloseIdleConnections()
	slack.Close()
	waitForGoroutinesOf(t, before)
}
