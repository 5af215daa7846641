package chat

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/testwait"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

func TestGetUser(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	svc := newTestService(t, f, nil)
	ctx := context.Background()

	u, err := svc.GetUser(ctx, "acme", "pingbot", "alice@example.com")
	if err != nil || u.ID != "U0ALICE01" || u.Name != "Alice A" || u.TeamID != "T0FAKE001" {
		t.Fatalf("GetUser = %+v, %v", u, err)
	}
	// The second lookup is served from the cache (read-through on the first miss only).
	if _, err := svc.GetUser(ctx, "acme", "pingbot", "ALICE@example.com"); err != nil {
		t.Fatal(err)
	}
	if n := len(f.Requests("users.lookupByEmail")); n != 1 {
		t.Errorf("users.lookupByEmail called %d times, want 1", n)
	}
	if r := f.Requests("users.lookupByEmail")[0]; r.Token != botToken {
		t.Errorf("lookup used token %q, want the bot token", r.Token)
	}
	// No display name: the user name.
	if u, _ := svc.GetUser(ctx, "acme", "pingbot", "bob@example.com"); u.Name != "bob" {
		t.Errorf("name = %q, want bob", u.Name)
	}
	for _, tt := range []struct {
		team, bot, email string
		want             error
	}{
		{"acme", "pingbot", "nobody@example.com", ErrUserNotFound},
		{"acme", "pingbot", "gone@example.com", ErrUserNotFound}, // deleted
		{"nope", "pingbot", "alice@example.com", ErrTeamNotFound},
		{"acme", "nope", "alice@example.com", ErrBotNotFound},
		{"acme", "notoken", "alice@example.com", ErrBotNotFound},
	} {
		if _, err := svc.GetUser(ctx, tt.team, tt.bot, tt.email); !errors.Is(err, tt.want) {
			t.Errorf("GetUser(%s/%s/%s) = %v, want %v", tt.team, tt.bot, tt.email, err, tt.want)
		}
	}
}

func TestDeletedUserIsEvicted(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	svc := newTestService(t, f, func(c *Config) { c.CacheTTL = time.Nanosecond }) // every entry is stale at once
	ctx := context.Background()
	if _, err := svc.GetUser(ctx, "acme", "pingbot", "bob@example.com"); err != nil {
		t.Fatal(err)
	}
	f.DeleteUser("U0BOB0001")
	if _, err := svc.GetUser(ctx, "acme", "pingbot", "bob@example.com"); !errors.Is(err, ErrUserNotFound) {
		t.Fatalf("deleted user: %v, want not found", err)
	}
	if _, ok, _ := svc.teams["acme"].cache.userByEmail("bob@example.com", time.Now(), time.Hour); ok {
		t.Error("deleted user still cached")
	}
	if _, err := svc.SendIM(ctx, "acme", "pingbot", "bob@example.com", ActionRequest{Action: "chat.postMessage", Kwargs: map[string]any{"text": "hi"}}); !errors.Is(err, ErrUserNotFound) {
		t.Errorf("send_im to a deleted user: %v, want not found", err)
	}
}

func TestStaleUserServedWhenSlackIsDown(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	svc := newTestService(t, f, func(c *Config) { c.CacheTTL = time.Nanosecond; c.SlackRetries = 0 })
	ctx := context.Background()
	if _, err := svc.GetUser(ctx, "acme", "pingbot", "alice@example.com"); err != nil {
		t.Fatal(err)
	}
	f.Inject("users.lookupByEmail", slacktest.Fault{Status: http.StatusServiceUnavailable})
	if u, err := svc.GetUser(ctx, "acme", "pingbot", "alice@example.com"); err != nil || u.ID != "U0ALICE01" {
		t.Fatalf("GetUser with Slack down = %+v, %v, want the stale entry", u, err)
	}
	if _, err := svc.GetUser(ctx, "acme", "pingbot", "bob@example.com"); !errors.Is(err, ErrSlackUnavailable) {
		t.Fatalf("uncached user with Slack down: %v, want unavailable", err)
	}
}

