package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/testwait"
	"github.com/gantry-dev/gantry/services/chat"
	"github.com/gantry-dev/gantry/services/chat/events"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

const inboundSecret = "e2e-signing-secret"

// inboundCreds are chatCreds plus pingbot's signing secret.
var inboundCreds = chat.Credentials(func(name string) string {
	if name == "CREDENTIALS_SLACK_SIGNING_SECRET_A0PING001" {
		return inboundSecret
	}
	return chatCreds(name)
})

// backend is a fake handler backend: it records the payloads it was sent and answers with reply,
// or with fail's status while fail is positive.
type backend struct {
	*httptest.Server
	mu       sync.Mutex
	payloads []map[string]any
	reply    string
	failing  int // answer 500 this many more times (-1: always)
	// responses records what was POSTed to the response_url path.
	responses []map[string]any
}

func startBackend(t testing.TB, reply string) *backend {
	b := &backend{reply: reply}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p map[string]any
		_ = json.NewDecoder(r.Body).Decode(&p)
		b.mu.Lock()
		defer b.mu.Unlock()
		if r.URL.Path == "/response" {
			b.responses = append(b.responses, p)
			return
		}
		if b.failing != 0 {
			if b.failing > 0 {
				b.failing--
			}
			b.payloads = append(b.payloads, p)
			w.WriteHeader(500)
			return
		}
		b.payloads = append(b.payloads, p)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, b.reply)
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *backend) calls() []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]map[string]any(nil), b.payloads...)
}

func (b *backend) setFailing(n int) {
	b.mu.Lock()
	b.failing = n
	b.mu.Unlock()
}

func inboundHandlers(url string) string {
	return fmt.Sprintf(`
handlers:
  message_handlers:
    - match: "ping"
      match_type: "command"
      bots: {acme: [pingbot]}
      callbacks:
        - module: "omnibot.callbacks.network_callbacks:http_callback"
          kwargs: {request_kwargs: {url: %q}}
  slash_command_handlers:
    - command: "/deploy"
      response_type: "in_channel"
      canned_response: "Deploying..."
      bots: {acme: [pingbot]}
      callbacks:
        - module: "omnibot.callbacks.network_callbacks:http_callback"
          kwargs: {request_kwargs: {url: %q}}
  interactive_component_handlers:
    - callback_id: "approve"
      synchronous: true
      bots: {acme: [pingbot]}
      callbacks:
        - module: "omnibot.callbacks.network_callbacks:http_callback"
          kwargs: {request_kwargs: {url: %q}}
`, url+"/message", url+"/slash", url+"/interactive")
}

// startInbound runs the stack on fake Slack with handlers calling be.
func startInbound(t testing.TB, f *slacktest.Server, be *backend, mutate func(*stack.Config)) *testStack {
	t.Helper()
	return startChat(t, f, chatTeams+chatACL+inboundHandlers(be.URL), func(c *stack.Config) {
		c.Chat.Credentials = inboundCreds
		c.Chat.Inbound.RetryBackoff = 50 * time.Millisecond
		c.Chat.Inbound.MaxAttempts = 3
		c.Chat.Inbound.ResponseURLPrefixes = be.URL + "/response"
		if mutate != nil {
			mutate(c)
		}
	})
}

// slackPost sends a request as Slack would, signed with secret at time at (retry > 0 adds Slack's
// retry headers).
func (s *testStack) slackPost(path, contentType, body, secret string, at time.Time, retry int) response {
	s.t.Helper()
	h := http.Header{"Content-Type": {contentType}}
	h.Set("X-Slack-Request-Timestamp", fmt.Sprint(at.Unix()))
	h.Set("X-Slack-Signature", events.Sign(secret, at.Unix(), []byte(body)))
	if retry > 0 {
		h.Set("X-Slack-Retry-Num", fmt.Sprint(retry))
		h.Set("X-Slack-Retry-Reason", "http_timeout")
	}
	return s.do("POST", s.rest+path, body, h)
}

func messageEvent(eventID, text string) string {
	b, _ := json.Marshal(map[string]any{
		"token": "legacy", "team_id": "T0FAKE001", "api_app_id": "A0PING001", "type": "event_callback",
		"event_id": eventID, "event_time": time.Now().Unix(),
		"event": map[string]any{"type": "message", "channel": "C0GENERAL", "channel_type": "channel", "user": "U0ALICE01",
			"text": text, "ts": "1700000000.000100", "event_ts": "1700000000.000100"},
	})
	return string(b)
}

