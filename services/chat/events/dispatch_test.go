package events

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/stats"
)

// fakeSlack answers the Web API calls the dispatcher makes (auth.test, users.info,
// conversations.info, conversations.history, actions) and records them.
type fakeSlack struct {
	mu    sync.Mutex
	calls []slackCall
}

type slackCall struct {
	Method string
	Kwargs map[string]any
}

const (
	testBotUser = "U0BOT0001"
	testAppID   = "A0PING001"
)

func (f *fakeSlack) Call(_ context.Context, team, bot, method string, kwargs map[string]any) (json.RawMessage, error) {
	f.mu.Lock()
	f.calls = append(f.calls, slackCall{method, kwargs})
	f.mu.Unlock()
	var ans any
	switch method {
	case "auth.test":
		ans = map[string]any{"ok": true, "user_id": testBotUser}
	case "users.info":
		names := map[string]string{"U0ALICE01": "alice", testBotUser: "pingbot-slack-handle"}
		name, ok := names[kwargs["user"].(string)]
		if !ok {
			return json.RawMessage(`{"ok":false,"error":"user_not_found"}`), nil
		}
		ans = map[string]any{"ok": true, "user": map[string]any{"id": kwargs["user"], "name": name}}
	case "conversations.info":
		id := kwargs["channel"].(string)
		ans = map[string]any{"ok": true, "channel": map[string]any{"id": id, "name": "general", "is_im": strings.HasPrefix(id, "D")}}
	case "conversations.history":
		// Every message in C0BOTMSGS was posted by the bot; the others by a person.
		msg := map[string]any{"user": "U0ALICE01"}
		if kwargs["channel"] == "C0BOTMSGS" {
			msg = map[string]any{"bot_id": "B0PING001", "app_id": testAppID}
		}
		ans = map[string]any{"ok": true, "messages": []any{msg}}
	default:
		ans = map[string]any{"ok": true}
	}
	return json.Marshal(ans)
}

// Lookup records a read as Call does: fakeSlack has one token.
func (f *fakeSlack) Lookup(ctx context.Context, team, bot, method string, kwargs map[string]any) (json.RawMessage, error) {
	return f.Call(ctx, team, bot, method, kwargs)
}

// actions returns the calls that were not lookups: what backends asked for.
func (f *fakeSlack) actions() []slackCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []slackCall
	for _, c := range f.calls {
		switch c.Method {
		case "auth.test", "users.info", "conversations.info", "conversations.history":
		default:
			out = append(out, c)
		}
	}
	return out
}

// testBackend records what handlers POST, by path, and answers reply.
type testBackend struct {
	*httptest.Server
	mu    sync.Mutex
	posts map[string][]map[string]any
	reply string
}

