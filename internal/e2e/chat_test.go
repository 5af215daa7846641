package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/gantry-dev/gantry/internal/stack"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
	"github.com/gantry-dev/gantry/services/chat"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// chatACL opens every chat route to internal callers that name themselves echobot (any suffix), and
// get_team to everyone internal, at gantry's paths and at Omnibot's: access is decided on the path a
// request came by (as Omnibot does), so a file grants each spelling it means to open.
const chatACL = `
authorization:
  checks:
    - module: "omnibot.authnz:allowed_paths"
      kwargs: {paths: ["/api/v1/chat/", "/api/v2/chat/action/", "/api/v1/slack/", "/api/v2/slack/action/"]}
    - module: "omnibot.authnz.envoy_checks:envoy_internal_check"
    - module: "omnibot.authnz.envoy_checks:envoy_permissions_check"
  permissions:
    read: {methods: [GET], paths: ["/api/v1/chat/get_", "/api/v1/slack/get_"]}
    write: {methods: [POST], paths: ["/api/v1/chat/send_im/", "/api/v2/chat/action/", "/api/v1/slack/send_im/", "/api/v2/slack/action/"]}
  bindings:
    "echobot": [read, write]
    "viewer$": [read]
`

const chatTeams = `
teams:
  acme: T0FAKE001
bots:
  acme:
    pingbot: A0PING001
    lonely: A0LONELY1
primary_bot:
  acme: pingbot
`

const (
	e2eBotToken  = "xoxb-e2e-bot"
	e2eUserToken = "xoxp-e2e-user"
)

var chatCreds = chat.Credentials(func(name string) string {
	return map[string]string{
		"CREDENTIALS_SLACK_OAUTH_BOT_TOKEN_A0PING001": e2eBotToken,
		"CREDENTIALS_SLACK_OAUTH_TOKEN_A0PING001":     e2eUserToken,
	}[name]
})

// startChat runs the stack with the chat service on fake Slack and the given configuration file.
func startChat(t testing.TB, f *slacktest.Server, file string, mutate func(*stack.Config)) *testStack {
	t.Helper()
	return startStack(t, func(c *stack.Config) {
		path := filepath.Join(t.TempDir(), "chat.yaml")
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		c.Chat.ConfigFile = path
		c.Chat.SlackAPIURL = f.APIURL()
		c.Chat.Credentials = chatCreds
		c.Chat.RefreshInterval = -1 // lookups read through; tests decide when Slack is called
		if mutate != nil {
			mutate(c)
		}
	})
}

// chatCall sends a request as the given caller identity ("" for none) with a JSON body ("" for none).
func (s *testStack) chatCall(method, path, caller, body string) response {
	s.t.Helper()
	h := http.Header{"Content-Type": {"application/json"}}
	if caller != "" {
		h.Set("X-Proxy-Downstream-Service-Cluster", caller)
	}
	return s.do(method, s.rest+path, body, h)
}

// pathSpelling turns a chat path written in gantry's spelling into the one a test runs with.
type pathSpelling func(path string) string

// forEachSpelling runs a chat test with gantry's paths and again with Omnibot's, which every route
// also answers to with the same access checks, answers and errors.
func forEachSpelling(t *testing.T, test func(t *testing.T, sp pathSpelling)) {
	t.Run("gantry paths", func(t *testing.T) { test(t, func(path string) string { return path }) })
	t.Run("omnibot paths", func(t *testing.T) { test(t, omnibotPath) })
}

// omnibotPath spells a gantry chat path as Omnibot does: /api/v1/slack/..., and the action route
// /api/v2/slack/action/... for both of gantry's versions (Omnibot has no v1 action route).
func omnibotPath(path string) string {
	if rest, ok := strings.CutPrefix(path, "/api/v1/chat/action/"); ok {
		return "/api/v2/slack/action/" + rest
	}
	for _, version := range []string{"/api/v1/", "/api/v2/"} {
		if rest, ok := strings.CutPrefix(path, version+"chat/"); ok {
			return version + "slack/" + rest
		}
	}
	return path
}

