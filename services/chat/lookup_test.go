package chat

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/testwait"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// TestConcurrentLookupsCoalesce: a thousand concurrent lookups of one uncached email make one Slack
// call, and so do concurrent lookups of one conversation id and concurrent send_im opening one IM.
// The fake holds each first call open until every caller has started and that call has reached
// Slack; a caller that reaches the flight only after it ended must find its answer in the cache, so
// the count is one whatever the scheduler does (it was 2 under CI's load when the cache was filled
// after the flight).
func TestConcurrentLookupsCoalesce(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	svc := newTestService(t, f, nil)
	ctx := context.Background()
	release := make(chan struct{})
	methods := []string{"users.lookupByEmail", "conversations.info", "conversations.open"}
	for _, m := range methods {
		f.Inject(m, slacktest.Fault{Hold: release, Times: 1})
	}
	const n = 1000
	var wg, started sync.WaitGroup
	errs := make(chan error, 3*n)
	run := func(call func() error) {
		started.Add(1)
		wg.Go(func() {
			started.Done()
			if err := call(); err != nil {
				errs <- err
			}
		})
	}
	for range n {
		run(func() error {
			if u, err := svc.GetUser(ctx, "acme", "pingbot", "bob@example.com"); err != nil || u.ID != "U0BOB0001" {
				return fmt.Errorf("GetUser = %+v, %v", u, err)
			}
			return nil
		})
		run(func() error {
			if ch, err := svc.GetChannel(ctx, "acme", "pingbot", "C0GENERAL"); err != nil || ch.ID != "C0GENERAL" {
				return fmt.Errorf("GetChannel = %s, %v", ch.ID, err)
			}
			return nil
		})
	}
	for range 20 {
		run(func() error {
			if _, err := svc.SendIM(ctx, "acme", "pingbot", "bob@example.com", ActionRequest{Action: "chat.postMessage", Kwargs: map[string]any{"text": "hi"}}); err != nil {
				return fmt.Errorf("SendIM: %v", err)
			}
			return nil
		})
	}
	started.Wait()
	// conversations.open comes after the user lookup, so only the first two are in flight yet.
	for _, m := range methods[:2] {
		waitForRequest(t, f, m)
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, m := range methods {
		if calls := len(f.Requests(m)); calls != 1 {
			t.Errorf("%s called %d times, want 1", m, calls)
		}
	}
}

// waitForRequest waits until the fake has received a call of method.
func waitForRequest(t *testing.T, f *slacktest.Server, method string) {
	t.Helper()
	testwait.Until(t, "a call of "+method, func() bool { return len(f.Requests(method)) > 0 })
}

// TestCoalescedLookupSurvivesItsStarter: the caller whose lookup the others joined goes away; the
// others still get the answer.
func TestCoalescedLookupSurvivesItsStarter(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	svc := newTestService(t, f, nil)
	f.Inject("users.lookupByEmail", slacktest.Fault{Delay: 300 * time.Millisecond, Times: 1})
	starter, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := svc.GetUser(starter, "acme", "pingbot", "bob@example.com")
		done <- err
	}()
	waitForRequest(t, f, "users.lookupByEmail")
	joined := make(chan error, 1)
	go func() {
		_, err := svc.GetUser(context.Background(), "acme", "pingbot", "bob@example.com")
		joined <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("starter: %v, want canceled", err)
	}
	if err := <-joined; err != nil {
		t.Errorf("joined lookup: %v, want the answer", err)
	}
	if calls := len(f.Requests("users.lookupByEmail")); calls != 1 {
		t.Errorf("users.lookupByEmail called %d times, want 1", calls)
	}
}

// TestUnknownAnswersAreRemembered: Slack's "no such user" and "no such conversation" are remembered
// for -chat-negative-cache-ttl (bots and deleted users included), then asked again; 0 turns it off.
func TestUnknownAnswersAreRemembered(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	f.AddUser(slacktest.User{ID: "U0DEPLOYB", Name: "deploybot", Email: "deploybot@example.com", IsBot: true})
	svc := newTestService(t, f, func(c *Config) { c.NegativeCacheTTL = 30 * time.Second })
	now := time.Now()
	svc.now = func() time.Time { return now }
	ctx := context.Background()
	for range 5 {
		for _, email := range []string{"nobody@example.com", "NOBODY@example.com", "gone@example.com", "deploybot@example.com"} {
			if _, err := svc.GetUser(ctx, "acme", "pingbot", email); !errors.Is(err, ErrUserNotFound) {
				t.Fatalf("GetUser(%s) = %v, want not found", email, err)
			}
		}
		if _, err := svc.GetChannel(ctx, "acme", "pingbot", "C0MISSING1"); !errors.Is(err, ErrChannelNotFound) {
			t.Fatalf("GetChannel = %v, want not found", err)
		}
	}
	if calls := len(f.Requests("users.lookupByEmail")); calls != 3 {
		t.Errorf("users.lookupByEmail called %d times for 3 unknown emails asked 5 times, want 3", calls)
	}
	if calls := len(f.Requests("conversations.info")); calls != 1 {
		t.Errorf("conversations.info called %d times, want 1", calls)
	}
	// Someone who joins is found once the TTL has passed.
	f.AddUser(slacktest.User{ID: "U0NEW0001", Name: "newbie", Email: "nobody@example.com"})
	now = now.Add(31 * time.Second)
	if u, err := svc.GetUser(ctx, "acme", "pingbot", "nobody@example.com"); err != nil || u.ID != "U0NEW0001" {
		t.Errorf("after the TTL: %+v, %v", u, err)
	}

	f.Reset()
	off := newTestService(t, f, func(c *Config) { c.NegativeCacheTTL = 0 })
	for range 3 {
		_, _ = off.GetUser(ctx, "acme", "pingbot", "ghost@example.com")
	}
	if calls := len(f.Requests("users.lookupByEmail")); calls != 3 {
		t.Errorf("with the negative cache off: %d calls, want 3", calls)
	}
}