func newTestBackend(t *testing.T, reply string) *testBackend {
	b := &testBackend{posts: map[string][]map[string]any{}, reply: reply}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p map[string]any
		_ = json.NewDecoder(r.Body).Decode(&p)
		b.mu.Lock()
		b.posts[r.URL.Path] = append(b.posts[r.URL.Path], p)
		b.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, b.reply)
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *testBackend) paths() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for p, posts := range b.posts {
		for range posts {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

func (b *testBackend) last(path string) map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	ps := b.posts[path]
	if len(ps) == 0 {
		return nil
	}
	return ps[len(ps)-1]
}

func callbacks(url string) []Callback {
	cb := Callback{Module: "omnibot.callbacks.network_callbacks:http_callback"}
	cb.Kwargs.RequestKwargs = map[string]any{"url": url}
	return []Callback{cb}
}

// newTestInbound is the dispatcher of one bot, pingbot, whose handlers call be: one per kind of
// matching, each on its own path.
func newTestInbound(t *testing.T, be *testBackend) (*Inbound, *fakeSlack, *stats.Store) {
	t.Helper()
	bots := map[string][]string{"acme": {"pingbot"}}
	msg := func(matchType, match, path string, mod func(*MessageHandler)) MessageHandler {
		h := MessageHandler{MatchType: matchType, Match: match, Bots: bots, Callbacks: callbacks(be.URL + path)}
		if mod != nil {
			mod(&h)
		}
		return h
	}
	h := Handlers{
		MessageHandlers: []MessageHandler{
			msg("command", "ping", "/command", nil),
			msg("command", "mention", "/mention", func(h *MessageHandler) { h.MatchMention = true }),
			msg("command", "threaded", "/threaded", func(h *MessageHandler) { h.MatchReply = true }),
			msg("regex", `deploy \d+`, "/regex", nil),
			msg("regex", `(?i)please`, "/absence", func(h *MessageHandler) { h.RegexType = "absence" }),
			msg("reaction", `white_check_mark|heavy_check_mark`, "/reaction", nil),
		},
		SlashCommandHandlers: []SlashHandler{{Command: "/deploy", Bots: bots, Callbacks: callbacks(be.URL + "/slash")}},
	}
	cfg := DefaultConfig()
	cfg.ResponseURLPrefixes = be.URL + "/hooks/"
	slack := &fakeSlack{}
	st := stats.New()
	in, err := New(cfg, []Bot{{Team: "acme", TeamID: "T0FAKE001", Name: "pingbot", AppID: testAppID, SigningSecret: "s"}}, h, nil, slack, st, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	return in, slack, st
}

func eventEnvelope(t *testing.T, ev map[string]any) envelope {
	t.Helper()
	p, err := json.Marshal(map[string]any{"type": "event_callback", "api_app_id": testAppID, "team_id": "T0FAKE001", "event_id": "Ev0TEST001", "event": ev})
	if err != nil {
		t.Fatal(err)
	}
	return envelope{Kind: KindEvent, AppID: testAppID, Payload: p}
}

func message(text string, extra map[string]any) map[string]any {
	ev := map[string]any{"type": "message", "channel": "C0GENERAL", "user": "U0ALICE01", "text": text, "ts": "1700000000.000100"}
	for k, v := range extra {
		if v == nil {
			delete(ev, k)
		} else {
			ev[k] = v
		}
	}
	return ev
}

// TestDispatchMatching: which handlers a message or a reaction reaches, as Omnibot decides it.
func TestDispatchMatching(t *testing.T) {
	reply := map[string]any{"thread_ts": "1699999999.000001"}
	tests := []struct {
		name string
		ev   map[string]any
		want []string // backend paths called
	}{
		{"command directed at the bot", message("<@U0BOT0001> ping now please", nil), []string{"/command"}},
		{"command not directed: only the absence regex", message("ping", nil), []string{"/absence"}},
		{"command in an IM needs no mention", message("ping please", map[string]any{"channel": "D0ALICE01"}), []string{"/command"}},
		{"match_mention: the bot mentioned mid-sentence", message("hey <@U0BOT0001> mention this please", nil), []string{"/mention"}},
		{"without match_mention a mid-sentence command is not called", message("hey <@U0BOT0001> ping please", nil), nil},
		{"regex", message("deploy 42 please", nil), []string{"/regex"}},
		{"regex and absence together", message("deploy 7", nil), []string{"/absence", "/regex"}},
		{"thread reply reaches match_reply handlers only", message("<@U0BOT0001> threaded please", reply), []string{"/threaded"}},
		{"thread reply ignored without match_reply", message("<@U0BOT0001> ping", reply), nil},
		{"thread parent is not a reply", message("<@U0BOT0001> ping please", map[string]any{"thread_ts": "1700000000.000100"}), []string{"/command"}},
		{"subtype ignored", message("<@U0BOT0001> ping", map[string]any{"subtype": "message_changed"}), nil},
		{"bot message ignored", message("<@U0BOT0001> ping", map[string]any{"bot_id": "B0OTHER01"}), nil},
		{"Slackbot ignored", message("<@U0BOT0001> ping", map[string]any{"user": "USLACKBOT"}), nil},
		{"app_mention handled like a message", message("<@U0BOT0001> ping please", map[string]any{"type": "app_mention"}), []string{"/command"}},
		{"reaction to the bot's message", map[string]any{"type": "reaction_added", "user": "U0ALICE01", "reaction": "white_check_mark",
			"item": map[string]any{"type": "message", "channel": "C0BOTMSGS", "ts": "1700000000.000200"}}, []string{"/reaction"}},
		{"reaction not matching fully", map[string]any{"type": "reaction_added", "user": "U0ALICE01", "reaction": "white_check_mark_2",
			"item": map[string]any{"type": "message", "channel": "C0BOTMSGS", "ts": "1700000000.000200"}}, nil},
		{"reaction to someone else's message", map[string]any{"type": "reaction_added", "user": "U0ALICE01", "reaction": "heavy_check_mark",
			"item": map[string]any{"type": "message", "channel": "C0GENERAL", "ts": "1700000000.000200"}}, nil},
		{"other event types ignored", map[string]any{"type": "channel_created"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := newTestBackend(t, `{}`)
			in, _, _ := newTestInbound(t, be)
			if err := in.dispatchAll(context.Background(), eventEnvelope(t, tt.ev)); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, be.paths()); diff != "" {
				t.Errorf("backend paths called (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDispatchEnrichedPayload: the message payload carries Omnibot's parsed fields.
func TestDispatchEnrichedPayload(t *testing.T) {
	be := newTestBackend(t, `{}`)
	in, _, _ := newTestInbound(t, be)
	// A labelled link <url|label> is replaced by its URL, the part before "|".
	text := "<@U0BOT0001> ping <@U0ALICE01> in <#C0RANDOM1|random> <!here> <mailto:a@b.example|a@b.example> <https://x.example/y|x.example/y> :tada:"
	if err := in.dispatchAll(context.Background(), eventEnvelope(t, message(text, nil))); err != nil {
		t.Fatal(err)
	}
	got := be.last("/command")
	if got == nil {
		t.Fatal("the command handler was not called")
	}
	want := map[string]any{
		"omnibot_payload_type": "message",
		"parsed_text":          "@pingbot ping @alice in #random @here a@b.example https://x.example/y :tada:",
		"users":                map[string]any{"<@U0BOT0001>": "pingbot", "<@U0ALICE01>": "alice"},
		"channels":             map[string]any{"<#C0RANDOM1|random>": "random"},
		"specials":             map[string]any{"<!here>": "@here"},
		"emails":               map[string]any{"<mailto:a@b.example|a@b.example>": "a@b.example"},
		"urls":                 map[string]any{"<https://x.example/y|x.example/y>": "https://x.example/y"},
		"emojis":               map[string]any{":tada:": "tada"},
		"directed":             true,
		"mentioned":            true,
		"command_text":         "ping @alice in #random @here a@b.example https://x.example/y :tada:",
		"match_type":           "command",
		"command":              "ping",
		"args":                 "@alice in #random @here a@b.example https://x.example/y :tada:",
		"bot":                  map[string]any{"name": "pingbot", "bot_id": testAppID},
		"team":                 map[string]any{"name": "acme", "team_id": "T0FAKE001"},
		"event_id":             "Ev0TEST001",
		"channel_id":           "C0GENERAL",
		"user":                 "U0ALICE01",
		"ts":                   "1700000000.000100",
	}
	for k, w := range want {
		if diff := cmp.Diff(w, got[k]); diff != "" {
			t.Errorf("%s (-want +got):\n%s", k, diff)
		}
	}
	if _, leaked := got["token"]; leaked {
		t.Error("the payload carries Slack's verification token")
	}
}

// TestDispatchFillsActions: chat.postMessage asked for by a backend gets the origin's channel and
// thread, unless it names its own, and no thread in an IM.
func TestDispatchFillsActions(t *testing.T) {
	tests := []struct {
		name       string
		ev         map[string]any
		kwargs     string
		wantKwargs map[string]any
	}{
		{"channel message: answered in a thread on it", message("<@U0BOT0001> ping please", nil), `{"text":"pong"}`,
			map[string]any{"text": "pong", "channel": "C0GENERAL", "thread_ts": "1700000000.000100"}},
		// As Omnibot (thread_ts = message.ts): the reply's own ts, which Slack posts in the same
		// thread. Before, the parent's ts (thread_ts) was sent.
		{"thread reply: answered with the reply's own ts, as Omnibot", message("<@U0BOT0001> threaded please", map[string]any{"thread_ts": "1699999999.000001"}), `{"text":"pong"}`,
			map[string]any{"text": "pong", "channel": "C0GENERAL", "thread_ts": "1700000000.000100"}},
		{"IM: no thread", message("ping please", map[string]any{"channel": "D0ALICE01", "channel_type": "im"}), `{"text":"pong"}`,
			map[string]any{"text": "pong", "channel": "D0ALICE01"}},
		{"the backend's own channel and thread win", message("<@U0BOT0001> ping please", nil), `{"text":"pong","channel":"C0OTHER01","thread_ts":"1.2"}`,
			map[string]any{"text": "pong", "channel": "C0OTHER01", "thread_ts": "1.2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := newTestBackend(t, `{"actions":[{"action":"chat.postMessage","kwargs":`+tt.kwargs+`},{"action":"reactions.add","kwargs":{"name":"eyes"}}]}`)
			in, slack, _ := newTestInbound(t, be)
			if err := in.dispatchAll(context.Background(), eventEnvelope(t, tt.ev)); err != nil {
				t.Fatal(err)
			}
			acts := slack.actions()
			if len(acts) != 2 || acts[0].Method != "chat.postMessage" || acts[1].Method != "reactions.add" {
				t.Fatalf("actions carried out: %+v", acts)
			}
			if diff := cmp.Diff(tt.wantKwargs, acts[0].Kwargs); diff != "" {
				t.Errorf("chat.postMessage kwargs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(map[string]any{"name": "eyes"}, acts[1].Kwargs); diff != "" {
				t.Errorf("other actions are passed as they are (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDispatchResponsesOnlyToAllowedURLs: a backend's responses are POSTed to the slash command's
// response_url only when it starts with an allowed prefix.
func TestDispatchResponsesOnlyToAllowedURLs(t *testing.T) {
	for _, tt := range []struct {
		name        string
		responseURL func(be *testBackend) string
		wantPosted  bool
	}{
		{"allowed prefix", func(be *testBackend) string { return be.URL + "/hooks/T0/123/abc" }, true},
		{"other path of the same host", func(be *testBackend) string { return be.URL + "/elsewhere" }, false},
		{"other host", func(*testBackend) string { return "https://attacker.example/hooks/x" }, false},
		{"none", func(*testBackend) string { return "" }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			be := newTestBackend(t, `{"responses":[{"text":"done"}]}`)
			in, _, st := newTestInbound(t, be)
			p, _ := json.Marshal(map[string]any{"command": "/deploy", "text": "prod", "token": "legacy-token",
				"channel_id": "C0GENERAL", "user_id": "U0ALICE01", "response_url": tt.responseURL(be)})
			if err := in.dispatchAll(context.Background(), envelope{Kind: KindSlash, AppID: testAppID, Handler: "slash.deploy", Payload: p}); err != nil {
				t.Fatal(err)
			}
			sent := be.last("/slash")
			if sent == nil || sent["command"] != "/deploy" || sent["omnibot_payload_type"] != "slash_command" {
				t.Fatalf("the slash handler got %v", sent)
			}
			if _, leaked := sent["token"]; leaked {
				t.Error("the backend was sent Slack's verification token")
			}
			var posted []map[string]any
			for _, path := range []string{"/hooks/T0/123/abc", "/elsewhere"} {
				if r := be.last(path); r != nil {
					posted = append(posted, r)
				}
			}
			if tt.wantPosted {
				if len(posted) != 1 || posted[0]["text"] != "done" || posted[0]["response_type"] != "ephemeral" {
					t.Errorf("responses posted: %v, want one with Slack's default response_type", posted)
				}
			} else {
				if len(posted) != 0 {
					t.Errorf("a response went to a URL outside the allowed prefixes: %v", posted)
				}
				if v := st.Counter("chat.inbound.handler.slash.deploy.response_refused").Value(); v != 1 {
					t.Errorf("response_refused = %d, want 1", v)
				}
			}
		})
	}
}

// dispatchAll matches a request and carries out every call at once, without the queue (the
// dispatcher fans several calls out through the queue; TestInboundPerHandlerAttempts covers that).
func (in *Inbound) dispatchAll(ctx context.Context, env envelope) error {
	calls, err := in.dispatch(ctx, env)
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range calls {
		errs = append(errs, in.execute(ctx, in.bots[env.AppID], c))
	}
	return errors.Join(errs...)
}