func TestGetChannel(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	svc := newTestService(t, f, nil)
	ctx := context.Background()
	for _, tt := range []struct{ name, wantID string }{
		{"general", "C0GENERAL"},
		{"#general", "C0GENERAL"},
		{"secret", "G0SECRET1"},
		{"mpdm-alice--bob-1", "C0MPIM001"},
		{"D0ALICE01", "D0ALICE01"}, // by id
	} {
		ch, err := svc.GetChannel(ctx, "acme", "pingbot", tt.name)
		if err != nil || ch.ID != tt.wantID {
			t.Errorf("GetChannel(%q) = %s, %v; want %s", tt.name, ch.ID, err, tt.wantID)
		}
	}
	ch, _ := svc.GetChannel(ctx, "acme", "pingbot", "general")
	if ch.Topic.Value != "all things" || !ch.IsChannel || len(ch.Members) != 1 {
		t.Errorf("general = %+v", ch)
	}
	// One conversations.list filled the cache for every name lookup.
	if n := len(f.Requests("conversations.list")); n != 1 {
		t.Errorf("conversations.list called %d times, want 1", n)
	}
	if types := f.Requests("conversations.list")[0].Form.Get("types"); types != "public_channel,private_channel,mpim" {
		t.Errorf("types = %q", types)
	}
	// The bot's IM with a user, by user id (the IM list is read on the first such lookup).
	if ch, err := svc.GetChannel(ctx, "acme", "pingbot", "U0ALICE01"); err != nil || ch.ID != "D0ALICE01" {
		t.Errorf("IM by user id = %s, %v", ch.ID, err)
	}
	for _, name := range []string{"random", "#", "C0MISSING1", "U0BOB0001"} {
		if _, err := svc.GetChannel(ctx, "acme", "pingbot", name); !errors.Is(err, ErrChannelNotFound) {
			t.Errorf("GetChannel(%q) = %v, want not found", name, err)
		}
	}
}

func TestGetIMs(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	svc := newTestService(t, f, nil)
	ims, err := svc.GetIMs(context.Background(), "acme", "pingbot")
	if err != nil || len(ims) != 1 || ims[0].ID != "D0ALICE01" || ims[0].User != "U0ALICE01" || !ims[0].IsIM {
		t.Fatalf("GetIMs = %+v, %v", ims, err)
	}
	if r := f.Requests("conversations.list"); len(r) != 1 || r[0].Form.Get("types") != "im" || r[0].Token != botToken {
		t.Errorf("requests %+v", r)
	}
	// Each bot has its own IMs, listed with its own token.
	if ims, err := svc.GetIMs(context.Background(), "acme", "otherbot"); err != nil || len(ims) != 1 {
		t.Fatalf("otherbot GetIMs = %+v, %v", ims, err)
	}
	if r := f.Requests("conversations.list"); len(r) != 2 || r[1].Token != bot2Token {
		t.Errorf("otherbot listed with %+v", r)
	}
}

