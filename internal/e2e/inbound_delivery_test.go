package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/services/chat/slackfake"
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
	f := slackfake.StartWorkspace(t)
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
	waitFor(t, "the failing handler's dead letter", 20*time.Second, func() bool {
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
	f := slackfake.StartWorkspace(t)
	be := startBackend(t, `{"actions":[{"action":"chat.postMessage","kwargs":{"text":"pong"}},{"action":"reactions.add","kwargs":{"name":"eyes","channel":"C0GENERAL","timestamp":"1700000000.000100"}}]}`)
	f.Inject("chat.postMessage", slackfake.Fault{Token: e2eBotToken, Error: "not_in_channel", Times: 1})
	f.Inject("reactions.add", slackfake.Fault{Token: e2eBotToken, Error: "missing_scope", Times: 1})
	s := startInbound(t, f, be, nil)
	s.slackPost("/api/v1/slack/event", "application/json", messageEvent("Ev0BOTONLY", "<@U0BOT0001> ping"), inboundSecret, time.Now(), 0).must(t, 200)
	waitFor(t, "both actions", 10*time.Second, func() bool {
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
