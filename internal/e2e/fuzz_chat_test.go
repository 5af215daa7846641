package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// chatFuzzStack runs the stack with the chat service on a healthy fake Slack workspace and the ACL
// that lets the caller echobot through on every chat route, so fuzzed requests reach the chat
// service's parsing and Slack calls rather than stopping at the access check.
//
// The invariant is fuzzSend's: no 5xx but 501, every error JSON. The chat service documents 502 and
// 504 for a Slack that fails or does not answer (and 429 for its rate limits), but this fake is
// healthy and never rate-limits, so any of those here would mean the chat service turned bad input
// into a Slack failure (or made Slack fail) — a bug, not a documented answer.
func chatFuzzStack(f *testing.F) *testStack {
	fake := slacktest.StartWorkspace(f)
	return startChat(f, fake, chatTeams+chatACL, nil)
}

// chatCaller is the identity every fuzzed chat request carries.
var chatCaller = http.Header{"X-Proxy-Downstream-Service-Cluster": {"echobot"}}

// chatBodyRoutes are the chat routes that read a request body.
var chatBodyRoutes = []struct{ method, path string }{
	{"POST", "/api/v1/chat/send_im/acme/pingbot/alice@example.com"},
	{"POST", "/api/v1/chat/send_im/acme/pingbot/gone@example.com"},
	{"POST", "/api/v2/chat/action/acme/pingbot"},
	{"POST", "/api/v1/chat/action/acme/pingbot"},
	{"POST", "/api/v1/slack/send_im/acme/pingbot/alice@example.com"},
	{"POST", "/api/v2/slack/action/acme/pingbot"},
}

// FuzzChatBodies sends arbitrary bytes as the body of send_im and action (v1, v2 and Omnibot's paths), as JSON and as
// a form, through the gateway to the chat service and on to the fake Slack.
func FuzzChatBodies(f *testing.F) {
	seeds := []string{
		`{"action":"chat.postMessage","kwargs":{"channel":"C0GENERAL","text":"hi"}}`,
		`{"action":"chat.postMessage","kwargs":{"text":"@alice see #general, @here","omnibot_parse":{"text":["users","channels","specials"]}}}`,
		`{"action":"chat.postMessage","kwargs":{"channel":"C0GENERAL"},"omnibot_parse":{"text":["users"]}}`,
		`{"action":"chat.postMessage","kwargs":{"omnibot_parse":{"nope":["users"]}}}`,
		`{"action":"chat.postMessage","kwargs":{"omnibot_parse":{"text":"users"}}}`,
		`{"action":"chat.postMessage","kwargs":{"text":1,"omnibot_parse":{"text":["bogus"]}}}`,
		`{"action":"reactions.add","kwargs":{"name":"tada","token":"xoxb-other","blocks":[{"type":"section"}],"n":1.5,"b":true,"z":null}}`,
		`{"action":"../../auth.test","kwargs":{}}`, `{"action":"auth.test?x=1#y","kwargs":{}}`, `{"action":"","kwargs":{}}`,
		`{"action":"` + strings.Repeat("a", 5000) + `","kwargs":{}}`, `{"action":"chat.postMessage"}`, `{"kwargs":{}}`,
		`{"action":1,"kwargs":[]}`, `{"action":"auth.test","kwargs":"x"}`, `[]`, `null`, `""`, `{`, "\xff", `{"action":"\u0000"}`,
		"action=auth.test&kwargs=%7B%7D", strings.Repeat("[", 1000), `{"kwargs":` + strings.Repeat(`{"a":`, 200) + `1` + strings.Repeat("}", 201) + `}`,
	}
	for i, seed := range seeds {
		for r := range chatBodyRoutes {
			if (i+r)%2 == 0 {
				f.Add(uint8(r), []byte(seed), i%3 == 0)
			}
		}
	}
	s := chatFuzzStack(f)
	f.Fuzz(func(t *testing.T, route uint8, body []byte, form bool) {
		r := chatBodyRoutes[int(route)%len(chatBodyRoutes)]
		ct := "application/json"
		if form {
			ct = "application/x-www-form-urlencoded"
		}
		s.fuzzSendAs(t, r.method, r.path, ct, chatCaller, body)
	})
}

// chatParamRoutes are the chat routes with path parameters; {p} takes the fuzzed value.
var chatParamRoutes = []struct{ method, path, body string }{
	{"GET", "/api/v1/chat/get_team/{p}", ""},
	{"GET", "/api/v1/chat/get_user/acme/pingbot/{p}", ""},
	{"GET", "/api/v1/chat/get_user/{p}/pingbot/alice@example.com", ""},
	{"GET", "/api/v1/chat/get_channel/acme/pingbot/{p}", ""},
	{"GET", "/api/v1/chat/get_channel/acme/{p}/general", ""},
	{"GET", "/api/v1/chat/get_ims/acme/{p}", ""},
	{"GET", "/api/v1/chat/get_ims/{p}/pingbot", ""},
	{"POST", "/api/v1/chat/send_im/acme/pingbot/{p}", `{"action":"chat.postMessage","kwargs":{"text":"hi"}}`},
	{"POST", "/api/v2/chat/action/{p}/pingbot", `{"action":"auth.test","kwargs":{}}`},
	{"POST", "/api/v2/chat/action/acme/{p}", `{"action":"auth.test","kwargs":{}}`},
	{"POST", "/api/v1/chat/action/acme/{p}", `{"action":"auth.test","kwargs":{}}`},
	// Omnibot's spellings of the same routes.
	{"GET", "/api/v1/slack/get_user/acme/pingbot/{p}", ""},
	{"GET", "/api/v1/slack/get_channel/acme/pingbot/{p}", ""},
	{"POST", "/api/v1/slack/send_im/acme/pingbot/{p}", `{"action":"chat.postMessage","kwargs":{"text":"hi"}}`},
	{"POST", "/api/v2/slack/action/acme/{p}", `{"action":"auth.test","kwargs":{}}`},
}

// FuzzChatPaths sends arbitrary path parameters (raw, so escapes, dots and NULs arrive as sent) and
// query strings to every chat route.
func FuzzChatPaths(f *testing.F) {
	params := []string{"acme", "pingbot", "alice@example.com", "ALICE@EXAMPLE.COM", "gone@example.com", "general", "%23general", "#general",
		"C0GENERAL", "U0ALICE01", "D0ALICE01", "G0SECRET1", "..", "%2e%2e", "..%2f..%2fauth.test", "%00", "%ff", "a%20b", "%25",
		strings.Repeat("a", 600), "@", "x@", "@x", "-1", "U0NOBODY1"}
	queries := []string{"", "a=1", "token=xoxb-other", "cursor=1&limit=-1", "team_name=acme&bot_name=lonely", "a=1&a=2"}
	for i, p := range params {
		f.Add(uint8(i), p, queries[i%len(queries)])
	}
	s := chatFuzzStack(f)
	f.Fuzz(func(t *testing.T, route uint8, param, query string) {
		if strings.ContainsAny(param, "/?#") {
			// Another route or a query: covered by the route and query inputs.
			return
		}
		if strings.ContainsFunc(param+query, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			// Not a request target: net/http refuses the request line before any handler runs.
			return
		}
		r := chatParamRoutes[int(route)%len(chatParamRoutes)]
		path := strings.ReplaceAll(r.path, "{p}", param)
		if query != "" {
			path += "?" + query
		}
		var body []byte
		ct := ""
		if r.body != "" {
			body, ct = []byte(r.body), "application/json"
		}
		s.fuzzSendAs(t, r.method, path, ct, chatCaller, body)
	})
}
