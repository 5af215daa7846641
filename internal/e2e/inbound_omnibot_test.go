package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
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

// Omnibot's own request fixtures (lyft/omnibot data/mock, copied unchanged under
// testdata/omnibot) drive gantry's receivers; their ids are mapped to the fake workspace's.
var omnibotIDs = strings.NewReplacer(
	"TEST_TEAM_ID", "T0FAKE001", "TEST_OMNIBOT_ID", "A0PING001", "TEST_USER_ID", "U0ALICE01", "TEST_CHANNEL_ID", "C0GENERAL",
	"T00000000", "T0FAKE001", "U00000000", "U0ALICE01", "D00000000", "D0ALICE01",
)

// omnibotToken is the verification token of Omnibot's fixtures: lonely's legacy token here.
const omnibotToken = "ABCDEFGHIJKLMNOPQRSTUVWX"

// omnibotRequest is one of Omnibot's fixtures as Slack sends it.
type omnibotRequest struct {
	name, path, contentType, body string
	input                         map[string]any // what Omnibot's route hands its processor (mapped ids)
}

// omnibotFixture reads testdata/omnibot/<name>.json: an interactive payload (wrapped in
// {"payload": "..."} as Slack's form, or bare), a slash command's form, or an event. withAppID
// adds the api_app_id Slack's newer payloads carry to an interactive one (Omnibot ignores it), so a
// test of what follows does not depend on finding the app without it.
func omnibotFixture(t *testing.T, name string, withAppID ...bool) omnibotRequest {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "omnibot", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	text := omnibotIDs.Replace(string(raw))
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
		if len(withAppID) > 0 && withAppID[0] {
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

// omnibotHandlers are the handlers of Omnibot's test configuration (data/test_omnibot_config.yaml)
// for its fixtures, with http_callback to be; modal-with-inputs is synchronous on its callback,
// as Omnibot spells it.
func omnibotHandlers(be string) string {
	cb := func(path string) string {
		return fmt.Sprintf(`
        - module: "omnibot.callbacks.network_callbacks:http_callback"
          kwargs: {request_kwargs: {url: %q}}`, be+path)
	}
	return `
handlers:
  interactive_component_handlers:
    - callback_id: "echo_action_test"
      response_type: "in_channel"
      dialog:
        title: "Echo dialog"
        submit_label: "submit"
        callback_id: "echo_dialog_1"
        elements: [{type: "text", label: "Echo this text", name: "echo_element"}]
      bots: {acme: [pingbot, lonely]}
      callbacks:` + cb("/interactive") + `
    - callback_id: "echo_dialog_1"
      response_type: "in_channel"
      bots: {acme: [pingbot, lonely]}
      callbacks:` + cb("/interactive") + `
    - callback_id: "test_events"
      bots: {acme: [pingbot, lonely]}
      callbacks:` + cb("/interactive") + `
    - callback_id: "modal-with-inputs"
      response_type: "in_channel"
      bots: {acme: [pingbot, lonely]}
      callbacks:` + cb("/sync") + `
          synchronous: true
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

// payloadOf is the backend payload for a fixture: the call whose type (or event type) and callback
// or command are the fixture's.
func payloadOf(be *backend, r omnibotRequest) map[string]any {
	for _, c := range be.calls() {
		switch {
		case c["omnibot_payload_type"] == "interactive_component" && c["type"] == r.input["type"]:
			return c
		case c["omnibot_payload_type"] == "slash_command" && c["command"] == r.input["command"]:
			return c
		case c["omnibot_payload_type"] == "message" && strings.HasPrefix(r.name, "event/"):
			return c
		}
	}
	return nil
}

// TestInboundLegacyInteractiveNoAppID: Omnibot's legacy interactive fixtures (interactive_message,
// dialog_submission, message_action) name no app; signed with the app's secret they are answered
// 200 and dispatched (so is a slash command without api_app_id), and in the verification-token
// mode the fixtures' token finds its app, as Omnibot does. A wrong secret or token is still
// refused. (Before: 401 for every one.)
func TestInboundLegacyInteractiveNoAppID(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	be := startBackend(t, `{}`)
	legacy := []string{"interactive/dialog_submission_echo_test", "interactive/message_action_on_test_message", "interactive/interactive_enterprise"}
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
		slash := omnibotFixture(t, "slash_command/user_issues_echo_command")
		slash.body = strings.Replace(slash.body, "api_app_id=A0PING001&", "", 1)
		if strings.Contains(slash.body, "api_app_id") {
			t.Fatal("the slash command still names its app")
		}
		if m := s.slackPost(slash.path, slash.contentType, slash.body, inboundSecret, time.Now(), 0).must(t, 200); m["response_type"] != "in_channel" {
			t.Errorf("slash command without api_app_id answered %v", m)
		}
		testwait.Until(t, "the slash command at its backend", func() bool { return payloadOf(be, slash) != nil })
		if got := f.Requests("dialog.open"); len(got) != 1 || got[0].Form.Get("trigger_id") != "TEST_TRIGGER_ID" {
			t.Errorf("message_action's dialog.open: %v, want one for TEST_TRIGGER_ID", got)
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
				forged = strings.Replace(r.body, "test_token_123", "forged-token", 1)
			}
			if got := s.do("POST", s.rest+r.path, forged, unsigned); got.code != 401 {
				t.Errorf("%s with another token: %d %s, want 401", name, got.code, got.body)
			}
			got := s.do("POST", s.rest+r.path, r.body, unsigned)
			want := 200
			if name == "interactive/interactive_enterprise" {
				want = 401 // its token (test_token_123) is no app's
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
	ent := omnibotFixture(t, "interactive/interactive_enterprise")
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
	r := omnibotFixture(t, "interactive/view_submission_synchronous_test", true)
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

// TestInboundOmnibotPayloads: the payload each backend gets for Omnibot's fixtures is, leaf by leaf,
// the one Omnibot's own classes build (SlashCommand, InteractiveComponent, Message with a regex
// match): testdata/omnibot/golden, captured by running Omnibot's code (testdata/omnibot/README.md) over the same
// requests and the fake workspace's answers. gantry adds event_id to message payloads only.
// (Before: the slash command's command was "echo", parsed_user, parsed_text, channel and the
// parsed fields missing; interactive payloads lacked parsed_user and parsed_channel; message
// payloads event_type.)
func TestInboundOmnibotPayloads(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	be := startBackend(t, `{}`)
	s := startOmnibotInbound(t, f, be, nil)
	names := []string{
		"slash_command/user_issues_echo_command", "slash_command/echo_with_markup",
		"interactive/dialog_submission_echo_test", "interactive/message_action_on_test_message",
		"interactive/interactive_enterprise", "interactive/view_submission_synchronous_test",
		"event/event_callback_omnibot_help",
	}
	var reqs []omnibotRequest
	for _, name := range names {
		var r omnibotRequest
		if name == "slash_command/echo_with_markup" {
			// Omnibot's slash fixture with text in Slack's markup, so that every parsed field is filled.
			r = omnibotFixture(t, "slash_command/user_issues_echo_command")
			r.name = name
			r.input["text"] = "<@U0BOB0001> see <#C0GENERAL> <!here> :wave: <mailto:bob@example.com|bob@example.com> <https://example.com/x|example>"
			r.input["command"] = "/echo"
			r.input["trigger_id"] = "TEST_TRIGGER_ID_2"
			form := url.Values{}
			for k, v := range r.input {
				form.Set(k, fmt.Sprint(v))
			}
			r.body = form.Encode()
		} else {
			r = omnibotFixture(t, name, true)
		}
		reqs = append(reqs, r)
	}
	if dir := os.Getenv("GANTRY_OMNIBOT_GOLDEN_INPUTS"); dir != "" {
		writeGoldenInputs(t, f, dir, reqs)
	}
	for _, r := range reqs {
		if got := s.slackPost(r.path, r.contentType, r.body, inboundSecret, time.Now(), 0); got.code != 200 {
			t.Fatalf("%s: %d %s", r.name, got.code, got.body)
		}
	}
	for _, r := range reqs {
		var got map[string]any
		testwait.Until(t, r.name+" at its backend", func() bool {
			if r.name == "slash_command/echo_with_markup" || r.name == "slash_command/user_issues_echo_command" {
				for _, c := range be.calls() {
					if c["omnibot_payload_type"] == "slash_command" && c["trigger_id"] == r.input["trigger_id"] {
						got = c
					}
				}
				return got != nil
			}
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

// writeGoldenInputs writes what Omnibot's classes were run on for testdata/omnibot/golden: the
// requests (ids mapped) and the fake workspace's users.info and conversations.info answers.
func writeGoldenInputs(t *testing.T, f *slacktest.Server, dir string, reqs []omnibotRequest) {
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
	b, _ := json.MarshalIndent(map[string]any{"slack": answers, "requests": inputs}, "", "  ")
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
