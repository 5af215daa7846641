package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/testwait"
	"github.com/gantry-dev/gantry/services/chat/queue/sqsqueue/sqstest"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// twoHandlers is a command handler on "ping" calling good and a regex handler on "ping" calling
// bad: one message reaches both.
func twoHandlers(good, bad string) string {
	return chatTeams + chatACL + fmt.Sprintf(`
handlers:
  message_handlers:
    - match: "ping"
      match_type: "command"
      bots: {acme: [pingbot]}
      callbacks:
        - module: "omnibot.callbacks.network_callbacks:http_callback"
          kwargs: {request_kwargs: {url: %q}}
    - match: "ping"
      match_type: "regex"
      bots: {acme: [pingbot]}
      callbacks:
        - module: "omnibot.callbacks.network_callbacks:http_callback"
          kwargs: {request_kwargs: {url: %q}}
`, good, bad)
}

// TestInboundPerHandlerAttempts: a message matched by two handlers, one of whose backends always
// answers 503. The healthy backend is called once and its reply posted once; only the failing
// handler is retried and dead-lettered. Before, attempts were per event: the healthy handler was
// called, and its reply posted, on every retry of the other.
func TestInboundPerHandlerAttempts(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	good := startBackend(t, `{"actions":[{"action":"chat.postMessage","kwargs":{"text":"pong"}}]}`)
	var badCalls atomic.Int32
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		badCalls.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(bad.Close)
	s := startChat(t, f, twoHandlers(good.URL+"/message", bad.URL+"/message"), func(c *stack.Config) {
		c.Chat.Credentials = inboundCreds
		c.Chat.Inbound.RetryBackoff = 50 * time.Millisecond
		c.Chat.Inbound.MaxAttempts = 3
	})
	s.slackPost("/api/v1/slack/event", "application/json", messageEvent("Ev0TWOHAND", "<@U0BOT0001> ping"), inboundSecret, time.Now(), 0).must(t, 200)
	testwait.Until(t, "the failing handler's dead letter", func() bool {
		return statValue(t, s, "chat.inbound.event.dead_lettered") == 1 && statValue(t, s, "chat.inbound.queue.dead_letter") == 1
	})
	if n := badCalls.Load(); n != 3 {
		t.Errorf("failing backend called %d times, want 3 (-chat-inbound-max-attempts)", n)
	}
	if n := len(good.calls()); n != 1 {
		t.Errorf("healthy backend called %d times, want 1", n)
	}
	if posts := f.Requests("chat.postMessage"); len(posts) != 1 {
		t.Errorf("the healthy handler's reply was posted %d times, want 1", len(posts))
	}
	for name, want := range map[string]int{
		"chat.inbound.event.fanned_out":                1,
		"chat.inbound.handler.command.ping.dispatched": 1,
		"chat.inbound.handler.command.ping.failed":     0,
		"chat.inbound.handler.regex.ping.failed":       3,
		"chat.inbound.event.retried":                   2,
		"chat.inbound.queue.ready":                     0,
		"chat.inbound.queue.in_flight":                 0,
		"chat.inbound.handler.command.ping.action_ok":  1,
		"chat.inbound.handler.regex.ping.action_ok":    0,
		"chat.inbound.handler.regex.ping.dispatched":   0,
	} {
		if got := statValue(t, s, name); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
}

// TestInboundReplyUsesBotTokenOnly: when Slack answers the bot's reply with not_in_channel, it is
// not posted again with the installing user's token (it would appear as that person). Omnibot's
// event path (processor.py _handle_post_message) uses the bot client only; its other actions are
// tried as the user only on missing_scope (_handle_action).
func TestInboundReplyUsesBotTokenOnly(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	be := startBackend(t, `{"actions":[{"action":"chat.postMessage","kwargs":{"text":"pong"}},{"action":"reactions.add","kwargs":{"name":"eyes","channel":"C0GENERAL","timestamp":"1700000000.000100"}}]}`)
	f.Inject("chat.postMessage", slacktest.Fault{Token: e2eBotToken, Error: "not_in_channel", Times: 1})
	f.Inject("reactions.add", slacktest.Fault{Token: e2eBotToken, Error: "missing_scope", Times: 1})
	s := startInbound(t, f, be, nil)
	s.slackPost("/api/v1/slack/event", "application/json", messageEvent("Ev0BOTONLY", "<@U0BOT0001> ping"), inboundSecret, time.Now(), 0).must(t, 200)
	testwait.Until(t, "both actions", func() bool {
		return statValue(t, s, "chat.inbound.handler.command.ping.action_failed")+statValue(t, s, "chat.inbound.handler.command.ping.action_ok") == 2
	})
	posts := f.Requests("chat.postMessage")
	if len(posts) != 1 || posts[0].Token != e2eBotToken {
		for _, p := range posts {
			t.Logf("chat.postMessage with %s", p.Token)
		}
		t.Errorf("the reply was posted %d times; want once, with the bot token", len(posts))
	}
	if n := statValue(t, s, "chat.inbound.handler.command.ping.action_failed"); n != 1 {
		t.Errorf("action_failed = %d, want 1 (the reply Slack refused)", n)
	}
	reacts := f.Requests("reactions.add")
	if len(reacts) != 2 || reacts[0].Token != e2eBotToken || reacts[1].Token != e2eUserToken {
		t.Errorf("reactions.add calls %+v, want the bot token, then the user token after missing_scope", reacts)
	}
}

// heldBackend answers {} to each call once release is closed, and records the event ids it got.
type heldBackend struct {
	*httptest.Server
	release chan struct{}
	mu      sync.Mutex
	ids     []string
}

func startHeldBackend(t *testing.T) *heldBackend {
	b := &heldBackend{release: make(chan struct{})}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p map[string]any
		_ = json.NewDecoder(r.Body).Decode(&p)
		id, _ := p["event_id"].(string)
		b.mu.Lock()
		b.ids = append(b.ids, id)
		b.mu.Unlock()
		select {
		case <-b.release:
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, "{}")
	}))
	t.Cleanup(func() {
		select {
		case <-b.release:
		default:
			close(b.release)
		}
		b.Close()
	})
	return b
}