// TestInboundVerification: Slack's signature and replay checks, and url_verification.
func TestInboundVerification(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	be := startBackend(t, `{}`)
	s := startInbound(t, f, be, nil)
	now := time.Now()
	body := messageEvent("Ev0VERIFY", "<@U0BOT0001> ping")
	for name, r := range map[string]response{
		"bad signature":      s.slackPost("/api/v1/slack/event", "application/json", body, "not-the-secret", now, 0),
		"old timestamp":      s.slackPost("/api/v1/slack/event", "application/json", body, inboundSecret, now.Add(-6*time.Minute), 0),
		"future timestamp":   s.slackPost("/api/v1/slack/event", "application/json", body, inboundSecret, now.Add(6*time.Minute), 0),
		"unsigned":           s.do("POST", s.rest+"/api/v1/slack/event", body, http.Header{"Content-Type": {"application/json"}}),
		"unknown app":        s.slackPost("/api/v1/chat/event", "application/json", strings.Replace(body, "A0PING001", "A0NOPE001", 1), inboundSecret, now, 0),
		"app without secret": s.slackPost("/api/v1/chat/event", "application/json", strings.Replace(body, "A0PING001", "A0LONELY1", 1), inboundSecret, now, 0),
	} {
		if r.code != 401 {
			t.Errorf("%s: %d %s, want 401", name, r.code, r.body)
		}
	}
	if r := s.slackPost("/api/v1/slack/event", "application/json", "{not json", inboundSecret, now, 0); r.code != 400 {
		t.Errorf("malformed body: %d %s, want 400", r.code, r.body)
	}
	big := strings.Repeat("x", 2<<20)
	if r := s.slackPost("/api/v1/slack/event", "application/json", big, inboundSecret, now, 0); r.code != 413 {
		t.Errorf("2 MiB body: %d, want 413", r.code)
	}
	// Slack's url_verification names no app (no api_app_id): it is signed with the app's secret, so
	// the receiver finds the app whose secret verifies it.
	ch := `{"token":"legacy","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`
	for _, p := range []string{"/api/v1/slack/event", "/api/v1/chat/event"} {
		m := s.slackPost(p, "application/json", ch, inboundSecret, now, 0).must(t, 200)
		if m["challenge"] != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" {
			t.Errorf("%s: url_verification answered %v", p, m)
		}
	}
	if r := s.slackPost("/api/v1/slack/event", "application/json", ch, "not-the-secret", now, 0); r.code != 401 {
		t.Errorf("url_verification signed with no app's secret: %d %s, want 401", r.code, r.body)
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(be.calls()); n != 0 {
		t.Errorf("refused requests reached the backend %d times", n)
	}
}

