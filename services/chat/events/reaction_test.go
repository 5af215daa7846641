package events

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// historyScopeless is a Slack where the bot may not read channel history (conversations.history
// answers missing_scope), as for a bot installed with only the scopes Omnibot needed. It records
// which reads were made as actions (Call, which may fall back to a person's token).
type historyScopeless struct {
	*fakeSlack
	calledAsAction []string
}

func (s *historyScopeless) answer(method string) (json.RawMessage, bool) {
	if method == "conversations.history" {
		return json.RawMessage(`{"ok":false,"error":"missing_scope","needed":"channels:history","provided":"chat:write,reactions:read"}`), true
	}
	return nil, false
}

func (s *historyScopeless) Call(ctx context.Context, team, bot, method string, kwargs map[string]any) (json.RawMessage, error) {
	s.calledAsAction = append(s.calledAsAction, method)
	if raw, ok := s.answer(method); ok {
		return raw, nil
	}
	return s.fakeSlack.Call(ctx, team, bot, method, kwargs)
}

func (s *historyScopeless) Lookup(ctx context.Context, team, bot, method string, kwargs map[string]any) (json.RawMessage, error) {
	if raw, ok := s.answer(method); ok {
		s.fakeSlack.mu.Lock()
		s.fakeSlack.calls = append(s.fakeSlack.calls, slackCall{method, kwargs})
		s.fakeSlack.mu.Unlock()
		return raw, nil
	}
	return s.fakeSlack.Call(ctx, team, bot, method, kwargs)
}

func reactionEvent(channel string, itemUser any) map[string]any {
	ev := map[string]any{"type": "reaction_added", "user": "U0ALICE01", "reaction": "white_check_mark", "event_ts": "1700000001.000300",
		"item": map[string]any{"type": "message", "channel": channel, "ts": "1700000000.000200"}}
	if itemUser != nil {
		ev["item_user"] = itemUser
	}
	return ev
}

// TestReactionTrustsItemUser: as Omnibot, a reaction's item_user says whose message it is (compared
// with the bot's user of auth.test); Slack is asked (conversations.history, with the bot's token)
// only when the event has none, and a reaction whose message cannot be told the bot's is dropped
// with a warning saying why. Before, gantry always asked conversations.history, and on missing_scope
// asked again with the installing user's token, then dropped the reaction at INFO: a bot without
// history scopes lost every reaction handler.
func TestReactionTrustsItemUser(t *testing.T) {
	for _, tc := range []struct {
		name         string
		ev           map[string]any
		scopeless    bool
		wantCalled   bool
		wantHistory  bool
		wantWarnings []string
	}{
		{"item_user is the bot, no history scope", reactionEvent("C0GENERAL", testBotUser), true, true, false, nil},
		{"item_user is a person, in a channel of the bot's messages", reactionEvent("C0BOTMSGS", "U0ALICE01"), false, false, false, nil},
		{"no item_user: Slack asked, the bot's message", reactionEvent("C0BOTMSGS", nil), false, true, true, nil},
		{"no item_user: Slack asked, a person's message", reactionEvent("C0GENERAL", nil), false, false, true, nil},
		{"no item_user, no history scope: dropped with a warning", reactionEvent("C0GENERAL", nil), true, false, true,
			[]string{"missing_scope (the bot's token needs channels:history; the event carried no item_user)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := newTestBackend(t, `{}`)
			in, fs, st := newTestInbound(t, be)
			core, logs := observer.New(zapcore.InfoLevel)
			in.logger = zap.New(core)
			var sl *historyScopeless
			if tc.scopeless {
				sl = &historyScopeless{fakeSlack: fs}
				in.slack = sl
			}
			if err := in.dispatchAll(context.Background(), eventEnvelope(t, tc.ev)); err != nil {
				t.Fatal(err)
			}
			if called := be.last("/reaction") != nil; called != tc.wantCalled {
				t.Errorf("reaction handler called: %v, want %v", called, tc.wantCalled)
			}
			history := 0
			for _, c := range fs.calls {
				if c.Method == "conversations.history" {
					history++
				}
			}
			if (history > 0) != tc.wantHistory || history > 1 {
				t.Errorf("conversations.history asked %d times, want it asked: %v (once at most)", history, tc.wantHistory)
			}
			if sl != nil && len(sl.calledAsAction) > 0 {
				t.Errorf("reads made as actions (which fall back to the user's token): %v", sl.calledAsAction)
			}
			var warnings []string
			for _, e := range logs.All() {
				if e.Level < zapcore.WarnLevel {
					continue
				}
				reason, _ := e.ContextMap()["reason"].(string)
				warnings = append(warnings, strings.TrimPrefix(reason, "conversations.history: "))
				if !strings.Contains(e.Message, "reaction dropped") {
					t.Errorf("warning %q, want it to say the reaction was dropped", e.Message)
				}
			}
			if diff := cmp.Diff(tc.wantWarnings, warnings); diff != "" {
				t.Errorf("warnings' reasons (-want +got):\n%s", diff)
			}
			if got, want := st.Counter("chat.inbound.event.reaction_dropped").Value(), uint64(len(tc.wantWarnings)); got != want {
				t.Errorf("reaction_dropped = %d, want %d", got, want)
			}
		})
	}
}
