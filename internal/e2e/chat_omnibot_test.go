package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/services/chat/slackfake"
)

// omnibotACL is an authorization section as an Omnibot deployment has it, written for Omnibot's paths:
// readers may use every v1 route (lookups and send_im), writers the action route of one bot.
const omnibotACL = `
authorization:
  checks:
    - module: "omnibot.authnz:allowed_paths"
      kwargs: {paths: ["/api/v1/slack/", "/api/v2/slack/action/"]}
    - module: "omnibot.authnz.envoy_checks:envoy_internal_check"
      kwargs: {header: "x-envoy-internal"}
    - module: "omnibot.authnz.envoy_checks:envoy_permissions_check"
      kwargs: {header: "x-envoy-downstream-service-cluster"}
  permissions:
    v1_routes: {methods: [GET, POST], paths: ["/api/v1/slack/"]}
    notify: {methods: [POST], paths: ["/api/v2/slack/action/acme/pingbot$"]}
  bindings:
    "reader$": [v1_routes]
    "notifier$": [v1_routes, notify]
`

// TestChatOmnibotPaths: every Omnibot client URL works unchanged, and an Omnibot access-control file
// grants exactly what it granted in Omnibot, whichever spelling a request uses.
func TestChatOmnibotPaths(t *testing.T) {
	f := slackfake.StartWorkspace(t)
	accessLog := filepath.Join(t.TempDir(), "access.log")
	s := startChat(t, f, chatTeams+omnibotACL, func(c *stack.Config) { c.Gateway.AccessLog = accessLog })
	const action = `{"action":"chat.postMessage","kwargs":{"channel":"C0GENERAL","text":"hi"}}`

	// Omnibot's routes, as its clients call them.
	for _, tc := range []struct{ method, path, body, want string }{
		{"GET", "/api/v1/slack/get_team/acme", "", `"team_id":"T0FAKE001"`},
		{"GET", "/api/v1/slack/get_user/acme/pingbot/alice@example.com", "", `"user_id":"U0ALICE01"`},
		{"GET", "/api/v1/slack/get_channel/acme/pingbot/general", "", `"id":"C0GENERAL"`},
		{"GET", "/api/v1/slack/get_ims/acme/pingbot", "", `"id":"D0ALICE01"`},
		{"POST", "/api/v1/slack/send_im/acme/pingbot/alice@example.com", `{"action":"chat.postMessage","kwargs":{"text":"hi"}}`, `"channel":"D0ALICE01"`},
		{"POST", "/api/v2/slack/action/acme/pingbot", action, `"ok":true`},
	} {
		r := s.chatCall(tc.method, tc.path, "notifier", tc.body)
		if r.code != 200 || !strings.Contains(string(r.body), tc.want) {
			t.Errorf("%s %s: %d %s, want 200 with %s", tc.method, tc.path, r.code, r.body, tc.want)
		}
	}

	// The checks apply to the route, not to the spelling: a reader's Omnibot grant of /api/v1/slack/
	// opens the lookups and send_im under both spellings, and never the action route (which Omnibot
	// serves at v2 only), whichever of its three paths is asked.
	for _, path := range []string{"/api/v1/slack/get_team/acme", "/api/v1/chat/get_team/acme"} {
		s.chatCall("GET", path, "reader", "").must(t, 200)
	}
	for _, path := range []string{"/api/v1/slack/send_im/acme/pingbot/alice@example.com", "/api/v1/chat/send_im/acme/pingbot/alice@example.com"} {
		s.chatCall("POST", path, "reader", `{"action":"chat.postMessage","kwargs":{"text":"hi"}}`).must(t, 200)
	}
	f.Reset()
	for _, path := range []string{"/api/v2/slack/action/acme/pingbot", "/api/v2/chat/action/acme/pingbot", "/api/v1/chat/action/acme/pingbot"} {
		errorBody(t, s.chatCall("POST", path, "reader", action), http.StatusForbidden)
		// The notifier's grant is anchored to pingbot; another bot is refused under every spelling.
		errorBody(t, s.chatCall("POST", strings.Replace(path, "pingbot", "lonely", 1), "notifier", action), http.StatusForbidden)
		s.chatCall("POST", path, "notifier", action).must(t, 200)
	}
	if n := len(f.Requests("chat.postMessage")); n != 3 {
		t.Errorf("%d messages posted, want the notifier's 3", n)
	}

	// Omnibot has no v1 action route, nor trailing-slash or other-method variants.
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"POST", "/api/v1/slack/action/acme/pingbot", 404},
		{"GET", "/api/v1/slack/get_team/acme/", 404},
		{"GET", "/api/v1/slack/send_im/acme/pingbot/alice@example.com", 405},
		{"POST", "/api/v1/slack/get_team/acme", 405},
	} {
		errorBody(t, s.chatCall(tc.method, tc.path, "notifier", action), tc.want)
	}

	// Stats and the access log count and show the request as it came.
	before := s.stat("cluster.chat.upstream_rq_200")
	s.chatCall("GET", "/api/v1/slack/get_team/acme", "reader", "").must(t, 200)
	if got := s.stat("cluster.chat.upstream_rq_200") - before; got != 1 {
		t.Errorf("upstream_rq_200 grew by %d, want 1", got)
	}
	eventually(t, "the access log line of an Omnibot path", func() bool {
		data, _ := os.ReadFile(accessLog)
		return strings.Contains(string(data), `"GET /api/v1/slack/get_team/acme HTTP/1.1" 200`)
	})
}

