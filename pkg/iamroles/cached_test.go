package iamroles

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/testwait"
)

// fastCached is a Cached that refreshes every few milliseconds, below what NewCached allows, so tests
// can watch several refreshes happen.
func fastCached(t *testing.T, inner Lister) *Cached {
	t.Helper()
	c := NewCached(inner, 0, 0, logtest.New(t))
	c.refresh = 5 * time.Millisecond
	c.jitter = 2 * time.Millisecond
	return c
}

func rolesEqual(c *Cached, want []string) func() bool {
	return func() bool {
		got, err := c.Roles(context.Background())
		return err == nil && slices.Equal(got, want)
	}
}

func TestCachedRefreshesFromIAM(t *testing.T) {
	a, srv := newFakeAWS(t, "web", "api")
	c := fastCached(t, a)
	c.Start(context.Background())
	t.Cleanup(c.Close)

	testwait.Until(t, "the initial list", rolesEqual(c, []string{"api", "web"}))

	srv.SetRoles("worker", "api", "web")
	testwait.Until(t, "the refresh to pick up a new role", rolesEqual(c, []string{"api", "web", "worker"}))

	// While IAM fails, the cache keeps the last good list even though IAM's roles changed meanwhile.
	srv.FailNext(1<<30, http.StatusInternalServerError, "ServiceFailure")
	srv.SetRoles("api")
	failedFrom := srv.Requests()
	testwait.Until(t, "several failed refreshes", func() bool { return srv.Requests() >= failedFrom+3 })
	got, err := c.Roles(context.Background())
	if err != nil || !slices.Equal(got, []string{"api", "web", "worker"}) {
		t.Fatalf("during the outage Roles = %v, %v; want the last good list", got, err)
	}

	srv.FailNext(0, 0, "")
	testwait.Until(t, "recovery after the outage", rolesEqual(c, []string{"api"}))
}

// fakeLister is a scripted Lister: it answers with roles or err, counts calls, and when gate is set
// blocks each call until the gate is closed.
type fakeLister struct {
	mu    sync.Mutex
	roles []string
	err   error
	calls int
	gate  chan struct{}
}

func (f *fakeLister) Roles(ctx context.Context) ([]string, error) {
	f.mu.Lock()
	f.calls++
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return slices.Clone(f.roles), nil
}

func (f *fakeLister) set(roles []string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.roles, f.err = roles, err
}

func (f *fakeLister) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func TestCachedWithoutStart(t *testing.T) {
	ctx := context.Background()
	errIAM := errors.New("iam down")
	inner := &fakeLister{err: errIAM}
	c := NewCached(inner, 0, 0, nil)

	// With no list yet, a failed fetch is the caller's error; it is not remembered.
	if roles, err := c.Roles(ctx); !errors.Is(err, errIAM) {
		t.Fatalf("Roles = %v, %v; want the inner error", roles, err)
	}
	inner.set([]string{"b", "a"}, nil)
	for i := range 3 {
		roles, err := c.Roles(ctx)
		if err != nil || !slices.Equal(roles, []string{"a", "b"}) {
			t.Fatalf("Roles #%d = %v, %v; want [a b]", i+1, roles, err)
		}
		roles[0] = "changed by the caller"
	}
	if n := inner.callCount(); n != 2 {
		t.Errorf("inner called %d times, want 2 (the failure, then one fetch that is reused)", n)
	}
}

func TestCachedColdBurstFetchesOnce(t *testing.T) {
	gate := make(chan struct{})
	inner := &fakeLister{roles: []string{"a"}, gate: gate}
	c := NewCached(inner, 0, 0, nil)

	const callers = 20
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Go(func() {
			roles, err := c.Roles(context.Background())
			if err == nil && !slices.Equal(roles, []string{"a"}) {
				err = errors.New("wrong roles")
			}
			errs <- err
		})
	}
	testwait.Until(t, "the first fetch to start", func() bool { return inner.callCount() == 1 })
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := inner.callCount(); n != 1 {
		t.Errorf("inner called %d times for a burst on a cold cache, want 1", n)
	}
}