// TestInboundCommandOnceWithActions: a message directed at the bot matching a command handler
// reaches the backend once although Slack retried it, with Omnibot's enriched payload, and the
// backend's chat.postMessage reaches Slack in the message's channel and thread.
func TestInboundCommandOnceWithActions(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	be := startBackend(t, `{"actions":[{"action":"chat.postMessage","kwargs":{"text":"pong"}}]}`)
	s := startInbound(t, f, be, nil)
	body := messageEvent("Ev0PING001", "<@U0BOT0001> ping <#C0GENERAL> <mailto:bob@example.com|bob@example.com> <!here>")
	start := time.Now()
	s.slackPost("/api/v1/slack/event", "application/json", body, inboundSecret, time.Now(), 0).must(t, 200)
	if took := time.Since(start); took > time.Second {
		t.Errorf("acknowledging took %v", took)
	}
	s.slackPost("/api/v1/slack/event", "application/json", body, inboundSecret, time.Now(), 1).must(t, 200)
	s.slackPost("/api/v1/chat/event", "application/json", body, inboundSecret, time.Now(), 2).must(t, 200)
	testwait.Until(t, "the backend call", func() bool { return len(be.calls()) > 0 })
	testwait.Until(t, "the backend's action", func() bool { return len(f.Requests("chat.postMessage")) > 0 })
	time.Sleep(300 * time.Millisecond)
	calls := be.calls()
	if len(calls) != 1 {
		t.Fatalf("backend called %d times, want 1", len(calls))
	}
	p := calls[0]
	want := map[string]any{
		"omnibot_payload_type": "message", "directed": true, "mentioned": true, "command": "ping", "match_type": "command",
		"command_text": "ping #general bob@example.com @here", "parsed_text": "@pingbot ping #general bob@example.com @here",
		"channel_id": "C0GENERAL", "event_id": "Ev0PING001",
	}
	for k, v := range want {
		if p[k] != v {
			t.Errorf("payload %s = %#v, want %#v", k, p[k], v)
		}
	}
	if bot, _ := p["bot"].(map[string]any); bot["name"] != "pingbot" || bot["bot_id"] != "A0PING001" {
		t.Errorf("payload bot = %v", p["bot"])
	}
	if emails, _ := p["emails"].(map[string]any); emails["<mailto:bob@example.com|bob@example.com>"] != "bob@example.com" {
		t.Errorf("payload emails = %v", p["emails"])
	}
	posts := f.Requests("chat.postMessage")
	if len(posts) != 1 {
		t.Fatalf("%d chat.postMessage calls, want 1", len(posts))
	}
	if form := posts[0].Form; form.Get("channel") != "C0GENERAL" || form.Get("thread_ts") != "1700000000.000100" || form.Get("text") != "pong" {
		t.Errorf("posted %v", form)
	}
	stats := string(s.admin("/stats?filter=chat.inbound").body)
	for _, line := range []string{"chat.inbound.event.received: 3", "chat.inbound.event.duplicate: 2", "chat.inbound.event.queued: 1", "chat.inbound.event.dispatched: 1", "chat.inbound.handler.command.ping.dispatched: 1"} {
		if !strings.Contains(stats, line) {
			t.Errorf("stats lack %q:\n%s", line, stats)
		}
	}
}

// TestInboundIgnoresBotsAndUndirected: bot messages, Slackbot, subtypes and messages not directed
// at the bot never reach a command handler.
func TestInboundIgnoresBotsAndUndirected(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	be := startBackend(t, `{}`)
	s := startInbound(t, f, be, nil)
	for i, mutate := range []func(ev map[string]any){
		func(ev map[string]any) { ev["bot_id"] = "B0OTHER01" },
		func(ev map[string]any) { ev["user"] = "USLACKBOT" },
		func(ev map[string]any) { ev["subtype"] = "message_changed" },
		func(ev map[string]any) { ev["text"] = "ping without a mention" },
	} {
		var p map[string]any
		_ = json.Unmarshal([]byte(messageEvent(fmt.Sprint("Ev0IGNORE", i), "<@U0BOT0001> ping")), &p)
		mutate(p["event"].(map[string]any))
		body, _ := json.Marshal(p)
		s.slackPost("/api/v1/slack/event", "application/json", string(body), inboundSecret, time.Now(), 0).must(t, 200)
	}
	testwait.Until(t, "the four events to be handled", func() bool {
		return strings.Contains(string(s.admin("/stats?filter=chat.inbound.event.dispatched").body), "dispatched: 4")
	})
	if n := len(be.calls()); n != 0 {
		t.Errorf("ignored messages reached the backend %d times", n)
	}
}