func (b *heldBackend) got() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.ids...)
}

// TestInboundQueueBounded: with -chat-inbound-max-depth 2 and one dispatcher held by a slow
// backend, a third event is answered 503 with a message saying why (Slack retries it), the stats
// show the depth and the oldest request's age, and Slack's retry once the queue drained is
// delivered, once. Before, the queue had no bound.
func TestInboundQueueBounded(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	be := startHeldBackend(t)
	s := startChat(t, f, chatTeams+chatACL+inboundHandlers(be.URL), func(c *stack.Config) {
		c.Chat.Credentials = inboundCreds
		c.Chat.Inbound.Workers = 1
		c.Chat.Inbound.MaxDepth = 2
	})
	post := func(id string, retry int) response {
		return s.slackPost("/api/v1/slack/event", "application/json", messageEvent(id, "<@U0BOT0001> ping"), inboundSecret, time.Now(), retry)
	}
	post("Ev0BOUND01", 0).must(t, 200)
	testwait.Until(t, "the first event at the backend", func() bool { return len(be.got()) == 1 })
	post("Ev0BOUND02", 0).must(t, 200)
	r := post("Ev0BOUND03", 0)
	if r.code != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "queue is full") || !strings.Contains(string(r.body), "max-depth 2") {
		t.Fatalf("third event: %d %s, want 503 saying the queue is full", r.code, r.body)
	}
	for name, want := range map[string]int{"chat.inbound.queue.depth": 2, "chat.inbound.event.queue_full": 1, "chat.inbound.event.queued": 2} {
		if got := statValue(t, s, name); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
	if !strings.Contains(string(s.admin("/stats?filter=chat.inbound.queue").body), "chat.inbound.queue.oldest_age_seconds: ") {
		t.Error("stats lack chat.inbound.queue.oldest_age_seconds")
	}
	close(be.release)
	testwait.Until(t, "the queue to drain", func() bool { return statValue(t, s, "chat.inbound.queue.depth") == 0 })
	post("Ev0BOUND03", 1).must(t, 200) // Slack's retry
	testwait.Until(t, "the retried event at the backend", func() bool { return len(be.got()) == 3 })
	if got := be.got(); !slices.Equal(got, []string{"Ev0BOUND01", "Ev0BOUND02", "Ev0BOUND03"}) {
		t.Errorf("backend got %v", got)
	}
}

