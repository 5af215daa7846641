package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/services/chat/slackfake"
)

// TestChatOmnibotV1GrantOpensNoAction: an Omnibot file granting "/api/v1/" (allowed_paths and a
// permission) opens Omnibot's v1 routes and no action: Omnibot answers 403 to
// POST /api/v2/slack/action/..., and so does gantry, naming the path the caller used. Gantry's own
// v1 action path is decided as its v2 path, so that grant does not open it either. (The route's path
// list held /api/v1/chat/action/..., which the prefix matched: the v2 action was allowed and posted.)
func TestChatOmnibotV1GrantOpensNoAction(t *testing.T) {
	f := slackfake.StartWorkspace(t)
	const acl = `
authorization:
  checks:
    - module: "omnibot.authnz:allowed_paths"
      kwargs: {paths: ["/api/v1/", "/api/v2/"]}
    - module: "omnibot.authnz.envoy_checks:envoy_internal_check"
      kwargs: {header: "x-envoy-internal"}
    - module: "omnibot.authnz.envoy_checks:envoy_permissions_check"
      kwargs: {header: "x-envoy-downstream-service-cluster"}
  permissions:
    v1: {methods: [GET, POST], paths: ["/api/v1/"]}
  bindings:
    "reader$": [v1]
`
	s := startChat(t, f, chatTeams+acl, nil)
	const action = `{"action":"chat.postMessage","kwargs":{"channel":"C0GENERAL","text":"hi"}}`
	for _, tc := range []struct{ path, named string }{
		{"/api/v2/slack/action/acme/pingbot", "/api/v2/slack/action/acme/pingbot"},
		{"/api/v2/chat/action/acme/pingbot", "/api/v2/chat/action/acme/pingbot"},
		{"/api/v1/chat/action/acme/pingbot", "/api/v1/chat/action/acme/pingbot (checked as /api/v2/chat/action/acme/pingbot)"},
	} {
		m := errorBody(t, s.chatCall("POST", tc.path, "reader", action), http.StatusForbidden)
		if want := `access denied: caller "reader" may not POST ` + tc.named; m["error"] != want {
			t.Errorf("%s: %v, want %q", tc.path, m, want)
		}
	}
	if n := len(f.Requests("chat.postMessage")); n != 0 {
		t.Fatalf("%d messages posted on a v1 grant, want none", n)
	}
	// What the grant does open, at the paths it names.
	s.chatCall("GET", "/api/v1/slack/get_team/acme", "reader", "").must(t, http.StatusOK)
	s.chatCall("GET", "/api/v1/chat/get_team/acme", "reader", "").must(t, http.StatusOK)
	s.chatCall("POST", "/api/v1/slack/send_im/acme/pingbot/alice@example.com", "reader", `{"action":"chat.postMessage","kwargs":{"text":"hi"}}`).must(t, http.StatusOK)
}

// TestChatPostRateLimitIsPerChannel: Slack's 429 on chat.postMessage to one channel holds that
// channel only, through the gateway: posts to other channels and send_im reach Slack and answer 200,
// the limited channel answers 429 with Retry-After without a call. (One 429 made every post of the
// bot, to any channel and send_im, answer 429 without asking Slack.)
func TestChatPostRateLimitIsPerChannel(t *testing.T) {
	f := slackfake.StartWorkspace(t)
	s := startChat(t, f, chatTeams+chatACL, func(c *stack.Config) { c.Chat.SlackMaxRetryAfter = 2 * time.Second })
	post := func(channel string) response {
		return s.chatCall("POST", "/api/v2/slack/action/acme/pingbot", "echobot", `{"action":"chat.postMessage","kwargs":{"channel":"`+channel+`","text":"hi"}}`)
	}
	f.Inject("chat.postMessage", slackfake.Fault{Status: http.StatusTooManyRequests, RetryAfter: 30, Times: 1})
	if r := post("C0GENERAL"); r.code != http.StatusTooManyRequests || r.header.Get("Retry-After") != "30" {
		t.Fatalf("first post: %d %v %s, want Slack's 429", r.code, r.header, r.body)
	}
	if r := post("G0SECRET1"); r.code != http.StatusOK || !strings.Contains(string(r.body), `"ok":true`) {
		t.Errorf("a post to another channel: %d %s, want it sent", r.code, r.body)
	}
	s.chatCall("POST", "/api/v1/slack/send_im/acme/pingbot/alice@example.com", "echobot", `{"action":"chat.postMessage","kwargs":{"text":"hi"}}`).must(t, http.StatusOK)
	if r := post("C0GENERAL"); r.code != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), `"ok":false`) {
		t.Errorf("the limited channel again: %d %v %s, want 429 with Retry-After", r.code, r.header, r.body)
	}
	if n := len(f.Requests("chat.postMessage")); n != 3 {
		t.Errorf("%d chat.postMessage calls, want 3 (the 429, the other channel, the IM)", n)
	}
}