// errorBody checks a JSON error answer and returns its fields.
func errorBody(t *testing.T, r response, code int) map[string]any {
	t.Helper()
	m := r.must(t, code)
	if msg, _ := m["error"].(string); msg == "" {
		t.Fatalf("no error message in %s", r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("content type %q", ct)
	}
	return m
}

func TestChatDeniedByDefault(t *testing.T) { forEachSpelling(t, testChatDeniedByDefault) }

func testChatDeniedByDefault(t *testing.T, sp pathSpelling) {
	f := slacktest.StartWorkspace(t)
	s := startChat(t, f, chatTeams, nil) // no authorization section
	for _, tc := range []struct{ method, path, body string }{
		{"GET", sp("/api/v1/chat/get_team/acme"), ""},
		{"GET", sp("/api/v1/chat/get_user/acme/pingbot/alice@example.com"), ""},
		{"GET", sp("/api/v1/chat/get_channel/acme/pingbot/general"), ""},
		{"GET", sp("/api/v1/chat/get_ims/acme/pingbot"), ""},
		{"POST", sp("/api/v1/chat/send_im/acme/pingbot/alice@example.com"), `{"action":"chat.postMessage","kwargs":{"text":"hi"}}`},
		{"POST", sp("/api/v2/chat/action/acme/pingbot"), `{"action":"chat.postMessage","kwargs":{"channel":"C0GENERAL"}}`},
		{"POST", sp("/api/v1/chat/action/acme/pingbot"), `{"action":"chat.postMessage","kwargs":{"channel":"C0GENERAL"}}`},
	} {
		r := s.chatCall(tc.method, tc.path, "echobot", tc.body)
		if m := errorBody(t, r, http.StatusForbidden); !strings.Contains(m["error"].(string), "access denied") {
			t.Errorf("%s: %v", tc.path, m)
		}
	}
	if n := len(f.Requests("")); n != 0 {
		t.Errorf("denied requests reached Slack %d times", n)
	}
}

func TestChatAccessControl(t *testing.T) { forEachSpelling(t, testChatAccessControl) }

func testChatAccessControl(t *testing.T, sp pathSpelling) {
	f := slacktest.StartWorkspace(t)
	s := startChat(t, f, chatTeams+chatACL, nil)
	tests := []struct {
		name, method, path, caller string
		want                       int
	}{
		{"bound caller reads", "GET", sp("/api/v1/chat/get_team/acme"), "echobot", 200},
		{"binding is a prefix regex", "GET", sp("/api/v1/chat/get_team/acme"), "echobot-staging", 200},
		{"anchored binding", "GET", sp("/api/v1/chat/get_team/acme"), "viewer", 200},
		{"anchored binding rejects a longer name", "GET", sp("/api/v1/chat/get_team/acme"), "viewer2", 403},
		{"no identity header", "GET", sp("/api/v1/chat/get_team/acme"), "", 403},
		{"unbound caller", "GET", sp("/api/v1/chat/get_team/acme"), "mallory", 403},
		{"reader may not write", "POST", sp("/api/v2/chat/action/acme/pingbot"), "viewer", 403},
		{"writer writes", "POST", sp("/api/v2/chat/action/acme/pingbot"), "echobot", 200},
		{"the v1 action path is the same route", "POST", sp("/api/v1/chat/action/acme/pingbot"), "echobot", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := ""
			if tt.method == "POST" {
				body = `{"action":"chat.postMessage","kwargs":{"channel":"C0GENERAL","text":"hi"}}`
			}
			r := s.chatCall(tt.method, tt.path, tt.caller, body)
			if tt.want == 403 {
				errorBody(t, r, 403)
				return
			}
			r.must(t, tt.want)
		})
	}

	// Every route needs the identity header once the permissions check is configured.
	for _, tc := range []struct{ method, path, body string }{
		{"GET", sp("/api/v1/chat/get_user/acme/pingbot/alice@example.com"), ""},
		{"GET", sp("/api/v1/chat/get_channel/acme/pingbot/general"), ""},
		{"GET", sp("/api/v1/chat/get_ims/acme/pingbot"), ""},
		{"POST", sp("/api/v1/chat/send_im/acme/pingbot/alice@example.com"), `{"action":"chat.postMessage","kwargs":{"text":"hi"}}`},
		{"POST", sp("/api/v1/chat/action/acme/pingbot"), `{"action":"chat.postMessage","kwargs":{"channel":"C0GENERAL"}}`},
	} {
		errorBody(t, s.chatCall(tc.method, tc.path, "", tc.body), 403)
		if r := s.chatCall(tc.method, tc.path, "echobot", tc.body); r.code != 200 {
			t.Errorf("%s %s as echobot: %d %s", tc.method, tc.path, r.code, r.body)
		}
	}

	// External downstreams: the gateway does not mark them internal and drops their identity header,
	// and they cannot smuggle either in as gRPC metadata.
	ext := startChat(t, f, chatTeams+chatACL, func(c *stack.Config) { c.Gateway.InternalCIDRs = "10.0.0.0/8" })
	for _, h := range []http.Header{
		{"X-Proxy-Downstream-Service-Cluster": {"echobot"}},
		{"X-Proxy-Internal": {"true"}, "X-Proxy-Downstream-Service-Cluster": {"echobot"}},
		{"Grpc-Metadata-X-Proxy-Internal": {"true"}, "Grpc-Metadata-X-Proxy-Downstream-Service-Cluster": {"echobot"}},
	} {
		r := ext.do("GET", ext.rest+sp("/api/v1/chat/get_team/acme"), "", h)
		errorBody(t, r, 403)
	}
}