// TestChatActionErrorsSayNotOK: every 400 of the action routes carries "ok": false, as Omnibot's
// answer to a missing action or kwargs does (and Slack's own 400 answers do), so callers reading
// resp["ok"] never crash; the 404s keep Omnibot's bodies, which have no ok.
func TestChatActionErrorsSayNotOK(t *testing.T) { forEachSpelling(t, testChatActionErrorsSayNotOK) }

func testChatActionErrorsSayNotOK(t *testing.T, sp pathSpelling) {
	f := slackfake.StartWorkspace(t)
	s := startChat(t, f, chatTeams+chatACL, nil)
	const (
		action = "/api/v2/chat/action/acme/pingbot"
		sendIM = "/api/v1/chat/send_im/acme/pingbot/alice@example.com"
	)
	for _, tc := range []struct{ path, body, msg string }{
		{action, `{"kwargs":{}}`, "action not provided in payload"},
		{action, `{"action":"chat.postMessage"}`, "kwargs not provided in payload"},
		{action, `{"action":"../auth.test","kwargs":{}}`, ""},
		{action, `{"action":"chat.postMessage","kwargs":{"omnibot_parse":{"text":["users"]}}}`, ""},
		{sendIM, `{"kwargs":{}}`, "action not provided in payload"},
		{sendIM, `{"action":"chat.postMessage"}`, "kwargs not provided in payload"},
		{sendIM, `{"action":"chat.postMessage","kwargs":{"omnibot_parse":{"text":"users"}}}`, ""},
	} {
		m := errorBody(t, s.chatCall("POST", sp(tc.path), "echobot", tc.body), http.StatusBadRequest)
		if ok, present := m["ok"]; !present || ok != false || (tc.msg != "" && m["error"] != tc.msg) {
			t.Errorf("%s %s: %v, want ok false and error %q", tc.path, tc.body, m, tc.msg)
		}
		if strings.Contains(tc.path, "send_im") && (m["team_name"] != "acme" || m["bot_name"] != "pingbot" || m["email"] != "alice@example.com") {
			t.Errorf("%s: %v lacks what was asked for", tc.path, m)
		}
	}
	if n := len(f.Requests("")); n != 0 {
		t.Errorf("refused payloads made %d Slack calls", n)
	}
	for _, path := range []string{"/api/v1/chat/send_im/acme/pingbot/nobody@example.com", "/api/v2/chat/action/acme/nope"} {
		m := errorBody(t, s.chatCall("POST", sp(path), "echobot", `{"action":"chat.postMessage","kwargs":{}}`), http.StatusNotFound)
		if _, present := m["ok"]; present {
			t.Errorf("%s: %v, want Omnibot's 404 body without ok", path, m)
		}
	}
}
