package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/testwait"
	"github.com/gantry-dev/gantry/services/chat/queue/sqsqueue/sqstest"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// reactionHandlers is a reaction handler of pingbot calling url.
func reactionHandlers(url string) string {
	return fmt.Sprintf(`
handlers:
  message_handlers:
    - match: "white_check_mark"
      match_type: "reaction"
      bots: {acme: [pingbot]}
      callbacks:
        - module: "omnibot.callbacks.network_callbacks:http_callback"
          kwargs: {request_kwargs: {url: %q}}
`, url+"/reaction")
}

// reactionEvent is Slack's reaction_added event on a message in C0GENERAL; itemUser "" leaves
// item_user out, as Slack does for some items.
func reactionEvent(eventID, itemUser string) string {
	ev := map[string]any{"type": "reaction_added", "user": "U0ALICE01", "reaction": "white_check_mark", "event_ts": "1700000001.000300",
		"item": map[string]any{"type": "message", "channel": "C0GENERAL", "ts": "1700000000.000100"}}
	if itemUser != "" {
		ev["item_user"] = itemUser
	}
	b, _ := json.Marshal(map[string]any{
		"team_id": "T0FAKE001", "api_app_id": "A0PING001", "type": "event_callback",
		"event_id": eventID, "event_time": time.Now().Unix(), "event": ev,
	})
	return string(b)
}

// TestInboundReactionWithoutHistoryScope: a bot whose token may not read channel history (Slack
// answers conversations.history missing_scope), as one installed with the scopes Omnibot needed.
// A reaction whose event names the bot as item_user reaches its handler without asking Slack, as
// in Omnibot; one without item_user is dropped, and the history is never read with the installing
// person's token. Before, gantry always read the history, again with the user's token on
// missing_scope, and dropped the reaction: the handler was never called.
func TestInboundReactionWithoutHistoryScope(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	f.Inject("conversations.history", slacktest.Fault{Token: e2eBotToken, Error: "missing_scope"})
	be := startBackend(t, `{}`)
	s := startChat(t, f, chatTeams+chatACL+reactionHandlers(be.URL), func(c *stack.Config) {
		c.Chat.Credentials = inboundCreds
	})
	s.slackPost("/api/v1/slack/event", "application/json", reactionEvent("Ev0REACT01", "U0BOT0001"), inboundSecret, time.Now(), 0).must(t, 200)
	s.slackPost("/api/v1/slack/event", "application/json", reactionEvent("Ev0REACT02", ""), inboundSecret, time.Now(), 0).must(t, 200)
	testwait.Until(t, "both reactions dispatched", func() bool {
		return statValue(t, s, "chat.inbound.event.dispatched") == 2
	})
	if calls := be.calls(); len(calls) != 1 {
		t.Errorf("reaction handler called %d times, want once (the reaction whose item_user is the bot)", len(calls))
	}
	if n := statValue(t, s, "chat.inbound.event.reaction_dropped"); n != 1 {
		t.Errorf("reaction_dropped = %d, want 1 (the reaction without item_user)", n)
	}
	hist := f.Requests("conversations.history")
	if len(hist) != 1 {
		t.Errorf("conversations.history asked %d times, want once (for the reaction without item_user)", len(hist))
	}
	for _, r := range hist {
		if r.Token != e2eBotToken {
			t.Errorf("conversations.history read with %s, want the bot's token only", r.Token)
		}
	}
}

// TestInboundDeadLetterHoldsNoToken: Slack's verification token, which every event, slash command
// and component carries, is checked on arrival and not stored: the queue's messages, and so its
// dead letter (what `gantry queue list -json` shows), hold the request without it. Before, the dead
// letter kept "token".
func TestInboundDeadLetterHoldsNoToken(t *testing.T) {
	sqsEnv(t)
	fake := sqstest.NewServer()
	t.Cleanup(fake.Close)
	queueURL, deadURL := fake.CreateQueue("chat-token"), fake.CreateQueue("chat-token-dead")
	f := slacktest.StartWorkspace(t)
	be := startBackend(t, `{}`)
	be.setFailing(-1)
	s := startInbound(t, f, be, sqsMode(fake, queueURL, deadURL))
	body := messageEvent("Ev0TOKEN01", "<@U0BOT0001> ping")
	if !strings.Contains(body, `"token":"legacy"`) {
		t.Fatalf("the event should carry Slack's token: %s", body)
	}
	s.slackPost("/api/v1/slack/event", "application/json", body, inboundSecret, time.Now(), 0).must(t, 200)
	testwait.Until(t, "the dead letter", func() bool { return len(fake.Bodies(deadURL)) == 1 })
	dead := fake.Bodies(deadURL)[0]
	if strings.Contains(dead, "legacy") || strings.Contains(dead, `"token"`) {
		t.Errorf("the dead letter keeps Slack's token: %s", dead)
	}
	if !strings.Contains(dead, "Ev0TOKEN01") {
		t.Errorf("the dead letter lost the request: %s", dead)
	}
}
