package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/testwait"
	"github.com/gantry-dev/gantry/services/chat"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// The project's own Slack request fixtures (testdata/omnibot/{event,interactive,slash_command},
// written from Slack's documented request shapes with the fake workspace's ids; see
// testdata/omnibot/README.md) drive gantry's receivers.

// omnibotToken is the verification token of the fixtures: lonely's legacy token here.
// omnibotOtherToken is the token of the enterprise fixture, no app's.
const (
	omnibotToken      = "gantryFixtureVerifyTok01"
	omnibotOtherToken = "tokenOfNoAppAtAll0000000"
)

// omnibotRequest is one of the fixtures as Slack sends it.
type omnibotRequest struct {
	name, path, contentType, body string
	input                         map[string]any // what Omnibot's route hands its processor
}

// omnibotFixture reads testdata/omnibot/<name>.json. withAppID adds the api_app_id Slack's newer
// payloads carry to an interactive one that has none (Omnibot ignores it), so that a test of what
// follows does not depend on finding the app without it.
func omnibotFixture(t *testing.T, name string, withAppID ...bool) omnibotRequest {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "omnibot", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return slackRequest(t, name, string(raw), len(withAppID) > 0 && withAppID[0])
}

// slackRequest builds the request Slack sends from a fixture's text: an interactive payload
// (wrapped in {"payload": "..."} as Slack's form, or bare) is sent as the form's payload field, a
// slash command's fields as a form, and an event as JSON. The kind is the name's first element.
func slackRequest(t *testing.T, name, text string, withAppID bool) omnibotRequest {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	r := omnibotRequest{name: name}
	switch {
	case strings.HasPrefix(name, "interactive/"):
		payload, wrapped := doc["payload"].(string)
		if !wrapped {
			b, _ := json.Marshal(doc)
			payload = string(b)
		}
		r.path, r.contentType = "/api/v1/slack/interactive", "application/x-www-form-urlencoded"
		r.body = url.Values{"payload": {payload}}.Encode()
		if err := json.Unmarshal([]byte(payload), &r.input); err != nil {
			t.Fatal(err)
		}
		if _, named := r.input["api_app_id"]; withAppID && !named {
			r.input["api_app_id"] = "A0PING001"
			b, _ := json.Marshal(r.input)
			r.body = url.Values{"payload": {string(b)}}.Encode()
			delete(r.input, "api_app_id")
		}
	case strings.HasPrefix(name, "slash_command/"):
		form := url.Values{}
		for k, v := range doc {
			form.Set(k, fmt.Sprint(v))
		}
		r.path, r.contentType, r.body, r.input = "/api/v1/slack/slash_command", "application/x-www-form-urlencoded", form.Encode(), doc
	default:
		r.path, r.contentType, r.body, r.input = "/api/v1/slack/event", "application/json", text, doc
	}
	return r
}

// omnibotHandlers are the handlers for the fixtures, with http_callback to be, in the form of
// Omnibot's test configuration (data/test_omnibot_config.yaml): the release_* and deploy_decision
// components (release_notes_modal synchronous on its callback, as Omnibot spells it), /echo, the
// help and status regexes, a rollback regex that matches thread replies, and a reaction. The
// echo_action_test, echo_dialog_1, test_events and modal-with-inputs components are the callback ids
// of Omnibot's own mock requests, for TestInboundOmnibotOriginals.
func omnibotHandlers(be string) string {
	cb := func(path string) string {
		return fmt.Sprintf(`
        - module: "omnibot.callbacks.network_callbacks:http_callback"
          kwargs: {request_kwargs: {url: %q}}`, be+path)
	}
	component := func(id, extra string) string {
		return `
    - callback_id: "` + id + `"` + extra + `
      bots: {acme: [pingbot, lonely]}
      callbacks:` + cb("/interactive")
	}
	shortcut := func(id, dialogID string) string {
		return component(id, `
      response_type: "in_channel"
      dialog:
        title: "Echo dialog"
        submit_label: "submit"
        callback_id: "`+dialogID+`"
        elements: [{type: "text", label: "Echo this text", name: "echo_element"}]`)
	}
	modal := func(id string) string {
		return `
    - callback_id: "` + id + `"
      response_type: "in_channel"
      bots: {acme: [pingbot, lonely]}
      callbacks:` + cb("/sync") + `
          synchronous: true`
	}
	return `
handlers:
  interactive_component_handlers:` +
		shortcut("release_shortcut", "release_dialog") + component("release_dialog", "\n      response_type: \"in_channel\"") +
		component("deploy_decision", "") + component("release_approval", "") + modal("release_notes_modal") +
		shortcut("echo_action_test", "echo_dialog_1") + component("echo_dialog_1", "\n      response_type: \"in_channel\"") +
		component("test_events", "") + modal("modal-with-inputs") + `
  slash_command_handlers:
    - command: "/echo"
      response_type: "in_channel"
      bots: {acme: [pingbot, lonely]}
      callbacks:` + cb("/slash") + `
  message_handlers:
    - match: "help"
      match_type: "regex"
      description: "Help documentation for omnibot."
      bots: {acme: [pingbot]}
      callbacks:` + cb("/message") + `
    - match: "status"
      match_type: "regex"
      bots: {acme: [pingbot]}
      callbacks:` + cb("/message") + `
    - match: "rollback"
      match_type: "regex"
      match_reply: true
      bots: {acme: [pingbot]}
      callbacks:` + cb("/message") + `
    - match: "white_check_mark|heavy_check_mark"
      match_type: "reaction"
      bots: {acme: [pingbot]}
      callbacks:` + cb("/reaction") + `
`
}