// TestInboundMaxAge: a request that waited longer than -chat-inbound-max-age is not delivered (a
// reply that late confuses more than it helps) but moved to the dead letter, where `gantry queue`
// can redrive it.
func TestInboundMaxAge(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	be := startHeldBackend(t)
	s := startChat(t, f, chatTeams+chatACL+inboundHandlers(be.URL), func(c *stack.Config) {
		c.Chat.Credentials = inboundCreds
		c.Chat.Inbound.Workers = 1
		c.Chat.Inbound.MaxAge = time.Second
	})
	post := func(id string) {
		s.slackPost("/api/v1/slack/event", "application/json", messageEvent(id, "<@U0BOT0001> ping"), inboundSecret, time.Now(), 0).must(t, 200)
	}
	post("Ev0AGE0001")
	testwait.Until(t, "the first event at the backend", func() bool { return len(be.got()) == 1 })
	post("Ev0AGE0002")
	time.Sleep(1500 * time.Millisecond) // the second event waits past -chat-inbound-max-age
	close(be.release)
	testwait.Until(t, "the expired event in the dead letter", func() bool {
		return statValue(t, s, "chat.inbound.event.expired") == 1 && statValue(t, s, "chat.inbound.queue.dead_letter") == 1
	})
	if got := be.got(); len(got) != 1 {
		t.Errorf("backend got %v, want only the first event", got)
	}
}

// TestInboundSQSWithoutReceiveCount: an SQS look-alike that returns no ApproximateReceiveCount
// (moto, older servers) still sees a failing event dead-lettered after -chat-inbound-max-attempts,
// by gantry's own count. Before, every receive was attempt 1: it was retried for ever.
func TestInboundSQSWithoutReceiveCount(t *testing.T) {
	sqsEnv(t)
	fake := sqstest.NewServer()
	t.Cleanup(fake.Close)
	fake.SetReceiveCounts(sqstest.CountsNever)
	queueURL, deadURL := fake.CreateQueue("chat-nocount"), fake.CreateQueue("chat-nocount-dead")
	f := slacktest.StartWorkspace(t)
	be := startBackend(t, `{}`)
	be.setFailing(-1)
	s := startInbound(t, f, be, sqsMode(fake, queueURL, deadURL))
	s.slackPost("/api/v1/slack/event", "application/json", messageEvent("Ev0NOCOUNT", "<@U0BOT0001> ping"), inboundSecret, time.Now(), 0).must(t, 200)
	testwait.Until(t, "the dead letter", func() bool { return len(fake.Bodies(deadURL)) == 1 })
	if n := len(be.calls()); n != 3 {
		t.Errorf("backend tried %d times, want 3 (-chat-inbound-max-attempts)", n)
	}
}

// TestInboundSQSTooLarge: in SQS mode an event over SQS's 256 KiB message limit is answered 400
// with a message naming the limit, not 503 (which Slack would retry in vain).
func TestInboundSQSTooLarge(t *testing.T) {
	sqsEnv(t)
	fake := sqstest.NewServer()
	t.Cleanup(fake.Close)
	queueURL, deadURL := fake.CreateQueue("chat-large"), fake.CreateQueue("chat-large-dead")
	f := slacktest.StartWorkspace(t)
	be := startBackend(t, `{}`)
	s := startInbound(t, f, be, sqsMode(fake, queueURL, deadURL))
	r := s.slackPost("/api/v1/slack/event", "application/json", messageEvent("Ev0LARGE01", "<@U0BOT0001> ping "+strings.Repeat("x", 300*1024)), inboundSecret, time.Now(), 0)
	if r.code != http.StatusBadRequest || !strings.Contains(string(r.body), "256 KiB") {
		t.Fatalf("300 KB event: %d %s, want 400 naming SQS's 256 KiB limit", r.code, r.body)
	}
	if got := statValue(t, s, "chat.inbound.event.too_large"); got != 1 {
		t.Errorf("chat.inbound.event.too_large = %d, want 1", got)
	}
}
