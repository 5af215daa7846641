package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// TestChatBotUsersAreNotFound: a bot's email is 404 through the live users.lookupByEmail path (as in
// Omnibot, whose cache never holds bots), and @botname stays plain text afterwards.
func TestChatBotUsersAreNotFound(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	f.AddUser(slacktest.User{ID: "U0DEPLOYB", Name: "deploybot", Email: "deploybot@example.com", IsBot: true})
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
	f := slacktest.StartWorkspace(t)
	s := startChat(t, f, chatTeams+chatACL, func(c *stack.Config) {
		c.Gateway.UpstreamTimeout = 20 * time.Second
		c.Chat.SlackAttemptTimeout = 300 * time.Millisecond
		c.Chat.SlackRetries = 2
	})
	f.Inject("chat.postMessage", slacktest.Fault{Delay: time.Hour})
	errorBody(t, s.chatCall("POST", "/api/v2/chat/action/acme/pingbot", "echobot", `{"action":"chat.postMessage","kwargs":{"channel":"C0GENERAL","text":"deployed"}}`), 504)
	errorBody(t, s.chatCall("POST", "/api/v1/chat/send_im/acme/pingbot/alice@example.com", "echobot", `{"action":"chat.postMessage","kwargs":{"text":"deployed"}}`), 504)
	if n := len(f.Requests("chat.postMessage")); n != 2 {
		t.Errorf("two slow posts reached Slack %d times, want 2 (one each)", n)
	}
	f.Reset()
	f.Inject("users.lookupByEmail", slacktest.Fault{Delay: time.Hour, Times: 1})
	s.chatCall("GET", "/api/v1/chat/get_user/acme/pingbot/bob@example.com", "echobot", "").must(t, 200)
	if n := len(f.Requests("users.lookupByEmail")); n != 2 {
		t.Errorf("users.lookupByEmail called %d times, want 2 (the slow attempt retried)", n)
	}
}

// TestChatLookupStampede: a thousand concurrent get_user of one uncached email through the gateway
// make one users.lookupByEmail; an unknown email asked again within -chat-negative-cache-ttl is not
// asked of Slack again.
func TestChatLookupStampede(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	s := startChat(t, f, chatTeams+chatACL, nil)
	f.Inject("users.lookupByEmail", slacktest.Fault{Delay: 300 * time.Millisecond, Times: 1})
	const n = 1000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			r := s.chatFault(t, "GET", "/api/v1/chat/get_user/acme/pingbot/bob@example.com", "")
			if r.code != 200 {
				errs <- fmt.Errorf("%d %s", r.code, r.body)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if calls := len(f.Requests("users.lookupByEmail")); calls != 1 {
		t.Errorf("%d concurrent lookups of one email made %d Slack calls, want 1", n, calls)
	}
	f.Reset()
	for range 5 {
		errorBody(t, s.chatCall("GET", "/api/v1/chat/get_user/acme/pingbot/nobody@example.com", "echobot", ""), 404)
	}
	if calls := len(f.Requests("users.lookupByEmail")); calls != 1 {
		t.Errorf("an unknown email asked 5 times made %d Slack calls, want 1", calls)
	}
}

// TestChatChannelByIDWhileSlackIsDown: a channel cached under its name is served by id from the
// cache, without Slack, also while Slack is down.
func TestChatChannelByIDWhileSlackIsDown(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	s := startChat(t, f, chatTeams+chatACL, nil)
	s.chatCall("GET", "/api/v1/chat/get_channel/acme/pingbot/general", "echobot", "").must(t, 200)
	for _, m := range []string{"conversations.info", "conversations.list"} {
		f.Inject(m, slacktest.Fault{Status: 503})
	}
	f.Reset()
	m := s.chatCall("GET", "/api/v1/chat/get_channel/acme/pingbot/C0GENERAL", "echobot", "").must(t, 200)
	if ch, _ := m["channel"].(map[string]any); ch["id"] != "C0GENERAL" || ch["name"] != "general" {
		t.Errorf("by id: %v", m)
	}
	if n := len(f.Requests("")); n != 0 {
		t.Errorf("a cached channel by id made %d Slack calls, want 0", n)
	}
}