// TestMissSetIsBounded: a flood of distinct unknown keys cannot grow the set past maxMisses; the
// oldest go first, and entries expire.
func TestMissSetIsBounded(t *testing.T) {
	m := newMissSet(time.Minute)
	now := time.Now()
	for i := range maxMisses + 500 {
		m.add(fmt.Sprintf("email\x00random%d@example.com", i), now)
	}
	if n := m.len(); n != maxMisses {
		t.Errorf("%d entries, want %d", n, maxMisses)
	}
	if m.has("email\x00random0@example.com", now) || !m.has(fmt.Sprintf("email\x00random%d@example.com", maxMisses+499), now) {
		t.Error("the oldest should have gone, the newest stayed")
	}
	m.add("late", now.Add(2*time.Minute))
	if n := m.len(); n != 1 || len(m.order) != 1 {
		t.Errorf("after the TTL: %d entries, %d queued, want 1", n, len(m.order))
	}
}

// TestChannelByIDFromCache: a conversation cached under its name is found by its id without asking
// Slack, also when Slack is down, and so is the bot's IM; a stale one is served when Slack fails.
func TestChannelByIDFromCache(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	svc := newTestService(t, f, func(c *Config) { c.SlackRetries = 0 })
	ctx := context.Background()
	svc.refreshTeam(ctx, svc.teams["acme"], time.Minute)
	for _, m := range []string{"conversations.info", "conversations.list"} {
		f.Inject(m, slacktest.Fault{Status: http.StatusServiceUnavailable})
	}
	f.Reset()
	for _, id := range []string{"C0GENERAL", "G0SECRET1", "C0MPIM001", "D0ALICE01"} {
		if ch, err := svc.GetChannel(ctx, "acme", "pingbot", id); err != nil || ch.ID != id {
			t.Errorf("GetChannel(%s) with Slack down = %s, %v", id, ch.ID, err)
		}
	}
	if n := len(f.Requests("")); n != 0 {
		t.Errorf("%d Slack calls for cached conversations, want 0", n)
	}
	// Stale: Slack is asked, and fails; the cached entry is served.
	now := time.Now().Add(time.Hour)
	svc.now = func() time.Time { return now }
	if ch, err := svc.GetChannel(ctx, "acme", "pingbot", "C0GENERAL"); err != nil || ch.ID != "C0GENERAL" {
		t.Errorf("stale with Slack down = %s, %v", ch.ID, err)
	}
	if n := len(f.Requests("conversations.info")); n != 1 {
		t.Errorf("conversations.info called %d times for a stale entry, want 1", n)
	}
	// An id looked up from Slack is cached under its id (and name) too.
	f.ClearFaults()
	svc2 := newTestService(t, f, nil)
	f.Reset()
	for range 3 {
		if ch, err := svc2.GetChannel(ctx, "acme", "pingbot", "G0SECRET1"); err != nil || ch.ID != "G0SECRET1" {
			t.Fatalf("GetChannel = %s, %v", ch.ID, err)
		}
	}
	if n := len(f.Requests("conversations.info")); n != 1 {
		t.Errorf("conversations.info called %d times for one id, want 1", n)
	}
}

// TestJoinerDoesNotInheritATimeout: a lookup that joined one whose starter's deadline runs out asks
// again on its own deadline instead of failing with the starter's timeout.
func TestJoinerDoesNotInheritATimeout(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	svc := newTestService(t, f, nil)
	f.Inject("users.lookupByEmail", slacktest.Fault{Delay: time.Hour, Times: 1})
	starter, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := svc.GetUser(starter, "acme", "pingbot", "bob@example.com")
		done <- err
	}()
	waitForRequest(t, f, "users.lookupByEmail")
	if u, err := svc.GetUser(context.Background(), "acme", "pingbot", "bob@example.com"); err != nil || u.ID != "U0BOB0001" {
		t.Errorf("joiner: %+v, %v, want the user", u, err)
	}
	if err := <-done; !errors.Is(err, ErrSlackTimeout) {
		t.Errorf("starter: %v, want its timeout", err)
	}
}