func TestAction(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	svc := newTestService(t, f, nil)
	ctx := context.Background()
	// Fill the cache the parser reads.
	svc.refreshTeam(ctx, svc.teams["acme"], time.Minute)

	res, err := svc.Action(ctx, "acme", "pingbot", ActionRequest{Action: "chat.postMessage", Kwargs: map[string]any{
		"channel": "C0GENERAL", "text": "@alice see #general and use @here", "as_user": true,
		"attachments": []any{map[string]any{"text": "x"}}, "unfurl": nil, "token": "xoxb-caller",
		"omnibot_parse": map[string]any{"text": []any{"users", "channels", "specials"}},
	}})
	if err != nil || !res.OK {
		t.Fatalf("Action = %+v, %v", res, err)
	}
	posts := f.Requests("chat.postMessage")
	if len(posts) != 1 {
		t.Fatalf("%d posts", len(posts))
	}
	p := posts[0]
	wantForm := map[string]string{
		"channel": "C0GENERAL", "text": "<@U0ALICE01|Alice A> see <#C0GENERAL|general> and use <!here|here>",
		"as_user": "true", "attachments": `[{"text":"x"}]`,
	}
	for k, v := range wantForm {
		if got := p.Form.Get(k); got != v {
			t.Errorf("form %s = %q, want %q", k, got, v)
		}
	}
	for _, k := range []string{"omnibot_parse", "unfurl", "token"} {
		if p.Form.Has(k) {
			t.Errorf("form has %s", k)
		}
	}
	if p.Token != botToken || p.ContentType != "application/x-www-form-urlencoded" {
		t.Errorf("token %q content type %q", p.Token, p.ContentType)
	}
	if !strings.Contains(string(res.Body), `"text":"\u003c@U0ALICE01|Alice A\u003e`) && !strings.Contains(string(res.Body), `<@U0ALICE01|Alice A>`) {
		t.Errorf("body %s", res.Body)
	}

	// ok:false passes through.
	res, err = svc.Action(ctx, "acme", "otherbot", ActionRequest{Action: "chat.postMessage", Kwargs: map[string]any{"channel": "C0NOPE"}})
	if err != nil || res.OK || res.Error != "channel_not_found" || string(res.Body) != `{"ok":false,"error":"channel_not_found"}`+"\n" {
		t.Fatalf("Action = %+v %s, %v", res, res.Body, err)
	}

	for _, tt := range []struct {
		req  ActionRequest
		want string
	}{
		{ActionRequest{Kwargs: map[string]any{}}, "action not provided"},
		{ActionRequest{Action: "chat.postMessage"}, "kwargs not provided"},
		{ActionRequest{Action: "../admin", Kwargs: map[string]any{}}, "method name"},
		{ActionRequest{Action: "chat.postMessage", Kwargs: map[string]any{}, Parse: map[string]any{"text": []any{"users"}}}, "not in kwargs"},
	} {
		if _, err := svc.Action(ctx, "acme", "pingbot", tt.req); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Action(%+v) = %v, want bad request %q", tt.req, err, tt.want)
		}
	}
}

func TestActionRetriesWithUserToken(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	svc := newTestService(t, f, nil)
	for _, code := range []string{"missing_scope", "not_allowed_token_type", "channel_not_found", "not_in_channel"} {
		f.Reset()
		f.Inject("reactions.add", slacktest.Fault{Token: botToken, Error: code, Times: 1})
		res, err := svc.Action(context.Background(), "acme", "pingbot", ActionRequest{Action: "reactions.add", Kwargs: map[string]any{"name": "tada"}})
		if err != nil || !res.OK {
			t.Fatalf("%s: %+v, %v", code, res, err)
		}
		r := f.Requests("reactions.add")
		if len(r) != 2 || r[0].Token != botToken || r[1].Token != userToken {
			t.Errorf("%s: calls %+v", code, r)
		}
	}
	// Other errors are not retried, and a bot without a user token is not either.
	f.Reset()
	f.Inject("reactions.add", slacktest.Fault{Error: "invalid_name", Times: 1})
	if res, _ := svc.Action(context.Background(), "acme", "pingbot", ActionRequest{Action: "reactions.add", Kwargs: map[string]any{}}); res.OK || len(f.Requests("reactions.add")) != 1 {
		t.Errorf("invalid_name: %+v, %d calls", res, len(f.Requests("reactions.add")))
	}
	f.Reset()
	f.Inject("reactions.add", slacktest.Fault{Error: "missing_scope", Times: 1})
	if res, _ := svc.Action(context.Background(), "acme", "otherbot", ActionRequest{Action: "reactions.add", Kwargs: map[string]any{}}); res.OK || len(f.Requests("reactions.add")) != 1 {
		t.Errorf("otherbot: %+v, %d calls", res, len(f.Requests("reactions.add")))
	}
}

