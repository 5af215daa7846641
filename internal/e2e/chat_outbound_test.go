package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// TestChatOmnibotV1GrantOpensNoAction: an Omnibot file granting "/api/v1/" (allowed_paths and a
// permission) opens Omnibot's v1 routes and no action: Omnibot answers 403 to
// POST /api/v2/slack/action/..., and so does gantry, naming the path the caller used. Gantry's own
// v1 action path is decided as its v2 path, so that grant does not open it either. (The route's path
// list held /api/v1/chat/action/..., which the prefix matched: the v2 action was allowed and posted.)
func TestChatOmnibotV1GrantOpensNoAction(t *testing.T) {
	f := slacktest.StartWorkspace(t)
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
	f := slacktest.StartWorkspace(t)
	s := startChat(t, f, chatTeams+chatACL, func(c *stack.Config) { c.Chat.SlackMaxRetryAfter = 2 * time.Second })
	post := func(channel string) response {
		return s.chatCall("POST", "/api/v2/slack/action/acme/pingbot", "echobot", `{"action":"chat.postMessage","kwargs":{"channel":"`+channel+`","text":"hi"}}`)
	}
	f.Inject("chat.postMessage", slacktest.Fault{Status: http.StatusTooManyRequests, RetryAfter: 30, Times: 1})
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

// TestChatEvery400OfTheActionRoutesSaysNotOK sweeps the 4xx answers of the action routes (action and
// send_im, at every spelling): every 400, whether the gateway gives it before the service sees the
// call (a body that does not decode, kwargs a string, action a number, a body of [], a path that is
// not UTF-8, too many query parameters) or the service does, carries "ok": false beside its error, as
// Omnibot's and Slack's 400s do; 429 is Slack's own ok:false body; 403, 404, 405 and 413 keep their
// JSON error bodies (Omnibot's 404s have no ok). (The gateway's 400s had no "ok".)
func TestChatEvery400OfTheActionRoutesSaysNotOK(t *testing.T) {
	forEachSpelling(t, testChatEvery400OfTheActionRoutesSaysNotOK)
}

func testChatEvery400OfTheActionRoutesSaysNotOK(t *testing.T, sp pathSpelling) {
	f := slacktest.StartWorkspace(t)
	s := startChat(t, f, chatTeams+chatACL, func(c *stack.Config) { c.Gateway.MaxBodyBytes = 4096 })
	action, sendIM := sp("/api/v2/chat/action/acme/pingbot"), sp("/api/v1/chat/send_im/acme/pingbot/alice@example.com")
	tooManyParams := "?" + strings.Repeat("a=1&", 200)
	for _, path := range []string{action, sendIM} {
		for _, tc := range []struct{ name, path, body string }{
			{"kwargs a string", path, `{"action":"chat.postMessage","kwargs":"text"}`},
			{"action a number", path, `{"action":3,"kwargs":{}}`},
			{"a body of []", path, `[]`},
			{"a body of a string", path, `"chat.postMessage"`},
			{"a body of null", path, `null`},
			{"truncated JSON", path, `{"action":`},
			{"data after the JSON value", path, `{"action":"chat.postMessage","kwargs":{}} {}`},
			{"not JSON", path, `action=chat.postMessage`},
			{"omnibot_parse a string", path, `{"action":"chat.postMessage","kwargs":{"text":"x"},"omnibot_parse":"text"}`},
			{"kwargs a list", path, `{"action":"chat.postMessage","kwargs":[]}`},
			{"no action", path, `{"kwargs":{}}`},
			{"no kwargs", path, `{"action":"chat.postMessage"}`},
			{"empty body", path, ``},
			{"action not a method name", path, `{"action":"../auth.test","kwargs":{}}`},
			{"too many query parameters", path + tooManyParams, `{"action":"chat.postMessage","kwargs":{}}`},
			{"a path that is not UTF-8", strings.Replace(path, "pingbot", "ping%ffbot", 1), `{"action":"chat.postMessage","kwargs":{}}`},
		} {
			r := s.chatCall("POST", tc.path, "echobot", tc.body)
			if r.code != http.StatusBadRequest {
				t.Errorf("%s on %s: %d %s, want 400", tc.name, path, r.code, r.body)
				continue
			}
			if m := errorBody(t, r, http.StatusBadRequest); m["ok"] != false {
				t.Errorf("%s on %s: %s, want \"ok\": false", tc.name, path, r.body)
			} else if strings.HasPrefix(tc.name, "a body of") && m["error"] != "invalid JSON request body: the body must be a JSON object" {
				t.Errorf("%s on %s: %v, want the error to say the body must be an object", tc.name, path, m["error"])
			} else if path == sendIM && tc.name != "a path that is not UTF-8" && (m["team_name"] != "acme" || m["bot_name"] != "pingbot" || m["email"] != "alice@example.com") {
				t.Errorf("%s on %s: %v lacks what was asked for", tc.name, path, m)
			}
		}
	}
	if n := len(f.Requests("")); n != 0 {
		t.Errorf("refused payloads made %d Slack calls", n)
	}
	// Slack's own not-ok answer is a 400 that says so.
	if m := errorBody(t, s.chatCall("POST", action, "echobot", `{"action":"chat.postMessage","kwargs":{"channel":"C0NOWHERE","text":"x"}}`), http.StatusBadRequest); m["ok"] != false {
		t.Errorf("Slack's not ok: %v", m)
	}
	// The other 4xx keep their bodies.
	for _, tc := range []struct {
		name, method, path, caller, body string
		want                             int
	}{
		{"denied", "POST", action, "mallory", `{"action":"chat.postMessage","kwargs":{}}`, http.StatusForbidden},
		{"unknown bot", "POST", strings.Replace(action, "pingbot", "nope", 1), "echobot", `{"action":"chat.postMessage","kwargs":{}}`, http.StatusNotFound},
		{"wrong method", "GET", action, "echobot", ``, http.StatusMethodNotAllowed},
		{"too large", "POST", action, "echobot", `{"action":"chat.postMessage","kwargs":{"text":"` + strings.Repeat("x", 5000) + `"}}`, http.StatusRequestEntityTooLarge},
	} {
		if m := errorBody(t, s.chatCall(tc.method, tc.path, tc.caller, tc.body), tc.want); m["ok"] != nil {
			t.Errorf("%s: %v, want no ok", tc.name, m)
		}
	}
	// A GET route's 400 is not an action's: no ok.
	if r := s.chatCall("GET", sp("/api/v1/chat/get_team/ac%ffme"), "echobot", ""); r.code != http.StatusBadRequest || strings.Contains(string(r.body), `"ok"`) {
		t.Errorf("a lookup's 400: %d %s, want 400 without ok", r.code, r.body)
	}
}