// omnibotCreds: pingbot signs, lonely has only the fixtures' legacy verification token.
var omnibotCreds = chat.Credentials(func(name string) string {
	if name == "CREDENTIALS_SLACK_VERIFICATION_TOKEN_A0LONELY1" {
		return omnibotToken
	}
	return inboundCreds(name)
})

func startOmnibotInbound(t *testing.T, f *slacktest.Server, be *backend, mutate func(*stack.Config)) *testStack {
	t.Helper()
	return startChat(t, f, chatTeams+chatACL+omnibotHandlers(be.URL), func(c *stack.Config) {
		c.Chat.Credentials = omnibotCreds
		c.Chat.Inbound.RetryBackoff = 50 * time.Millisecond
		c.Chat.Inbound.MaxAttempts = 3
		c.Chat.Inbound.ResponseURLPrefixes = "https://hooks.slack.com/"
		if mutate != nil {
			mutate(c)
		}
	})
}

// payloadOf is the backend payload for a request: the call whose type and callback (Omnibot's
// get_callback_id), slash command and trigger, or event type and ts are the request's.
func payloadOf(be *backend, r omnibotRequest) map[string]any {
	for _, c := range be.calls() {
		switch {
		case strings.HasPrefix(r.name, "interactive/"):
			if c["omnibot_payload_type"] == "interactive_component" && c["type"] == r.input["type"] && c["callback_id"] == omnibotCallbackID(r.input) {
				return c
			}
		case strings.HasPrefix(r.name, "slash_command/"):
			if c["omnibot_payload_type"] == "slash_command" && c["command"] == r.input["command"] && c["trigger_id"] == r.input["trigger_id"] {
				return c
			}
		default:
			ev, _ := r.input["event"].(map[string]any)
			if ev == nil || c["event_type"] != ev["type"] {
				continue
			}
			if ts := ev["ts"]; ts == nil && c["omnibot_payload_type"] == "reaction" && c["ts"] == ev["event_ts"] ||
				ts != nil && c["omnibot_payload_type"] == "message" && c["ts"] == ts {
				return c
			}
		}
	}
	return nil
}

// omnibotCallbackID is Omnibot's get_callback_id: the first action's block_id for block_actions,
// the view's callback_id for view_submission, else callback_id.
func omnibotCallbackID(p map[string]any) any {
	switch p["type"] {
	case "block_actions":
		if acts, _ := p["actions"].([]any); len(acts) > 0 {
			if a, ok := acts[0].(map[string]any); ok {
				return a["block_id"]
			}
		}
		return nil
	case "view_submission":
		if v, ok := p["view"].(map[string]any); ok {
			return v["callback_id"]
		}
		return nil
	}
	return p["callback_id"]
}