func TestActionRateLimitAndFailures(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	svc := newTestService(t, f, func(c *Config) { c.SlackMaxRetryAfter = 2 * time.Second })
	ctx := context.Background()
	post := ActionRequest{Action: "reactions.add", Kwargs: map[string]any{}}

	// A short Retry-After is waited out.
	f.Inject("reactions.add", slacktest.Fault{Status: http.StatusTooManyRequests, RetryAfter: 1, Times: 1})
	if res, err := svc.Action(ctx, "acme", "pingbot", post); err != nil || !res.OK || len(f.Requests("reactions.add")) != 2 {
		t.Fatalf("after 429: %+v, %v, %d calls", res, err, len(f.Requests("reactions.add")))
	}
	// A long one is answered at once with Slack's body.
	f.Reset()
	f.Inject("reactions.add", slacktest.Fault{Status: http.StatusTooManyRequests, RetryAfter: 30, Times: 1})
	res, err := svc.Action(ctx, "acme", "pingbot", post)
	if err != nil || !res.RateLimited || res.RetryAfter != 30*time.Second || !strings.Contains(string(res.Body), "ratelimited") || len(f.Requests("reactions.add")) != 1 {
		t.Fatalf("long 429: %+v, %v", res, err)
	}
	// Slack's window is shared: the next request does not call Slack, and is told the time left.
	res, err = svc.Action(ctx, "acme", "pingbot", post)
	if err != nil || !res.RateLimited || res.RetryAfter <= 28*time.Second || res.RetryAfter > 30*time.Second || !strings.Contains(string(res.Body), "ratelimited") || len(f.Requests("reactions.add")) != 1 {
		t.Fatalf("within the window: %+v, %v, %d calls", res, err, len(f.Requests("reactions.add")))
	}
	// The rest runs on a service that has not seen that window.
	svc = newTestService(t, f, func(c *Config) { c.SlackMaxRetryAfter = 2 * time.Second })
	// 5xx and then success: retried when the method is idempotent (a read).
	read := ActionRequest{Action: "auth.test", Kwargs: map[string]any{}}
	f.Reset()
	f.Inject("auth.test", slacktest.Fault{Status: http.StatusBadGateway, Times: 2})
	if res, err := svc.Action(ctx, "acme", "pingbot", read); err != nil || !res.OK || len(f.Requests("auth.test")) != 3 {
		t.Fatalf("after 5xx: %+v, %v, %d calls", res, err, len(f.Requests("auth.test")))
	}
	// Slack that stays down: bounded retries, then unavailable.
	f.Reset()
	f.Inject("auth.test", slacktest.Fault{Status: http.StatusInternalServerError})
	if _, err := svc.Action(ctx, "acme", "pingbot", read); !errors.Is(err, ErrSlackUnavailable) || len(f.Requests("auth.test")) != 3 {
		t.Fatalf("down: %v, %d calls", err, len(f.Requests("auth.test")))
	}
	// A write may have been performed before the 5xx: it is not retried (it used to be, and a retried
	// post could post twice).
	f.Reset()
	f.ClearFaults()
	f.Inject("reactions.add", slacktest.Fault{Status: http.StatusBadGateway, Times: 1})
	if _, err := svc.Action(ctx, "acme", "pingbot", post); !errors.Is(err, ErrSlackUnavailable) || len(f.Requests("reactions.add")) != 1 {
		t.Fatalf("write after 5xx: %v, %d calls, want unavailable after 1", err, len(f.Requests("reactions.add")))
	}
	f.ClearFaults()
	// Slow Slack: the request's deadline ends it with a timeout.
	f.Inject("reactions.add", slacktest.Fault{Delay: time.Minute})
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := svc.Action(short, "acme", "pingbot", post); !errors.Is(err, ErrSlackTimeout) {
		t.Fatalf("slow: %v, want timeout", err)
	}
	f.ClearFaults()
	// An unreachable Slack.
	svc2 := newTestService(t, f, func(c *Config) { c.SlackAPIURL = "http://127.0.0.1:1/api/"; c.SlackRetries = 1 })
	if _, err := svc2.Action(ctx, "acme", "pingbot", post); !errors.Is(err, ErrSlackUnavailable) {
		t.Fatalf("unreachable: %v", err)
	}
}

