package e2e

import (
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/services/chat/slackfake"
)

// TestChatBotUsersAreNotFound: a bot's email is 404 through the live users.lookupByEmail path (as in
// Omnibot, whose cache never holds bots), and @botname stays plain text afterwards.
func TestChatBotUsersAreNotFound(t *testing.T) {
	f := slackfake.StartWorkspace(t)
	f.AddUser(slackfake.User{ID: "U0DEPLOYB", Name: "deploybot", Email: "deploybot@example.com", IsBot: true})
	s := startChat(t, f, chatTeams+chatACL, nil)
	if m := errorBody(t, s.chatCall("GET", "/api/v1/chat/get_user/acme/pingbot/deploybot@example.com", "echobot", ""), 404); m["error"] != "user not found" {
		t.Errorf("get_user of a bot: %v", m)
	}
	errorBody(t, s.chatCall("POST", "/api/v1/chat/send_im/acme/pingbot/deploybot@example.com", "echobot", `{"action":"chat.postMessage","kwargs":{"text":"x"}}`), 404)
	s.chatCall("GET", "/api/v1/chat/get_user/acme/pingbot/bob@example.com", "echobot", "").must(t, 200)
	f.Reset()
	s.chatCall("POST", "/api/v2/chat/action/acme/pingbot", "echobot", `{"action":"chat.postMessage","kwargs":{"channel":"C0GENERAL","text":"@deploybot and @bob",
		"omnibot_parse":{"text":["users"]}}}`).must(t, 200)
	if got := f.Requests("chat.postMessage")[0].Form.Get("text"); got != "@deploybot and <@U0BOB0001|bob>" {
		t.Errorf("posted %q: a bot became a mention", got)
	}
}

// TestChatSlowSlackPostsOnce: a chat.postMessage whose answer is slower than the attempt timeout is
// sent once and answered 504 (it may have been posted), instead of being retried into 2 or 3 posts.
// A lookup on the same slow Slack is still retried.
func TestChatSlowSlackPostsOnce(t *testing.T) {
	f := slackfake.StartWorkspace(t)
	s := startChat(t, f, chatTeams+chatACL, func(c *stack.Config) {
		c.Gateway.UpstreamTimeout = 20 * time.Second
		c.Chat.SlackAttemptTimeout = 300 * time.Millisecond
		c.Chat.SlackRetries = 2
	})
	f.Inject("chat.postMessage", slackfake.Fault{Delay: time.Hour})
	errorBody(t, s.chatCall("POST", "/api/v2/chat/action/acme/pingbot", "echobot", `{"action":"chat.postMessage","kwargs":{"channel":"C0GENERAL","text":"deployed"}}`), 504)
	errorBody(t, s.chatCall("POST", "/api/v1/chat/send_im/acme/pingbot/alice@example.com", "echobot", `{"action":"chat.postMessage","kwargs":{"text":"deployed"}}`), 504)
	if n := len(f.Requests("chat.postMessage")); n != 2 {
		t.Errorf("two slow posts reached Slack %d times, want 2 (one each)", n)
	}
	f.Reset()
	f.Inject("users.lookupByEmail", slackfake.Fault{Delay: time.Hour, Times: 1})
	s.chatCall("GET", "/api/v1/chat/get_user/acme/pingbot/bob@example.com", "echobot", "").must(t, 200)
	if n := len(f.Requests("users.lookupByEmail")); n != 2 {
		t.Errorf("users.lookupByEmail called %d times, want 2 (the slow attempt retried)", n)
	}
}