func TestChatGRPCCallersPassTheSameChecks(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	s := startChat(t, f, chatTeams+chatACL, nil)
	client := chatv1.NewChatServiceClient(s.dial(s.ChatAddr))
	ctx := context.Background()
	if _, err := client.GetTeam(ctx, &chatv1.GetTeamRequest{TeamName: "acme"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("without metadata: %v", err)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "x-proxy-internal", "true", "x-proxy-downstream-service-cluster", "echobot")
	// The gateway's metadata from another peer is ignored ...
	if _, err := client.GetTeam(ctx, &chatv1.GetTeamRequest{TeamName: "acme"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("x-proxy-internal from a direct caller: %v, want PermissionDenied", err)
	}
	// ... and believed from the peer whose certificate names the gateway.
	client = chatv1.NewChatServiceClient(s.dialAsGateway(s.ChatAddr))
	resp, err := client.GetTeam(ctx, &chatv1.GetTeamRequest{TeamName: "acme"})
	if err != nil || resp.GetTeamId() != "T0FAKE001" {
		t.Fatalf("GetTeam = %v, %v", resp, err)
	}
	act, err := client.PerformAction(ctx, &chatv1.PerformActionRequest{TeamName: "acme", BotName: "pingbot", Action: "auth.test", Kwargs: mustStruct(t, map[string]any{})})
	if err != nil || !strings.Contains(string(act.GetResult().GetData()), `"ok":true`) || act.GetResult().GetContentType() != "application/json" {
		t.Fatalf("PerformAction = %v, %v", act, err)
	}
	// gRPC callers get the typed channel and Slack's whole object beside it.
	ch, err := client.GetChannel(ctx, &chatv1.GetChannelRequest{TeamName: "acme", BotName: "pingbot", ChannelName: "general"})
	if err != nil || ch.GetChannel().GetId() != "C0GENERAL" || ch.GetConversation().GetFields()["is_group"] == nil {
		t.Fatalf("GetChannel = %v, %v", ch, err)
	}
}

func TestChatRoutes(t *testing.T) { forEachSpelling(t, testChatRoutes) }

func testChatRoutes(t *testing.T, sp pathSpelling) {
	f := slacktest.StartWorkspace(t)
	s := startChat(t, f, chatTeams+chatACL, nil)
	get := func(path string) response { return s.chatCall("GET", path, "echobot", "") }
	post := func(path, body string) response { return s.chatCall("POST", path, "echobot", body) }

	t.Run("get_team", func(t *testing.T) {
		if m := get(sp("/api/v1/chat/get_team/acme")).must(t, 200); m["team_id"] != "T0FAKE001" {
			t.Errorf("%v", m)
		}
		if m := errorBody(t, get(sp("/api/v1/chat/get_team/nope")), 404); m["error"] != "provided team_name is not configured." {
			t.Errorf("%v", m)
		}
	})

	t.Run("get_user", func(t *testing.T) {
		m := get(sp("/api/v1/chat/get_user/acme/pingbot/alice@example.com")).must(t, 200)
		want := map[string]any{"email": "alice@example.com", "name": "Alice A", "team_id": "T0FAKE001", "user_id": "U0ALICE01"}
		for k, v := range want {
			if m[k] != v || m["user"].(map[string]any)[k] != v {
				t.Errorf("%s: %v, want %v (flat and nested)", k, m, v)
			}
		}
		for _, path := range []string{
			sp("/api/v1/chat/get_user/acme/pingbot/nobody@example.com"),
			sp("/api/v1/chat/get_user/acme/pingbot/gone@example.com"), // deleted
		} {
			if m := errorBody(t, get(path), 404); m["error"] != "user not found" {
				t.Errorf("%s: %v", path, m)
			}
		}
	})

	t.Run("get_channel", func(t *testing.T) {
		for name, id := range map[string]string{"general": "C0GENERAL", "%23general": "C0GENERAL", "secret": "G0SECRET1", "mpdm-alice--bob-1": "C0MPIM001", "D0ALICE01": "D0ALICE01", "U0ALICE01": "D0ALICE01"} {
			m := get(sp("/api/v1/chat/get_channel/acme/pingbot/")+name).must(t, 200)
			ch, _ := m["channel"].(map[string]any)
			if ch["id"] != id {
				t.Errorf("%s: %v", name, m)
			}
		}
		m := get(sp("/api/v1/chat/get_channel/acme/pingbot/general")).must(t, 200)
		ch := m["channel"].(map[string]any)
		for _, k := range []string{"id", "name", "is_channel", "created", "creator", "is_archived", "is_general", "unlinked", "name_normalized",
			"is_shared", "is_org_shared", "is_member", "is_private", "is_mpim", "members", "topic", "purpose", "previous_names", "num_members"} {
			if _, ok := ch[k]; !ok {
				t.Errorf("channel lacks %s: %v", k, ch)
			}
		}
		if ch["topic"].(map[string]any)["value"] != "all things" || ch["created"] != 1500000000.0 {
			t.Errorf("channel %v", ch)
		}
		if m := errorBody(t, get(sp("/api/v1/chat/get_channel/acme/pingbot/random")), 404); m["error"] != "provided channel_name was not found." {
			t.Errorf("%v", m)
		}
	})

	t.Run("get_ims", func(t *testing.T) {
		m := get(sp("/api/v1/chat/get_ims/acme/pingbot")).must(t, 200)
		ims, _ := m["ims"].([]any)
		if len(ims) != 1 {
			t.Fatalf("%v", m)
		}
		im := ims[0].(map[string]any)
		if im["id"] != "D0ALICE01" || im["user"] != "U0ALICE01" || im["is_im"] != true || im["priority"] != 0.5 || im["is_user_deleted"] != false {
			t.Errorf("%v", im)
		}
	})

	t.Run("action", func(t *testing.T) {
		// Fill the names omnibot_parse resolves.
		get(sp("/api/v1/chat/get_channel/acme/pingbot/general"))
		get(sp("/api/v1/chat/get_user/acme/pingbot/alice@example.com"))
		f.Reset()
		r := post(sp("/api/v2/chat/action/acme/pingbot"), `{"action":"chat.postMessage","kwargs":{"channel":"C0GENERAL","text":"@alice see #general and use @here","as_user":true,
			"omnibot_parse":{"text":["channels","users","specials"]}}}`)
		m := r.must(t, 200)
		msg := m["message"].(map[string]any)
		if m["ok"] != true || m["channel"] != "C0GENERAL" || msg["text"] != "<@U0ALICE01|Alice A> see <#C0GENERAL|general> and use <!here|here>" || msg["subtype"] != "bot_message" {
			t.Errorf("%s", r.body)
		}
		posted := f.Requests("chat.postMessage")
		if len(posted) != 1 || posted[0].Form.Get("as_user") != "true" || posted[0].Token != e2eBotToken {
			t.Errorf("posted %+v", posted)
		}
		// Slack's ok:false answer comes back unchanged with 400.
		r = post(sp("/api/v1/chat/action/acme/pingbot"), `{"action":"chat.postMessage","kwargs":{"channel":"C0NOWHERE","text":"x"}}`)
		if r.code != 400 || string(r.body) != `{"ok":false,"error":"channel_not_found"}`+"\n" {
			t.Errorf("%d %s", r.code, r.body)
		}
		// Any method passes through.
		if r := post(sp("/api/v2/chat/action/acme/pingbot"), `{"action":"reactions.add","kwargs":{"name":"tada","channel":"C0GENERAL","timestamp":"1.2"}}`); r.code != 200 || string(r.body) != `{"ok":true}`+"\n" {
			t.Errorf("%d %s", r.code, r.body)
		}
	})

	t.Run("send_im", func(t *testing.T) {
		f.Reset()
		r := post(sp("/api/v1/chat/send_im/acme/pingbot/bob@example.com"), `{"action":"chat.postMessage","kwargs":{"text":"hello","channel":"C0GENERAL"}}`)
		m := r.must(t, 200)
		if m["ok"] != true || !strings.HasPrefix(m["channel"].(string), "D0OPEN") {
			t.Errorf("%s", r.body)
		}
		if len(f.Requests("conversations.open")) != 1 {
			t.Errorf("requests %+v", f.Requests(""))
		}
		// Slack says no: 400 with its body.
		f.Inject("chat.postMessage", slacktest.Fault{Error: "msg_too_long", Times: 1})
		r = post(sp("/api/v1/chat/send_im/acme/pingbot/bob@example.com"), `{"action":"chat.postMessage","kwargs":{"text":"x"}}`)
		if r.code != 400 || !strings.Contains(string(r.body), "msg_too_long") {
			t.Errorf("%d %s", r.code, r.body)
		}
		for _, tc := range []struct{ path, msg string }{
			{sp("/api/v1/chat/send_im/acme/pingbot/nobody@example.com"), "unable to find slack user for given email."},
			{sp("/api/v1/chat/send_im/acme/pingbot/gone@example.com"), "unable to find slack user for given email."},
			{sp("/api/v1/chat/send_im/nope/pingbot/bob@example.com"), "provided team name was not found."},
			{sp("/api/v1/chat/send_im/acme/nope/bob@example.com"), "provided bot name was not found."},
			{sp("/api/v1/chat/send_im/acme/lonely/bob@example.com"), "provided bot name was not found."}, // no token
		} {
			m := errorBody(t, post(tc.path, `{"action":"chat.postMessage","kwargs":{"text":"x"}}`), 404)
			parts := strings.Split(tc.path, "/")
			if m["error"] != tc.msg || m["team_name"] != parts[5] || m["bot_name"] != parts[6] || m["email"] != parts[7] {
				t.Errorf("%s: %v", tc.path, m)
			}
		}
		f.AddUser(slacktest.User{ID: "U0CAROL01", Name: "carol", Email: "carol@example.com"})
		f.Inject("conversations.open", slacktest.Fault{Error: "cannot_dm_bot"})
		if m := errorBody(t, post(sp("/api/v1/chat/send_im/acme/pingbot/carol@example.com"), `{"action":"chat.postMessage","kwargs":{"text":"x"}}`), 404); m["error"] != "unable to find IM channel." {
			t.Errorf("%v", m)
		}
	})
}

// TestChatBadInput: nothing a caller sends answers 5xx, and every answer is a JSON error.
func TestChatBadInput(t *testing.T) { forEachSpelling(t, testChatBadInput) }

func testChatBadInput(t *testing.T, sp pathSpelling) {
	f := slacktest.StartWorkspace(t)
	s := startChat(t, f, chatTeams+chatACL, nil)
	tests := []struct {
		name, method, path, body string
		want                     int
	}{
		{"missing action", "POST", sp("/api/v2/chat/action/acme/pingbot"), `{"kwargs":{}}`, 400},
		{"missing kwargs", "POST", sp("/api/v2/chat/action/acme/pingbot"), `{"action":"chat.postMessage"}`, 400},
		{"send_im without kwargs", "POST", sp("/api/v1/chat/send_im/acme/pingbot/alice@example.com"), `{"action":"chat.postMessage"}`, 400},
		{"send_im without action", "POST", sp("/api/v1/chat/send_im/acme/pingbot/alice@example.com"), `{"kwargs":{}}`, 400},
		{"empty body", "POST", sp("/api/v2/chat/action/acme/pingbot"), ``, 400},
		{"non-JSON body", "POST", sp("/api/v2/chat/action/acme/pingbot"), `action=chat.postMessage`, 400},
		{"kwargs not an object", "POST", sp("/api/v2/chat/action/acme/pingbot"), `{"action":"chat.postMessage","kwargs":"text"}`, 400},
		{"action not a method name", "POST", sp("/api/v2/chat/action/acme/pingbot"), `{"action":"../../admin","kwargs":{}}`, 400},
		{"omnibot_parse names a missing kwarg", "POST", sp("/api/v2/chat/action/acme/pingbot"), `{"action":"chat.postMessage","kwargs":{"channel":"C0GENERAL","omnibot_parse":{"text":["users"]}}}`, 400},
		{"omnibot_parse not a map of lists", "POST", sp("/api/v2/chat/action/acme/pingbot"), `{"action":"chat.postMessage","kwargs":{"text":"x","omnibot_parse":{"text":"users"}}}`, 400},
		{"unknown team", "POST", sp("/api/v2/chat/action/nope/pingbot"), `{"action":"chat.postMessage","kwargs":{}}`, 404},
		{"unknown bot", "POST", sp("/api/v2/chat/action/acme/nope"), `{"action":"chat.postMessage","kwargs":{}}`, 404},
		{"unknown team on get_user", "GET", sp("/api/v1/chat/get_user/nope/pingbot/alice@example.com"), ``, 404},
		{"unknown bot on get_channel", "GET", sp("/api/v1/chat/get_channel/acme/nope/general"), ``, 404},
		{"unknown bot on get_ims", "GET", sp("/api/v1/chat/get_ims/acme/nope"), ``, 404},
		{"wrong method", "GET", sp("/api/v2/chat/action/acme/pingbot"), ``, 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errorBody(t, s.chatCall(tt.method, tt.path, "echobot", tt.body), tt.want)
		})
	}
}

func TestChatSlackFailures(t *testing.T) { forEachSpelling(t, testChatSlackFailures) }

func testChatSlackFailures(t *testing.T, sp pathSpelling) {
	f := slacktest.StartWorkspace(t)
	s := startChat(t, f, chatTeams+chatACL, func(c *stack.Config) {
		c.Gateway.UpstreamTimeout = 3 * time.Second
		c.Chat.SlackMaxRetryAfter = 2 * time.Second
	})
	action := `{"action":"reactions.add","kwargs":{"name":"tada"}}`
	call := func() response { return s.chatCall("POST", sp("/api/v2/chat/action/acme/pingbot"), "echobot", action) }

	// A short rate limit is waited out.
	f.Inject("reactions.add", slacktest.Fault{Status: 429, RetryAfter: 1, Times: 1})
	call().must(t, 200)
	// A long one is answered 429 with Slack's body and Retry-After.
	f.Inject("reactions.add", slacktest.Fault{Status: 429, RetryAfter: 30, Times: 1})
	r := call()
	if r.code != 429 || r.header.Get("Retry-After") != "30" || !strings.Contains(string(r.body), "ratelimited") {
		t.Errorf("long rate limit: %d %v %s", r.code, r.header, r.body)
	}
	// Slack's window holds for every request of the token and method: 429 without a call.
	f.Reset()
	if r := call(); r.code != 429 || r.header.Get("Retry-After") == "" || len(f.Requests("reactions.add")) != 0 {
		t.Errorf("within the window: %d %v %s, %d calls", r.code, r.header, r.body, len(f.Requests("reactions.add")))
	}
	// The rest uses another method, which that window does not hold.
	action = `{"action":"chat.postMessage","kwargs":{"channel":"C0GENERAL","text":"x"}}`
	// 5xx then success: retried for a read...
	f.Inject("auth.test", slacktest.Fault{Status: 503, Times: 1})
	s.chatCall("POST", "/api/v2/chat/action/acme/pingbot", "echobot", `{"action":"auth.test","kwargs":{}}`).must(t, 200)
	// ...but not for a write, which Slack may have performed: 502 after one call.
	f.Reset()
	f.Inject("chat.postMessage", slacktest.Fault{Status: 503, Times: 1})
	errorBody(t, call(), 502)
	if n := len(f.Requests("chat.postMessage")); n != 1 {
		t.Errorf("a write was sent %d times after a 503, want 1", n)
	}
	// Slack stays down: 502.
	f.Inject("chat.postMessage", slacktest.Fault{Status: 500})
	if m := errorBody(t, call(), 502); !strings.Contains(m["error"].(string), "slack unavailable") {
		t.Errorf("%v", m)
	}
	f.ClearFaults()
	// Slack hangs: 504 within the gateway's deadline.
	f.Inject("chat.postMessage", slacktest.Fault{Delay: time.Minute})
	errorBody(t, call(), 504)
	f.ClearFaults()
	// A lookup while Slack is down: 502 as well.
	f.Inject("users.lookupByEmail", slacktest.Fault{Status: 502})
	errorBody(t, s.chatCall("GET", "/api/v1/chat/get_user/acme/pingbot/alice@example.com", "echobot", ""), 502)
	f.ClearFaults()
	// A lookup Slack keeps rate-limiting: 429 with Retry-After (last: its window holds the method).
	f.Inject("users.lookupByEmail", slacktest.Fault{Status: 429, RetryAfter: 60, Times: 1})
	if r := s.chatCall("GET", sp("/api/v1/chat/get_user/acme/pingbot/alice@example.com"), "echobot", ""); r.code != 429 || r.header.Get("Retry-After") != "60" {
		t.Errorf("rate-limited lookup: %d %v %s", r.code, r.header, r.body)
	}
}

// TestChatTokensFromSecretsService stores the bot token as a credential of the chat service's own
// service in the secrets service; the chat service reads it as that service at startup.
func TestChatTokensFromSecretsService(t *testing.T) {
	forEachSpelling(t, testChatTokensFromSecretsService)
}

func testChatTokensFromSecretsService(t *testing.T, sp pathSpelling) {
	f := slacktest.StartWorkspace(t)
	// First run: create the credential and the service mapping (as user alice).
	s := startStack(t, nil)
	cred := s.call("POST", "/v1/credentials", map[string]any{
		"name": "slack-pingbot", "enabled": true, "documentation": "bot token of acme/pingbot",
		"credential_pairs": map[string]string{"slack_oauth_bot_token_a0ping001": "xoxb-from-secrets"},
	}).must(t, 200)
	s.call("PUT", "/v1/services/gantry-chat", map[string]any{"enabled": true, "credentials": []string{cred["id"].(string)}}).must(t, 200)

	// Second run on the same data folder: the chat service reads its token from there.
	cfg := s.cfg
	s.stop()
	path := filepath.Join(t.TempDir(), "chat.yaml")
	if err := os.WriteFile(path, []byte(chatTeams+chatACL), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Chat.ConfigFile = path
	cfg.Chat.SlackAPIURL = f.APIURL()
	cfg.Chat.RefreshInterval = -1
	cfg.Chat.Credentials = func(string) string { return "" } // nothing from the environment
	cfg.Chat.Secrets.Service = "gantry-chat"
	s2 := runStack(t, cfg)
	r := s2.chatCall("POST", sp("/api/v2/chat/action/acme/pingbot"), "echobot", `{"action":"auth.test","kwargs":{}}`)
	r.must(t, 200)
	if reqs := f.Requests("auth.test"); len(reqs) != 1 || reqs[0].Token != "xoxb-from-secrets" {
		t.Fatalf("auth.test calls %+v", reqs)
	}
}

func mustStruct(t testing.TB, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
