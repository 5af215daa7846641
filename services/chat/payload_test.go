package chat

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// A payload without action or kwargs is refused with the documented 400 before the team or bot is
// looked up: a bot without a token (or an unknown one) must not turn a bad payload into a 404.
func TestBadPayloadIsRefusedBeforeTheBotLookup(t *testing.T) {
	svc := newTestService(t, slacktest.StartWorkspace(t), nil)
	ctx := context.Background()
	for _, tt := range []struct {
		name, team, bot string
		req             ActionRequest
		want            string
	}{
		{"no action, bot without token", "acme", "notoken", ActionRequest{Kwargs: map[string]any{}}, "action not provided in payload"},
		{"no kwargs, bot without token", "acme", "notoken", ActionRequest{Action: "chat.postMessage"}, "kwargs not provided in payload"},
		{"no action, unknown bot", "acme", "nobody", ActionRequest{}, "action not provided in payload"},
		{"no action, unknown team", "nowhere", "nobody", ActionRequest{}, "action not provided in payload"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := svc.Action(ctx, tt.team, tt.bot, tt.req)
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Action: %v, want 400 %q", err, tt.want)
			}
			_, err = svc.SendIM(ctx, tt.team, tt.bot, "alice@example.com", tt.req)
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("SendIM: %v, want 400 %q", err, tt.want)
			}
		})
	}
}