func TestCachedRolesHonoursContext(t *testing.T) {
	inner := &fakeLister{roles: []string{"a"}, gate: make(chan struct{})}
	c := NewCached(inner, 0, 0, nil)
	// One caller holds the fetch; a second, whose context ends while it waits, must give up.
	go c.Roles(context.Background())
	testwait.Until(t, "the first fetch to start", func() bool { return inner.callCount() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if roles, err := c.Roles(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Roles = %v, %v; want context.DeadlineExceeded", roles, err)
	}
	close(inner.gate)
}

func TestCachedStops(t *testing.T) {
	tests := []struct {
		name string
		stop func(c *Cached, cancel context.CancelFunc)
	}{
		{"context", func(_ *Cached, cancel context.CancelFunc) { cancel() }},
		{"close", func(c *Cached, _ context.CancelFunc) { c.Close() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inner := &fakeLister{roles: []string{"a"}}
			c := fastCached(t, inner)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c.Start(ctx)
			c.Start(ctx) // a second Start must not add a loop
			testwait.Until(t, "a few refreshes", func() bool { return inner.callCount() >= 3 })

			// In a goroutine: Close waits for the loop, so a loop that never exits would hang the test
			// instead of failing it.
			go tt.stop(c, cancel)
			select {
			case <-c.done:
			case <-time.After(10 * time.Second):
				t.Fatal("the refresh loop did not exit")
			}
			stoppedAt := inner.callCount()
			c.Close() // idempotent, and must not block once the loop is gone
			if roles, err := c.Roles(context.Background()); err != nil || !slices.Equal(roles, []string{"a"}) {
				t.Errorf("after stopping, Roles = %v, %v; want the cached list", roles, err)
			}
			if n := inner.callCount(); n != stoppedAt {
				t.Errorf("inner called %d more times after the loop exited", n-stoppedAt)
			}
		})
	}

	t.Run("close-before-start", func(t *testing.T) {
		c := NewCached(&fakeLister{}, 0, 0, nil)
		c.Close()
		c.Start(context.Background())
		c.mu.Lock()
		started := c.started
		c.mu.Unlock()
		if started {
			t.Error("Start after Close started a refresh loop")
		}
	})
}

func TestNewCachedIntervals(t *testing.T) {
	tests := []struct {
		name                      string
		refresh, jitter           time.Duration
		wantRefresh, wantJitterAt time.Duration
	}{
		{"defaults", 0, 0, DefaultRefresh, DefaultRefresh / 10},
		{"negative", -time.Second, -time.Second, DefaultRefresh, DefaultRefresh / 10},
		{"below-minimum", time.Second, 0, MinRefresh, MinRefresh / 10},
		{"at-minimum", MinRefresh, 5 * time.Second, MinRefresh, 5 * time.Second},
		{"configured", 15 * time.Minute, time.Minute, 15 * time.Minute, time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCached(Static{}, tt.refresh, tt.jitter, nil)
			if c.refresh != tt.wantRefresh || c.jitter != tt.wantJitterAt {
				t.Errorf("refresh, jitter = %s, %s; want %s, %s", c.refresh, c.jitter, tt.wantRefresh, tt.wantJitterAt)
			}
			for range 100 {
				if w := c.nextWait(); w < c.refresh || w >= c.refresh+c.jitter {
					t.Fatalf("nextWait = %s, want in [%s, %s)", w, c.refresh, c.refresh+c.jitter)
				}
			}
		})
	}
}

func TestStatic(t *testing.T) {
	tests := []struct {
		name string
		in   Static
		want []string
	}{
		{"nil", nil, []string{}},
		{"sorted", Static{"a", "b"}, []string{"a", "b"}},
		{"unsorted", Static{"web", "api", "worker"}, []string{"api", "web", "worker"}},
		{"duplicates", Static{"b", "a", "b"}, []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := slices.Clone(tt.in)
			got, err := tt.in.Roles(context.Background())
			if err != nil || got == nil || !slices.Equal(got, tt.want) {
				t.Fatalf("Roles = %#v, %v; want %#v", got, err, tt.want)
			}
			if !slices.Equal(tt.in, orig) {
				t.Errorf("Roles reordered the configuration to %v", tt.in)
			}
			if len(got) > 0 {
				got[0] = "changed"
				if again, _ := tt.in.Roles(context.Background()); again[0] == "changed" {
					t.Error("Roles returned the configuration's own slice")
				}
			}
		})
	}
}
