package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/testwait"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
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
// grants exactly what it granted in Omnibot: the paths its patterns match, as the caller spells them.
func TestChatOmnibotPaths(t *testing.T) {
	f := slacktest.StartWorkspace(t)
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

	// The checks apply to the path a request came by, as in Omnibot: a reader's grant of
	// /api/v1/slack/ opens the lookups and send_im at Omnibot's paths, not at gantry's (the file
	// grants no /api/v1/chat/ path), and never the action route, whichever of its three paths is
	// asked. A denial names the path the caller used.
	s.chatCall("GET", "/api/v1/slack/get_team/acme", "reader", "").must(t, 200)
	s.chatCall("POST", "/api/v1/slack/send_im/acme/pingbot/alice@example.com", "reader", `{"action":"chat.postMessage","kwargs":{"text":"hi"}}`).must(t, 200)
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/api/v1/chat/get_team/acme", ""},
		{"POST", "/api/v1/chat/send_im/acme/pingbot/alice@example.com", `{"action":"chat.postMessage","kwargs":{"text":"hi"}}`},
	} {
		if m := errorBody(t, s.chatCall(tc.method, tc.path, "reader", tc.body), http.StatusForbidden); !strings.Contains(m["error"].(string), "path "+tc.path+" is not allowed") {
			t.Errorf("%s: %v, want the denial to name the path", tc.path, m)
		}
	}
	f.Reset()
	for _, path := range []string{"/api/v2/slack/action/acme/pingbot", "/api/v2/chat/action/acme/pingbot", "/api/v1/chat/action/acme/pingbot"} {
		m := errorBody(t, s.chatCall("POST", path, "reader", action), http.StatusForbidden)
		if !strings.Contains(m["error"].(string), path) {
			t.Errorf("%s: %v, want the denial to name the path", path, m)
		}
		// The notifier's grant is anchored to pingbot; another bot is refused under every spelling.
		errorBody(t, s.chatCall("POST", strings.Replace(path, "pingbot", "lonely", 1), "notifier", action), http.StatusForbidden)
	}
	// The notifier's grant is of Omnibot's path: gantry's two spellings are not granted.
	s.chatCall("POST", "/api/v2/slack/action/acme/pingbot", "notifier", action).must(t, 200)
	for _, path := range []string{"/api/v2/chat/action/acme/pingbot", "/api/v1/chat/action/acme/pingbot"} {
		errorBody(t, s.chatCall("POST", path, "notifier", action), http.StatusForbidden)
	}
	if n := len(f.Requests("chat.postMessage")); n != 1 {
		t.Errorf("%d messages posted, want the notifier's 1", n)
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
	testwait.Until(t, "the access log line of an Omnibot path", func() bool {
		data, _ := os.ReadFile(accessLog)
		return strings.Contains(string(data), `"GET /api/v1/slack/get_team/acme HTTP/1.1" 200`)
	})
}

// TestChatActionErrorsSayNotOK: every 400 of the action routes carries "ok": false, as Omnibot's
// answer to a missing action or kwargs does (and Slack's own 400 answers do), so callers reading
// resp["ok"] never crash; the 404s keep Omnibot's bodies, which have no ok.
func TestChatActionErrorsSayNotOK(t *testing.T) { forEachSpelling(t, testChatActionErrorsSayNotOK) }