// TestInboundLegacyInteractiveNoAppID: the legacy interactive fixtures (interactive_message,
// dialog_submission, message_action) name no app; signed with the app's secret they are answered
// 200 and dispatched (so is a slash command without api_app_id), and in the verification-token
// mode the fixtures' token finds its app, as Omnibot does. A wrong secret or token is still
// refused. (Before: 401 for every one.)
func TestInboundLegacyInteractiveNoAppID(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	be := startBackend(t, `{}`)
	legacy := []string{"interactive/dialog_submission", "interactive/message_action", "interactive/interactive_message_enterprise"}
	for _, name := range legacy {
		if strings.Contains(omnibotFixture(t, name).body, "api_app_id") {
			t.Fatalf("%s names its app: not a legacy payload", name)
		}
	}
	t.Run("signed", func(t *testing.T) {
		be.mu.Lock()
		be.payloads = nil
		be.mu.Unlock()
		s := startOmnibotInbound(t, f, be, nil)
		for _, name := range legacy {
			r := omnibotFixture(t, name)
			if got := s.slackPost(r.path, r.contentType, r.body, "not-the-secret", time.Now(), 0); got.code != 401 {
				t.Errorf("%s signed with no app's secret: %d %s, want 401", name, got.code, got.body)
			}
			if got := s.slackPost(r.path, r.contentType, r.body, inboundSecret, time.Now(), 0); got.code != 200 {
				t.Errorf("%s: %d %s, want 200", name, got.code, got.body)
			}
		}
		for _, name := range legacy {
			r := omnibotFixture(t, name)
			testwait.Until(t, name+" at its backend", func() bool { return payloadOf(be, r) != nil })
			if p := payloadOf(be, r); p["callback_id"] != r.input["callback_id"] || fmt.Sprint(p["bot"]) != "map[bot_id:A0PING001 name:pingbot]" {
				t.Errorf("%s reached the backend as %v", name, p)
			}
		}
		// An older slash command names no app either.
		slash := omnibotFixture(t, "slash_command/echo")
		slash.body = strings.Replace(slash.body, "api_app_id=A0PING001&", "", 1)
		if strings.Contains(slash.body, "api_app_id") {
			t.Fatal("the slash command still names its app")
		}
		if m := s.slackPost(slash.path, slash.contentType, slash.body, inboundSecret, time.Now(), 0).must(t, 200); m["response_type"] != "in_channel" {
			t.Errorf("slash command without api_app_id answered %v", m)
		}
		testwait.Until(t, "the slash command at its backend", func() bool { return payloadOf(be, slash) != nil })
		trigger := omnibotFixture(t, "interactive/message_action").input["trigger_id"]
		if got := f.Requests("dialog.open"); len(got) != 1 || got[0].Form.Get("trigger_id") != trigger {
			t.Errorf("message_action's dialog.open: %v, want one for %v", got, trigger)
		}
	})
	t.Run("verification token", func(t *testing.T) {
		be.mu.Lock()
		be.payloads = nil
		be.mu.Unlock()
		s := startOmnibotInbound(t, f, be, func(c *stack.Config) { c.Chat.Inbound.AllowVerificationToken = true })
		for _, name := range legacy {
			r := omnibotFixture(t, name)
			unsigned := http.Header{"Content-Type": {r.contentType}}
			forged := strings.Replace(r.body, omnibotToken, "forged-token", 1)
			if forged == r.body {
				forged = strings.Replace(r.body, omnibotOtherToken, "forged-token", 1)
			}
			if got := s.do("POST", s.rest+r.path, forged, unsigned); got.code != 401 {
				t.Errorf("%s with another token: %d %s, want 401", name, got.code, got.body)
			}
			got := s.do("POST", s.rest+r.path, r.body, unsigned)
			want := 200
			if name == "interactive/interactive_message_enterprise" {
				want = 401 // its token is no app's
			}
			if got.code != want {
				t.Errorf("%s unsigned with its token: %d %s, want %d", name, got.code, got.body, want)
			}
		}
		for _, name := range legacy[:2] {
			r := omnibotFixture(t, name)
			testwait.Until(t, name+" at its backend", func() bool { return payloadOf(be, r) != nil })
			if p := payloadOf(be, r); fmt.Sprint(p["bot"]) != "map[bot_id:A0LONELY1 name:lonely]" {
				t.Errorf("%s reached the backend as %v, want lonely's", name, p)
			}
		}
	})
}

// TestInboundComponentTeamAsOmnibot: a component's team is found as Omnibot's _get_team_id does
// (tests/unit/omnibot/routes/test_interactive_team_id.py): original_message.team on an enterprise
// install, or where team is null, even when the user's own workspace (user.team_id) is another one
// of the grid; a component for another team is still refused. (Before: user.team_id was taken, and
// the component refused with 401.)
func TestInboundComponentTeamAsOmnibot(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	be := startBackend(t, `{}`)
	s := startOmnibotInbound(t, f, be, nil)
	ent := omnibotFixture(t, "interactive/interactive_message_enterprise")
	for i, mutate := range []func(c map[string]any){
		func(c map[string]any) { c["user"].(map[string]any)["team_id"] = "T0OTHER01" },
		func(c map[string]any) {
			c["is_enterprise_install"] = false
			c["user"].(map[string]any)["team_id"] = "T0OTHER01"
		},
	} {
		c := map[string]any{}
		b, _ := json.Marshal(ent.input)
		_ = json.Unmarshal(b, &c)
		mutate(c)
		c["trigger_id"] = fmt.Sprint("ENTERPRISE_TRIGGER_", i)
		c["api_app_id"] = "A0PING001" // so that only the team is in question
		b, _ = json.Marshal(c)
		if got := s.slackPost(ent.path, ent.contentType, url.Values{"payload": {string(b)}}.Encode(), inboundSecret, time.Now(), 0); got.code != 200 {
			t.Errorf("enterprise case %d (user in another workspace): %d %s, want 200", i, got.code, got.body)
		}
		other := strings.Replace(string(b), `"team":"T0FAKE001"`, `"team":"T0OTHER01"`, 1)
		if got := s.slackPost(ent.path, ent.contentType, url.Values{"payload": {other}}.Encode(), inboundSecret, time.Now(), 0); got.code != 401 {
			t.Errorf("enterprise case %d for another team: %d %s, want 401", i, got.code, got.body)
		}
	}
	testwait.Until(t, "both components at the backend", func() bool { return len(be.calls()) == 2 })
}