func TestSendIM(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	svc := newTestService(t, f, nil)
	ctx := context.Background()
	msg := func() ActionRequest {
		return ActionRequest{Action: "chat.postMessage", Kwargs: map[string]any{"text": "hi", "channel": "C0GENERAL"}}
	}
	// bob has no IM yet: conversations.open, then the post goes to it.
	res, err := svc.SendIM(ctx, "acme", "pingbot", "bob@example.com", msg())
	if err != nil || !res.OK {
		t.Fatalf("SendIM = %+v, %v", res, err)
	}
	opens := f.Requests("conversations.open")
	posts := f.Requests("chat.postMessage")
	if len(opens) != 1 || opens[0].Form.Get("users") != "U0BOB0001" || len(posts) != 1 || !strings.HasPrefix(posts[0].Form.Get("channel"), "D0OPEN") {
		t.Fatalf("opens %+v posts %+v", opens, posts)
	}
	// The opened IM is cached.
	if _, err := svc.SendIM(ctx, "acme", "pingbot", "bob@example.com", msg()); err != nil || len(f.Requests("conversations.open")) != 1 {
		t.Fatalf("second SendIM: %v, %d opens", err, len(f.Requests("conversations.open")))
	}
	// A known IM from the refresh needs no open.
	svc.refreshTeam(ctx, svc.teams["acme"], time.Minute)
	f.Reset()
	if _, err := svc.SendIM(ctx, "acme", "pingbot", "alice@example.com", msg()); err != nil || len(f.Requests("conversations.open")) != 0 || f.Requests("chat.postMessage")[0].Form.Get("channel") != "D0ALICE01" {
		t.Fatalf("alice: %v %+v", err, f.Requests(""))
	}
	if _, err := svc.SendIM(ctx, "acme", "pingbot", "nobody@example.com", msg()); !errors.Is(err, ErrUserNotFound) || err.Error() != "unable to find slack user for given email." {
		t.Errorf("unknown user: %v", err)
	}
	f.Inject("conversations.open", slacktest.Fault{Error: "cannot_dm_bot"})
	f.AddUser(slacktest.User{ID: "U0CAROL01", Name: "carol", Email: "carol@example.com"})
	if _, err := svc.SendIM(ctx, "acme", "pingbot", "carol@example.com", msg()); !errors.Is(err, ErrIMNotFound) || err.Error() != "unable to find IM channel." {
		t.Errorf("open fails: %v", err)
	}
}

func TestRefreshPagesAndEvicts(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	f.SetPageSize(1)
	svc := newTestService(t, f, nil)
	ctx := context.Background()
	tm := svc.teams["acme"]
	svc.refreshTeam(ctx, tm, time.Minute)
	if n := len(f.Requests("users.list")); n != 3 {
		t.Errorf("users.list pages = %d, want 3", n)
	}
	now := time.Now()
	if _, ok, _ := tm.cache.userByEmail("bob@example.com", now, time.Hour); !ok {
		t.Error("bob not cached")
	}
	if _, ok, _ := tm.cache.userByEmail("gone@example.com", now, time.Hour); ok {
		t.Error("deleted user cached")
	}
	if _, ok, _ := tm.cache.channelByName("secret", now, time.Hour); !ok {
		t.Error("private channel not cached")
	}
	// A user deleted since the last refresh disappears with the next one.
	f.DeleteUser("U0BOB0001")
	svc.refreshTeam(ctx, tm, time.Minute)
	if _, ok, _ := tm.cache.userByEmail("bob@example.com", time.Now(), time.Hour); ok {
		t.Error("deleted user still cached after refresh")
	}
	// The refresher waits out a rate limit instead of giving up.
	f.Reset()
	f.Inject("users.list", slacktest.Fault{Status: http.StatusTooManyRequests, RetryAfter: 1, Times: 1})
	svc.refreshTeam(ctx, tm, time.Minute)
	if n := len(f.Requests("users.list")); n != 4 { // one 429, then three pages
		t.Errorf("users.list calls after a 429 = %d, want 4", n)
	}
}

func TestRunStopsWithContext(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	svc := newTestService(t, f, func(c *Config) { c.RefreshInterval = time.Hour })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	// The first refresh runs at once; wait for its last call (the IM lists), then stop.
	testwait.Until(t, "the first refresh's IM lists", func() bool { return len(f.Requests("conversations.list")) >= 3 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestRequireTokens(t *testing.T) {
	fc, err := ParseFileConfig([]byte(testFile))
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.RequireTokens = true
	if _, err := NewService(cfg, fc, testCreds, nil); err == nil || !strings.Contains(err.Error(), "acme/notoken") || !strings.HasPrefix(err.Error(), "-chat-require-tokens") {
		t.Fatalf("err = %v", err)
	}
}