func testChatActionErrorsSayNotOK(t *testing.T, sp pathSpelling) {
	f := slacktest.StartWorkspace(t)
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

// slackObject asks the fake Slack itself for a conversation, as Slack describes it.
func slackObject(t *testing.T, f *slacktest.Server, id string) map[string]any {
	t.Helper()
	resp, err := http.PostForm(f.APIURL()+"conversations.info", url.Values{"channel": {id}, "token": {e2eBotToken}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var answer struct {
		Channel map[string]any `json:"channel"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || answer.Channel == nil {
		t.Fatalf("conversations.info %s: %v", id, err)
	}
	return answer.Channel
}

// sameFields reports the fields of want that got lacks or has otherwise.
func sameFields(got, want map[string]any) []string {
	var diff []string
	for k, v := range want {
		if !reflect.DeepEqual(got[k], v) {
			diff = append(diff, fmt.Sprintf("%s: %v, Slack %v", k, got[k], v))
		}
	}
	return diff
}

// specChannelFields are the 19 fields of the spec's channel object.
var specChannelFields = []string{"id", "name", "is_channel", "created", "creator", "is_archived", "is_general", "unlinked", "name_normalized",
	"is_shared", "is_org_shared", "is_member", "is_private", "is_mpim", "members", "topic", "purpose", "previous_names", "num_members"}

// TestChatGetChannelFlatAndNested: get_channel answers the spec's channel object and, flat beside it
// as Omnibot answers, every field of Slack's conversation object; get_ims entries carry every field
// Slack gave as well.
func TestChatGetChannelFlatAndNested(t *testing.T) {
	forEachSpelling(t, testChatGetChannelFlatAndNested)
}

func testChatGetChannelFlatAndNested(t *testing.T, sp pathSpelling) {
	f := slacktest.StartWorkspace(t)
	s := startChat(t, f, chatTeams+chatACL, nil)
	get := func(path string) map[string]any {
		t.Helper()
		return s.chatCall("GET", sp(path), "echobot", "").must(t, 200)
	}
	// By name (conversations.list), by id (conversations.info), and an IM by its user.
	for name, id := range map[string]string{"general": "C0GENERAL", "secret": "G0SECRET1", "C0MPIM001": "C0MPIM001", "D0ALICE01": "D0ALICE01", "U0ALICE01": "D0ALICE01"} {
		m := get("/api/v1/chat/get_channel/acme/pingbot/" + name)
		if diff := sameFields(m, slackObject(t, f, id)); len(diff) > 0 {
			t.Errorf("%s: flat fields differ from Slack's object: %v", name, diff)
		}
		ch, _ := m["channel"].(map[string]any)
		for _, k := range specChannelFields {
			if _, ok := ch[k]; !ok {
				t.Errorf("%s: channel lacks %s: %v", name, k, ch)
			}
		}
		if ch["id"] != id || len(ch) != len(specChannelFields) {
			t.Errorf("%s: channel %v, want the spec's %d fields of %s", name, ch, len(specChannelFields), id)
		}
	}
	m := get("/api/v1/chat/get_channel/acme/pingbot/general")
	if m["id"] != "C0GENERAL" || m["is_group"] != false || m["topic"].(map[string]any)["value"] != "all things" {
		t.Errorf("Omnibot's flat answer: %v", m)
	}
	if im := get("/api/v1/chat/get_channel/acme/pingbot/D0ALICE01"); im["user"] != "U0ALICE01" || im["is_im"] != true {
		t.Errorf("an IM's own fields: %v", im)
	}

	ims := get("/api/v1/chat/get_ims/acme/pingbot")["ims"].([]any)
	if len(ims) != 1 {
		t.Fatalf("ims %v", ims)
	}
	im := ims[0].(map[string]any)
	if diff := sameFields(im, slackObject(t, f, "D0ALICE01")); len(diff) > 0 {
		t.Errorf("IM entry differs from Slack's object: %v", diff)
	}
	for _, k := range []string{"id", "created", "is_im", "is_org_shared", "user", "is_user_deleted", "priority", "context_team_id"} {
		if _, ok := im[k]; !ok {
			t.Errorf("IM entry lacks %s: %v", k, im)
		}
	}
}

// TestChatSendIMOpensAnIMWithItsCreated: an IM that send_im opens is listed by get_ims as Slack
// described it, created included; when Slack's answer lacks created (the id alone), it is not listed
// and not kept, as in Omnibot, rather than listed with created 0.
func TestChatSendIMOpensAnIMWithItsCreated(t *testing.T) {
	forEachSpelling(t, testChatSendIMOpensAnIMWithItsCreated)
}

func testChatSendIMOpensAnIMWithItsCreated(t *testing.T, sp pathSpelling) {
	f := slacktest.StartWorkspace(t)
	s := startChat(t, f, chatTeams+chatACL, nil)
	imsOf := func() map[string]map[string]any {
		t.Helper()
		out := map[string]map[string]any{}
		for _, v := range s.chatCall("GET", sp("/api/v1/chat/get_ims/acme/pingbot"), "echobot", "").must(t, 200)["ims"].([]any) {
			im := v.(map[string]any)
			out[im["user"].(string)] = im
		}
		return out
	}
	send := func(email string) string {
		t.Helper()
		m := s.chatCall("POST", sp("/api/v1/chat/send_im/acme/pingbot/"+email), "echobot", `{"action":"chat.postMessage","kwargs":{"text":"hi"}}`).must(t, 200)
		return m["channel"].(string)
	}
	imsOf() // the bot's IM list is fresh: what send_im opens is added to it

	bob := send("bob@example.com")
	im := imsOf()["U0BOB0001"]
	if im == nil || im["id"] != bob || im["is_im"] != true {
		t.Fatalf("bob's IM %s is not listed: %v", bob, imsOf())
	}
	if diff := sameFields(im, slackObject(t, f, bob)); len(diff) > 0 || im["created"] == 0.0 {
		t.Errorf("bob's IM differs from Slack's: %v (created %v)", diff, im["created"])
	}
	send("bob@example.com")
	if n := len(f.Requests("conversations.open")); n != 1 {
		t.Errorf("%d conversations.open, want 1: the opened IM is kept", n)
	}

	// Slack describes the IM by its id alone.
	f.SetOpenByIDOnly(true)
	f.AddUser(slacktest.User{ID: "U0CAROL01", Name: "carol", Email: "carol@example.com"})
	carol := send("carol@example.com")
	if im, listed := imsOf()["U0CAROL01"]; listed {
		t.Errorf("carol's IM %s listed without Slack's created: %v", carol, im)
	}
	if send("carol@example.com") != carol || len(f.Requests("conversations.open")) != 3 {
		t.Errorf("an IM not kept is opened again: %d opens", len(f.Requests("conversations.open")))
	}
}