// TestInboundSynchronousPerCallback: Omnibot spells synchronous on the callback
// (data/test_omnibot_config.yaml, c.get("synchronous") in omnibot/routes/api.py): the backend's
// answer (response_action: errors) is Slack's answer, and nothing is queued. (Before: the key was
// read on the handler only, so the component was queued and Slack got an empty 200.)
func TestInboundSynchronousPerCallback(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	const answer = `{"response_action":"errors","errors":{"multiline":"too short"}}`
	be := startBackend(t, answer)
	s := startOmnibotInbound(t, f, be, nil)
	r := omnibotFixture(t, "interactive/view_submission", true)
	got := s.slackPost(r.path, r.contentType, r.body, inboundSecret, time.Now(), 0)
	if got.code != 200 || strings.TrimSpace(string(got.body)) != answer {
		t.Fatalf("view_submission answered %d %s, want 200 %s", got.code, got.body, answer)
	}
	if n := len(be.calls()); n != 1 {
		t.Errorf("backend called %d times, want 1", n)
	}
	st := string(s.admin("/stats?filter=chat.inbound.interactive_component").body)
	if strings.Contains(st, "queued: 1") {
		t.Errorf("the synchronous component was queued:\n%s", st)
	}
}

// omnibotFixtureNames lists the fixtures: <kind>/<name> for each testdata/omnibot/<kind>/<name>.json.
func omnibotFixtureNames(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, kind := range []string{"event", "interactive", "slash_command"} {
		files, err := filepath.Glob(filepath.Join("testdata", "omnibot", kind, "*.json"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no %s fixtures: %v", kind, err)
		}
		for _, f := range files {
			names = append(names, kind+"/"+strings.TrimSuffix(filepath.Base(f), ".json"))
		}
	}
	return names
}

// postBotMessage has the fake workspace hold a message of the bot in channel (chat.postMessage with
// the bot's token) and returns its ts.
func postBotMessage(t *testing.T, f *slacktest.Server, channel, text string) string {
	t.Helper()
	resp, err := http.PostForm(f.APIURL()+"chat.postMessage", url.Values{"channel": {channel}, "text": {text}, "token": {e2eBotToken}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		OK bool   `json:"ok"`
		TS string `json:"ts"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || !m.OK {
		t.Fatalf("chat.postMessage: %v %v", m, err)
	}
	return m.TS
}

// TestInboundOmnibotPayloads: the payload each backend gets for the project's fixtures
// (testdata/omnibot) is, leaf by leaf, the one Omnibot's own code builds (SlashCommand,
// InteractiveComponent, Message with a regex match, Reaction with a reaction match):
// testdata/omnibot/golden, captured by running Omnibot's processor over the same requests and the
// fake workspace's answers (testdata/omnibot/README.md). gantry adds event_id to event payloads only.
// The reaction is on a message of the bot that the fake workspace holds.
func TestInboundOmnibotPayloads(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	// The bot's own user, named as the bot is configured, as Omnibot needs it to tell a message
	// directed at it (users.info of the mention).
	f.AddUser(slacktest.User{ID: "U0BOT0001", Name: "pingbot", IsBot: true})
	be := startBackend(t, `{}`)
	s := startOmnibotInbound(t, f, be, nil)
	var reqs []omnibotRequest
	for _, name := range omnibotFixtureNames(t) {
		reqs = append(reqs, omnibotFixture(t, name, true))
	}
	reacted := omnibotFixture(t, "event/reaction_added").input["event"].(map[string]any)["item"].(map[string]any)["ts"]
	if ts := postBotMessage(t, f, "C0GENERAL", "deploy 42 is done"); ts != reacted {
		t.Fatalf("the bot's message is at %s, the reaction's item at %v", ts, reacted)
	}
	if dir := os.Getenv("GANTRY_OMNIBOT_GOLDEN_INPUTS"); dir != "" {
		writeGoldenInputs(t, f, dir, reqs, omnibotHandlers("http://backend"))
	}
	for _, r := range reqs {
		if got := s.slackPost(r.path, r.contentType, r.body, inboundSecret, time.Now(), 0); got.code != 200 {
			t.Fatalf("%s: %d %s", r.name, got.code, got.body)
		}
	}
	for _, r := range reqs {
		var got map[string]any
		testwait.Until(t, r.name+" at its backend", func() bool {
			got = payloadOf(be, r)
			return got != nil
		})
		raw, err := os.ReadFile(filepath.Join("testdata", "omnibot", "golden", strings.ReplaceAll(r.name, "/", "__")+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var want map[string]any
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		extra := map[string]bool{}
		if strings.HasPrefix(r.name, "event/") {
			extra["event_id"] = true
		}
		diffLeaves(t, r.name, want, got, extra)
	}
	if n, want := len(be.calls()), len(reqs); n != want {
		t.Errorf("the backends were called %d times for %d requests", n, want)
	}
}

// leaves flattens a JSON value into path → leaf (an empty object or array is a leaf of its own).
func leaves(prefix string, v any, out map[string]any) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			out[prefix] = "{}"
		}
		for k, e := range x {
			leaves(prefix+"."+k, e, out)
		}
	case []any:
		if len(x) == 0 {
			out[prefix] = "[]"
		}
		for i, e := range x {
			leaves(fmt.Sprintf("%s[%d]", prefix, i), e, out)
		}
	default:
		out[prefix] = v
	}
}

// diffLeaves reports every leaf missing from got, different, or added (unless its top-level key is
// in extra).
func diffLeaves(t *testing.T, name string, want, got map[string]any, extra map[string]bool) {
	t.Helper()
	w, g := map[string]any{}, map[string]any{}
	leaves("", want, w)
	leaves("", got, g)
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range w {
			if !yield(k) {
				return
			}
		}
	}) {
		gv, ok := g[k]
		switch {
		case !ok:
			t.Errorf("%s: leaf %s missing (Omnibot sends %#v)", name, k, w[k])
		case fmt.Sprint(gv) != fmt.Sprint(w[k]):
			t.Errorf("%s: leaf %s = %#v, Omnibot sends %#v", name, k, gv, w[k])
		}
	}
	for k, v := range g {
		top, _, _ := strings.Cut(strings.TrimPrefix(k, "."), ".")
		top, _, _ = strings.Cut(top, "[")
		if _, ok := w[k]; !ok && !extra[top] {
			t.Errorf("%s: leaf %s = %#v is not in Omnibot's payload", name, k, v)
		}
	}
	t.Logf("%s: %d leaves, Omnibot %d", name, len(g), len(w))
}

// writeGoldenInputs writes what Omnibot's code is run on for testdata/omnibot/golden: the handler
// configuration, the requests (as Omnibot's routes hand them to its processor) and the fake
// workspace's answers to the Slack calls Omnibot makes for them.
func writeGoldenInputs(t *testing.T, f *slacktest.Server, dir string, reqs []omnibotRequest, handlers string) {
	answers := map[string]any{}
	for _, call := range [][2]string{{"users.info", "user=U0ALICE01"}, {"users.info", "user=U0BOB0001"}, {"users.info", "user=U0BOT0001"},
		{"conversations.info", "channel=C0GENERAL"}, {"conversations.info", "channel=D0ALICE01"}, {"auth.test", ""}} {
		req, _ := http.NewRequest("POST", f.APIURL()+call[0], strings.NewReader(call[1]))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer "+e2eBotToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var ans any
		_ = json.NewDecoder(resp.Body).Decode(&ans)
		resp.Body.Close()
		answers[call[0]+"?"+call[1]] = ans
	}
	inputs := map[string]any{}
	for _, r := range reqs {
		inputs[r.name] = r.input
	}
	b, _ := json.MarshalIndent(map[string]any{"config": chatTeams + handlers, "slack": answers, "requests": inputs}, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "inputs.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// helpHandlers: a command and a regex handler with descriptions, a reaction handler (not listed by
// Omnibot's help) and a slash command, then the help settings under test.
func helpHandlers(be, settings string) string {
	return fmt.Sprintf(`
handlers:
  message_handlers:
    - match: "ping"
      match_type: "command"
      description: "Answers pong."
      bots: {acme: [pingbot]}
      callbacks:
        - module: "omnibot.callbacks.network_callbacks:http_callback"
          kwargs: {request_kwargs: {url: %[1]q}}
    - match: "deploy \\d+"
      match_type: "regex"
      bots: {acme: [pingbot]}
      callbacks:
        - module: "omnibot.callbacks.network_callbacks:http_callback"
          kwargs: {request_kwargs: {url: %[1]q}}
    - match: "help"
      match_type: "command"
      description: "Help documentation for omnibot."
      bots: {acme: [pingbot]}
      callbacks:
        - module: "omnibot.callbacks.message_callbacks:help_callback"
    - match: "white_check_mark"
      match_type: "reaction"
      bots: {acme: [pingbot]}
      callbacks:
        - module: "omnibot.callbacks.network_callbacks:http_callback"
          kwargs: {request_kwargs: {url: %[1]q}}
%[2]s`, be+"/message", settings)
}

// TestInboundHelp: Omnibot's built-in help. A message directed at the bot that no handler matches
// gets Omnibot's help_callback answer (default_to_help, true unless set false): one chat.postMessage
// in the message's thread whose attachments list the command handlers ("Commands:") and the regex
// handlers ("Regex matches:"), titled with their match and valued with their description; the
// help_callback module on a handler gives the same answer; help_callback's own callback is called
// instead when set; a message not directed at the bot gets nothing. (Before: no answer, and a
// configuration naming help_callback did not load.)
func TestInboundHelp(t *testing.T) {
	wantAttachments := `[{"fields":[{"short":false,"title":"ping","value":"Answers pong."},{"short":false,"title":"help","value":"Help documentation for omnibot."}],"title":"Commands:"},` +
		`{"fields":[{"short":false,"title":"deploy \\d+","value":""}],"title":"Regex matches:"}]`
	run := func(t *testing.T, settings string, be *backend) (*testStack, *slacktest.Server) {
		f := slacktest.StartWorkspace(t)
		s := startChat(t, f, chatTeams+chatACL+helpHandlers(be.URL, settings), func(c *stack.Config) {
			c.Chat.Credentials = inboundCreds
			c.Chat.Inbound.RetryBackoff = 50 * time.Millisecond
		})
		return s, f
	}
	send := func(s *testStack, id, text string) {
		s.slackPost("/api/v1/slack/event", "application/json", messageEvent(id, text), inboundSecret, time.Now(), 0).must(t, 200)
	}
	dispatched := func(s *testStack, n int) {
		testwait.Until(t, "the events to be dispatched", func() bool {
			return strings.Contains(string(s.admin("/stats?filter=chat.inbound.event.dispatched").body), fmt.Sprintf("dispatched: %d", n))
		})
	}
	postedAttachments := func(f *slacktest.Server) []string {
		var out []string
		for _, r := range f.Requests("chat.postMessage") {
			var v any
			_ = json.Unmarshal([]byte(r.Form.Get("attachments")), &v)
			b, _ := json.Marshal(v)
			out = append(out, string(b)+" channel="+r.Form.Get("channel")+" thread_ts="+r.Form.Get("thread_ts"))
		}
		return out
	}
	want := wantAttachments + " channel=C0GENERAL thread_ts=1700000000.000100"

	t.Run("default", func(t *testing.T) {
		be := startBackend(t, `{}`)
		s, f := run(t, "", be)
		send(s, "Ev0HELP001", "<@U0BOT0001> what can you do")
		send(s, "Ev0HELP002", "what can you do") // not directed: ignored
		send(s, "Ev0HELP003", "<@U0BOT0001> help")
		dispatched(s, 3)
		testwait.Until(t, "two help answers", func() bool { return len(f.Requests("chat.postMessage")) >= 2 })
		time.Sleep(200 * time.Millisecond)
		if got := postedAttachments(f); len(got) != 2 || got[0] != want || got[1] != want {
			t.Errorf("help answers:\n%s\nwant twice:\n%s", strings.Join(got, "\n"), want)
		}
		if n := len(be.calls()); n != 0 {
			t.Errorf("the backend was called %d times", n)
		}
		if st := string(s.admin("/stats?filter=chat.inbound").body); !strings.Contains(st, "chat.inbound.event.defaulted: 1") || !strings.Contains(st, "chat.inbound.handler.help.dispatched: 1") {
			t.Errorf("stats:\n%s", st)
		}
	})
	t.Run("default_to_help false", func(t *testing.T) {
		be := startBackend(t, `{}`)
		s, f := run(t, "default_to_help: false\n", be)
		send(s, "Ev0HELP011", "<@U0BOT0001> what can you do")
		dispatched(s, 1)
		time.Sleep(200 * time.Millisecond)
		if got := postedAttachments(f); len(got) != 0 {
			t.Errorf("answered %v with default_to_help false", got)
		}
	})
	t.Run("help_callback", func(t *testing.T) {
		be := startBackend(t, `{"actions":[{"action":"chat.postMessage","kwargs":{"text":"see the wiki"}}]}`)
		s, f := run(t, fmt.Sprintf("help_callback:\n  callback:\n    module: \"omnibot.callbacks.network_callbacks:http_callback\"\n    kwargs: {request_kwargs: {url: %q}}\n", be.URL+"/help"), be)
		send(s, "Ev0HELP021", "<@U0BOT0001> what can you do")
		testwait.Until(t, "the help callback's answer", func() bool { return len(f.Requests("chat.postMessage")) > 0 })
		calls := be.calls()
		if len(calls) != 1 || calls[0]["command_text"] != "what can you do" || calls[0]["directed"] != true || calls[0]["match_type"] != nil {
			t.Errorf("help callback got %v", calls)
		}
		if r := f.Requests("chat.postMessage")[0].Form; r.Get("text") != "see the wiki" || r.Get("thread_ts") != "1700000000.000100" {
			t.Errorf("posted %v", r)
		}
	})
}

// omnibotMockIDs maps the ids of Omnibot's own mock requests (lyft/omnibot data/mock) to the fake
// workspace's.
var omnibotMockIDs = strings.NewReplacer(
	"TEST_TEAM_ID", "T0FAKE001", "TEST_OMNIBOT_ID", "A0PING001", "TEST_USER_ID", "U0ALICE01", "TEST_CHANNEL_ID", "C0GENERAL",
	"T00000000", "T0FAKE001", "U00000000", "U0ALICE01", "D00000000", "D0ALICE01",
)

// omnibotMockDir is where Omnibot's mock requests are kept beside the project, outside the
// repository: $GANTRY_OMNIBOT_MOCK_DIR, else ../shared/reference/omnibot-mock from the repository's
// root or from the main checkout of its git worktrees; "" when absent (as in CI).
func omnibotMockDir() string {
	if d := os.Getenv("GANTRY_OMNIBOT_MOCK_DIR"); d != "" {
		return d
	}
	rel := filepath.Join("..", "shared", "reference", "omnibot-mock")
	cands := []string{filepath.Join("..", "..", rel)}
	if out, err := exec.Command("git", "rev-parse", "--path-format=absolute", "--git-common-dir").Output(); err == nil {
		cands = append(cands, filepath.Join(filepath.Dir(strings.TrimSpace(string(out))), rel))
	}
	for _, c := range cands {
		if st, err := os.Stat(c); err == nil && st.IsDir() {
			return c
		}
	}
	return ""
}

// Omnibot's payload fields by kind (the keys its classes set: InteractiveComponent,
// SlashCommand, Message after a regex match); an interactive payload has parsed_user and
// parsed_channel only where it has a user and a channel.
var (
	omnibotInteractiveKeys = []string{"action_ts", "actions", "bot", "callback_id", "channel", "message", "message_ts", "omnibot_payload_type",
		"original_message", "response_url", "state", "submission", "team", "trigger_id", "type", "user", "view"}
	omnibotSlashKeys = []string{"bot", "channel", "channel_id", "channels", "command", "emails", "emojis", "enterprise_id", "enterprise_name",
		"omnibot_payload_type", "parsed_text", "parsed_user", "response_url", "specials", "subteams", "team", "text", "trigger_id", "urls", "user_id", "users"}
	omnibotRegexMessageKeys = []string{"bot", "channel", "channel_id", "channels", "command_text", "directed", "emails", "emojis", "event_type",
		"match_type", "mentioned", "omnibot_payload_type", "parent_user_id", "parsed_text", "parsed_user", "regex", "specials", "subteams", "team",
		"text", "thread_ts", "ts", "urls", "user", "users"}
	// omnibotParsedMessageKeys are what InteractiveComponent adds to a component's message.
	omnibotParsedMessageKeys = []string{"channels", "emails", "emojis", "parsed_text", "parsed_user", "specials", "subteams", "urls", "users"}
)

// omnibotKeys is the sorted key set Omnibot's payload for input has.
func omnibotKeys(kind string, input map[string]any) []string {
	var keys []string
	switch kind {
	case "interactive":
		keys = slices.Clone(omnibotInteractiveKeys)
		if input["user"] != nil {
			keys = append(keys, "parsed_user")
		}
		if input["channel"] != nil {
			keys = append(keys, "parsed_channel")
		}
	case "slash_command":
		keys = slices.Clone(omnibotSlashKeys)
	default:
		keys = slices.Clone(omnibotRegexMessageKeys)
	}
	slices.Sort(keys)
	return keys
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// TestOmnibotPayloadKeysMatchGoldens: the key sets TestInboundOmnibotOriginals checks are those of
// the captured goldens of the same kind.
func TestOmnibotPayloadKeysMatchGoldens(t *testing.T) {
	for _, name := range omnibotFixtureNames(t) {
		r := omnibotFixture(t, name)
		kind, _, _ := strings.Cut(name, "/")
		if ev, _ := r.input["event"].(map[string]any); ev != nil && ev["type"] == "reaction_added" {
			continue // a Reaction, not checked on Omnibot's originals (none is a reaction)
		}
		raw, err := os.ReadFile(filepath.Join("testdata", "omnibot", "golden", strings.ReplaceAll(name, "/", "__")+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var golden map[string]any
		if err := json.Unmarshal(raw, &golden); err != nil {
			t.Fatal(err)
		}
		if got, want := slices.Sorted(maps.Keys(golden)), omnibotKeys(kind, r.input); !slices.Equal(got, want) {
			t.Errorf("%s: golden keys %v, the cross-check expects %v", name, got, want)
		}
	}
}

// TestInboundOmnibotOriginals: Omnibot's own mock requests (lyft/omnibot data/mock, kept outside the
// repository in ../shared/reference/omnibot-mock; skipped where absent), their ids mapped to the
// fake workspace's, sent signed as Slack sends them: every one is answered 200 (url_verification
// with its challenge); each that Omnibot hands to a handler reaches the backend once, with exactly
// the fields Omnibot's payload has, what Omnibot copies from the request equal to it, pingbot and
// acme as bot and team, and the user and channel resolved from the fake workspace; "test message"
// (no handler matches, not directed) reaches none.
func TestInboundOmnibotOriginals(t *testing.T) {
	dir := omnibotMockDir()
	if dir == "" {
		t.Skip("Omnibot's mock requests are not here: ../shared/reference/omnibot-mock (beside the repository) is absent; " +
			"set GANTRY_OMNIBOT_MOCK_DIR to lyft/omnibot's data/mock to check them")
	}
	var reqs []omnibotRequest
	for _, kind := range []string{"event", "interactive", "slash_command"} {
		files, _ := filepath.Glob(filepath.Join(dir, kind, "*.json"))
		for _, file := range files {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			reqs = append(reqs, slackRequest(t, kind+"/"+strings.TrimSuffix(filepath.Base(file), ".json"), omnibotMockIDs.Replace(string(raw)), false))
		}
	}
	if len(reqs) == 0 {
		t.Fatalf("no request under %s", dir)
	}
	t.Logf("%d of Omnibot's mock requests from %s", len(reqs), dir)
	f := slacktest.StartWorkspace(t)
	f.AddUser(slacktest.User{ID: "U0BOT0001", Name: "pingbot", IsBot: true})
	be := startBackend(t, `{}`)
	s := startOmnibotInbound(t, f, be, nil)
	var handled []omnibotRequest
	for _, r := range reqs {
		got := s.slackPost(r.path, r.contentType, r.body, inboundSecret, time.Now(), 0)
		if got.code != 200 {
			t.Errorf("%s: %d %s, want 200", r.name, got.code, got.body)
			continue
		}
		switch r.input["type"] {
		case "url_verification":
			if ch, _ := r.input["challenge"].(string); ch == "" || !strings.Contains(string(got.body), ch) {
				t.Errorf("%s answered %s, want its challenge", r.name, got.body)
			}
		case "event_callback":
			if ev, _ := r.input["event"].(map[string]any); ev != nil && ev["text"] != "test message" {
				handled = append(handled, r)
			}
		default:
			handled = append(handled, r)
		}
	}
	for _, r := range handled {
		var p map[string]any
		testwait.Until(t, r.name+" at its backend", func() bool {
			p = payloadOf(be, r)
			return p != nil
		})
		kind, _, _ := strings.Cut(r.name, "/")
		keys := slices.Sorted(maps.Keys(p))
		if kind == "event" {
			keys = slices.DeleteFunc(keys, func(k string) bool { return k == "event_id" })
		}
		if want := omnibotKeys(kind, r.input); !slices.Equal(keys, want) {
			t.Errorf("%s: payload keys %v, Omnibot's %v", r.name, keys, want)
		}
		if !sameJSON(p["bot"], map[string]any{"name": "pingbot", "bot_id": "A0PING001"}) || !sameJSON(p["team"], map[string]any{"name": "acme", "team_id": "T0FAKE001"}) {
			t.Errorf("%s: bot %v team %v, want pingbot of acme", r.name, p["bot"], p["team"])
		}
		same := func(field string, want any) {
			if !sameJSON(p[field], want) {
				t.Errorf("%s: %s = %v, the request's %v", r.name, field, p[field], want)
			}
		}
		resolved := func(field, id string) {
			if m, _ := p[field].(map[string]any); m == nil || m["id"] != id {
				t.Errorf("%s: %s = %v, want the fake workspace's %s", r.name, field, p[field], id)
			}
		}
		switch kind {
		case "interactive":
			for _, k := range []string{"type", "action_ts", "message_ts", "trigger_id", "response_url", "original_message", "view", "state", "user", "channel", "submission", "actions"} {
				same(k, r.input[k])
			}
			same("callback_id", omnibotCallbackID(r.input))
			if u, _ := r.input["user"].(map[string]any); u != nil {
				resolved("parsed_user", u["id"].(string))
			}
			if c, _ := r.input["channel"].(map[string]any); c != nil {
				resolved("parsed_channel", c["id"].(string))
			}
			if m, _ := r.input["message"].(map[string]any); m != nil {
				pm, _ := p["message"].(map[string]any)
				for k, v := range m {
					if !sameJSON(pm[k], v) {
						t.Errorf("%s: message.%s = %v, the request's %v", r.name, k, pm[k], v)
					}
				}
				for _, k := range omnibotParsedMessageKeys {
					if _, ok := pm[k]; !ok {
						t.Errorf("%s: message.%s missing", r.name, k)
					}
				}
			}
		case "slash_command":
			for _, k := range []string{"command", "response_url", "trigger_id", "user_id", "text", "channel_id", "enterprise_id", "enterprise_name"} {
				same(k, r.input[k])
			}
			resolved("parsed_user", r.input["user_id"].(string))
			resolved("channel", r.input["channel_id"].(string))
		default:
			ev := r.input["event"].(map[string]any)
			same("event_type", ev["type"])
			same("channel_id", ev["channel"])
			for _, k := range []string{"ts", "text", "user", "thread_ts", "parent_user_id"} {
				same(k, ev[k])
			}
			resolved("parsed_user", ev["user"].(string))
			resolved("channel", ev["channel"].(string))
			if p["match_type"] != "regex" {
				t.Errorf("%s: match_type %v, want regex", r.name, p["match_type"])
			}
		}
	}
	time.Sleep(200 * time.Millisecond) // anything more would have come by now
	if n := len(be.calls()); n != len(handled) {
		t.Errorf("the backends were called %d times, want %d (one per request Omnibot hands to a handler)", n, len(handled))
	}
}