// TestInboundSlashAndInteractive: a slash command's canned response and a synchronous interactive
// callback's answer come back within Slack's 3 seconds; the slash command reaches its backend,
// whose responses go to the response_url.
func TestInboundSlashAndInteractive(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	be := startBackend(t, `{"text":"approved","responses":[{"text":"done"}]}`)
	s := startInbound(t, f, be, nil)
	form := url.Values{"token": {"legacy"}, "team_id": {"T0FAKE001"}, "api_app_id": {"A0PING001"}, "command": {"/deploy"}, "text": {"api prod"},
		"user_id": {"U0ALICE01"}, "channel_id": {"C0GENERAL"}, "trigger_id": {"13345224609.738474920.8088930838d88f008e0"}, "response_url": {be.URL + "/response"}}
	start := time.Now()
	m := s.slackPost("/api/v1/slack/slash_command", "application/x-www-form-urlencoded", form.Encode(), inboundSecret, time.Now(), 0).must(t, 200)
	if m["text"] != "Deploying..." || m["response_type"] != "in_channel" {
		t.Errorf("slash command answered %v", m)
	}
	form.Set("command", "/nohandler")
	if m := s.slackPost("/api/v1/chat/slash_command", "application/x-www-form-urlencoded", form.Encode(), inboundSecret, time.Now(), 0).must(t, 200); !strings.Contains(fmt.Sprint(m["text"]), "does not have any omnibot handler") {
		t.Errorf("unknown command answered %v", m)
	}
	// Slack's certificate check of a slash command URL names no app and no command: a bare 200.
	if r := s.do("POST", s.rest+"/api/v1/slack/slash_command", "ssl_check=1&token=legacy", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}); r.code != 200 {
		t.Errorf("ssl_check: %d %s, want 200", r.code, r.body)
	}
	payload, _ := json.Marshal(map[string]any{"type": "interactive_message", "callback_id": "approve", "api_app_id": "A0PING001",
		"team": map[string]any{"id": "T0FAKE001"}, "user": map[string]any{"id": "U0ALICE01"}, "channel": map[string]any{"id": "C0GENERAL"},
		"actions": []any{map[string]any{"name": "ok", "value": "yes"}}, "response_url": be.URL + "/response"})
	m = s.slackPost("/api/v1/slack/interactive", "application/x-www-form-urlencoded", url.Values{"payload": {string(payload)}}.Encode(), inboundSecret, time.Now(), 0).must(t, 200)
	if m["text"] != "approved" {
		t.Errorf("synchronous callback answered %v", m)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("answers took %v", took)
	}
	testwait.Until(t, "the slash command's backend call and response", func() bool {
		be.mu.Lock()
		defer be.mu.Unlock()
		return len(be.responses) > 0
	})
	var slash map[string]any
	for _, c := range be.calls() {
		if c["omnibot_payload_type"] == "slash_command" {
			slash = c
		}
	}
	if slash == nil || slash["command"] != "/deploy" || slash["text"] != "api prod" || slash["token"] != nil {
		t.Errorf("slash payload = %v", slash)
	}
	be.mu.Lock()
	resp := be.responses[0]
	be.mu.Unlock()
	if resp["text"] != "done" || resp["response_type"] != "in_channel" {
		t.Errorf("response_url got %v", resp)
	}
}

// TestInboundBackendDownThenRestart: events for a backend that is down wait in the queue, survive a
// restart of the stack on the same data folder, and reach the backend once it is up.
func TestInboundBackendDownThenRestart(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	be := startBackend(t, `{}`)
	be.setFailing(-1)
	dir := t.TempDir()
	mutate := func(c *stack.Config) {
		c.DataDir = dir
		c.Chat.Inbound.MaxAttempts = 100
		c.Chat.Inbound.RetryBackoff = time.Second
	}
	s := startInbound(t, f, be, mutate)
	s.slackPost("/api/v1/slack/event", "application/json", messageEvent("Ev0DOWN001", "<@U0BOT0001> ping"), inboundSecret, time.Now(), 0).must(t, 200)
	testwait.Until(t, "a failed attempt", func() bool { return len(be.calls()) > 0 })
	s.stop()
	be.setFailing(0)
	before := len(be.calls())
	s2 := startInbound(t, f, be, mutate)
	testwait.Until(t, "delivery after the restart", func() bool {
		for _, c := range be.calls()[before:] {
			if c["event_id"] == "Ev0DOWN001" {
				return true
			}
		}
		return false
	})
	_ = s2
}

// TestInboundPoisonDeadLetter: an event whose backend always fails is dead-lettered after
// -chat-inbound-max-attempts tries, and the stats say so.
func TestInboundPoisonDeadLetter(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	be := startBackend(t, `{}`)
	be.setFailing(-1)
	s := startInbound(t, f, be, nil)
	s.slackPost("/api/v1/slack/event", "application/json", messageEvent("Ev0POISON1", "<@U0BOT0001> ping"), inboundSecret, time.Now(), 0).must(t, 200)
	testwait.Until(t, "the dead letter", func() bool {
		return strings.Contains(string(s.admin("/stats?filter=chat.inbound").body), "chat.inbound.event.dead_lettered: 1")
	})
	if n := len(be.calls()); n != 3 {
		t.Errorf("backend tried %d times, want 3 (-chat-inbound-max-attempts)", n)
	}
	st := string(s.admin("/stats?filter=chat.inbound").body)
	for _, line := range []string{"chat.inbound.event.retried: 2", "chat.inbound.queue.dead_letter: 1"} {
		if !strings.Contains(st, line) {
			t.Errorf("stats lack %q:\n%s", line, st)
		}
	}
}
