package chat

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// withUnlistedUsers adds the users Omnibot never caches: a bot (with an email, as app users can
// have), Slackbot (not flagged is_bot by Slack) and a person without an email.
func withUnlistedUsers(f *slacktest.Server) {
	f.AddUser(slacktest.User{ID: "U0DEPLOYB", Name: "deploybot", Email: "deploybot@example.com", IsBot: true})
	f.AddUser(slacktest.User{ID: "USLACKBOT", Name: "slackbot"})
	f.AddUser(slacktest.User{ID: "U0NOMAIL1", Name: "nomail"})
}

// TestUnlistedUsersNeverFound: a bot is not found and never a mention, on every path (live lookup,
// send_im, the refresh) and in either order, so parsing does not depend on what ran first.
func TestUnlistedUsersNeverFound(t *testing.T) {
	for _, refreshFirst := range []bool{false, true} {
		f := slacktest.StartWorkspace(t)
		withUnlistedUsers(f)
		svc := newTestService(t, f, nil)
		ctx := context.Background()
		if refreshFirst {
			svc.refreshTeam(ctx, svc.teams["acme"], time.Minute)
		}
		if _, err := svc.GetUser(ctx, "acme", "pingbot", "deploybot@example.com"); !errors.Is(err, ErrUserNotFound) {
			t.Errorf("refreshFirst=%v: GetUser(bot) = %v, want not found", refreshFirst, err)
		}
		if _, err := svc.SendIM(ctx, "acme", "pingbot", "deploybot@example.com", ActionRequest{Action: "chat.postMessage", Kwargs: map[string]any{"text": "hi"}}); !errors.Is(err, ErrUserNotFound) {
			t.Errorf("refreshFirst=%v: SendIM(bot) = %v, want not found", refreshFirst, err)
		}
		if !refreshFirst {
			svc.refreshTeam(ctx, svc.teams["acme"], time.Minute)
		}
		f.Reset()
		res, err := svc.Action(ctx, "acme", "pingbot", ActionRequest{Action: "chat.postMessage", Kwargs: map[string]any{
			"channel": "C0GENERAL", "text": "@deploybot @slackbot @nomail @bob",
			"omnibot_parse": map[string]any{"text": []any{"users"}},
		}})
		if err != nil || !res.OK {
			t.Fatalf("Action = %+v, %v", res, err)
		}
		if got, want := f.Requests("chat.postMessage")[0].Form.Get("text"), "@deploybot @slackbot @nomail <@U0BOB0001|bob>"; got != want {
			t.Errorf("refreshFirst=%v: text %q, want %q (only people are mentions)", refreshFirst, got, want)
		}
		c := svc.teams["acme"].cache
		for _, id := range []string{"U0DEPLOYB", "USLACKBOT", "U0NOMAIL1"} {
			c.mu.RLock()
			_, cached := c.users[id]
			c.mu.RUnlock()
			if cached {
				t.Errorf("refreshFirst=%v: %s cached", refreshFirst, id)
			}
		}
	}
}

// TestUserTurnedBotIsEvicted: a cached person whom a later lookup finds a bot (or deleted) is
// evicted from every index, names included.
func TestUserTurnedBotIsEvicted(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	svc := newTestService(t, f, func(c *Config) { c.CacheTTL = time.Nanosecond })
	ctx := context.Background()
	if _, err := svc.GetUser(ctx, "acme", "pingbot", "bob@example.com"); err != nil {
		t.Fatal(err)
	}
	f.AddUser(slacktest.User{ID: "U0BOB0001", Name: "bob", Email: "bob@example.com", IsBot: true})
	if _, err := svc.GetUser(ctx, "acme", "pingbot", "bob@example.com"); !errors.Is(err, ErrUserNotFound) {
		t.Fatalf("bot: %v, want not found", err)
	}
	if _, ok := svc.teams["acme"].cache.userByName("bob"); ok {
		t.Error("bob still a mention")
	}
}

// TestDeletedUserServedUntilTheNextRefresh: a user deleted in Slack is served from a fresh cache
// entry, as Omnibot serves its list until the next update, and not found once a refresh lists the
// workspace again (docs/migrating.md says so).
func TestDeletedUserServedUntilTheNextRefresh(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	svc := newTestService(t, f, nil)
	ctx := context.Background()
	svc.refreshTeam(ctx, svc.teams["acme"], time.Minute)
	f.DeleteUser("U0BOB0001")
	if u, err := svc.GetUser(ctx, "acme", "pingbot", "bob@example.com"); err != nil || u.ID != "U0BOB0001" {
		t.Fatalf("deleted user before the refresh: %+v, %v; want served from the cache", u, err)
	}
	svc.refreshTeam(ctx, svc.teams["acme"], time.Minute)
	if _, err := svc.GetUser(ctx, "acme", "pingbot", "bob@example.com"); !errors.Is(err, ErrUserNotFound) {
		t.Errorf("deleted user after the refresh: %v, want not found", err)
	}
}
