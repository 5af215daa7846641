package upstream

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/freeport"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/stats"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
)

func TestLimitsAcquireAndRelease(t *testing.T) {
	active := stats.New().Gauge("active")
	l := newLimits(BreakerConfig{MaxRequests: 2, MaxPendingRequests: 2, MaxRetries: 1}, RetryConfig{}, active)

	var releases []func()
	for i := range 2 {
		release, ok := l.acquirePending()
		if !ok {
			t.Fatalf("pending slot %d refused below max_pending_requests", i+1)
		}
		releases = append(releases, release)
	}
	if _, ok := l.acquirePending(); ok {
		t.Error("a third pending slot was given with max_pending_requests 2")
	}
	if n := l.pending.Load(); n != 2 {
		t.Errorf("pending = %d after a refusal, want 2 (a refusal holds no slot)", n)
	}
	for _, release := range releases {
		release()
	}
	if n := l.pending.Load(); n != 0 {
		t.Errorf("pending = %d after every release, want 0", n)
	}

	// Without a budget, max_retries bounds the retries in flight.
	release, ok := l.acquireRetry()
	if !ok {
		t.Fatal("the first retry was refused with max_retries 1")
	}
	if _, ok := l.acquireRetry(); ok {
		t.Error("a second retry was allowed with max_retries 1")
	}
	release()
	if n := l.retries.Load(); n != 0 {
		t.Errorf("retries = %d after the release, want 0", n)
	}

	// With a budget, retries in flight may be BudgetPercent of the requests in flight, and never
	// fewer than MinRetryConcurrency.
	l = newLimits(DefaultBreakers(), RetryConfig{BudgetPercent: 50, MinRetryConcurrency: 1}, active)
	active.Set(6)
	for i := range 3 {
		if _, ok := l.acquireRetry(); !ok {
			t.Fatalf("retry %d refused within 50%% of 6 requests", i+1)
		}
	}
	if _, ok := l.acquireRetry(); ok {
		t.Error("a fourth retry was allowed by a budget of 50% of 6 requests")
	}

	l = newLimits(BreakerConfig{MaxRequests: 2, MaxPendingRequests: 1}, RetryConfig{}, active)
	active.Set(1)
	if l.requestsFull() {
		t.Error("max_requests 2 is full with 1 request in flight")
	}
	active.Set(2)
	if !l.requestsFull() {
		t.Error("max_requests 2 is not full with 2 requests in flight")
	}
}

// silentHost accepts connections and never answers, as a frozen process: a call to it waits for its
// connection to become ready until its deadline.
func silentHost(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = lis.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return lis.Addr().String()
}

// closedHost is an address nothing listens on: every connection to it is refused.
func closedHost(t *testing.T) string {
	t.Helper()
	return freeport.Refused(t)
}

// assertReleased fails unless every slot and gauge a call holds is back to 0.
func assertReleased(t *testing.T, c *cluster) {
	t.Helper()
	if n := c.rqActive.Value(); n != 0 {
		t.Errorf("upstream_rq_active = %d, want 0", n)
	}
	if n := c.limits.pending.Load(); n != 0 {
		t.Errorf("pending requests = %d, want 0", n)
	}
	if n := c.limits.retries.Load(); n != 0 {
		t.Errorf("retries in flight = %d, want 0", n)
	}
	for _, h := range c.hosts {
		if n := h.stats.rqActive.Load(); n != 0 {
			t.Errorf("host %s rq_active = %d, want 0", h.cfg.Address, n)
		}
	}
}

// TestEveryAttemptReleasesItsSlots: after calls whose attempts failed to connect, timed out, were
// refused by max_pending_requests or had their retry refused by the budget, every request, pending
// and retry slot of the cluster and its hosts is back to 0.
func TestEveryAttemptReleasesItsSlots(t *testing.T) {
	read := chatv1.ChatService_GetTeam_FullMethodName // idempotent: retried after a timeout too
	call := func(c *cluster) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return c.Invoke(ctx, read, &chatv1.GetTeamRequest{}, &chatv1.GetTeamResponse{})
	}
	const calls = 3

	t.Run("connect failures", func(t *testing.T) {
		c := testCluster(t, HostConfig{Address: closedHost(t), Weight: 1}, HostConfig{Address: closedHost(t), Weight: 1},
			HostConfig{Address: closedHost(t), Weight: 1})
		for range calls {
			if err := call(c); status.Code(err) != codes.Unavailable {
				t.Fatalf("call to refusing hosts: %v, want Unavailable", err)
			}
		}
		if n := c.rqRetry.Value(); n != calls*uint64(c.retry.NumRetries) {
			t.Errorf("upstream_rq_retry = %d, want %d", n, calls*c.retry.NumRetries)
		}
		assertReleased(t, c)
	})

	t.Run("per-try timeouts", func(t *testing.T) {
		// A connection attempt lasts at least the health check timeout (connectParams): an hour, so
		// the silent hosts' connections stay connecting, never failed, however slow the machine.
		hc, od, panicThreshold, retry, breakers := DefaultHealthCheck(), DefaultOutlier(), 50, DefaultRetry(), DefaultBreakers()
		hc.Timeout = time.Hour
		retry.PerTryTimeout = 50 * time.Millisecond
		c, err := newCluster(ClusterConfig{Name: "chat", Hosts: []HostConfig{{Address: silentHost(t), Weight: 1}, {Address: silentHost(t), Weight: 1}},
			HealthCheck: &hc, Outlier: &od, HealthyPanicThreshold: &panicThreshold, Retry: &retry, Breakers: &breakers},
			nil, nil, stats.New(), logtest.New(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.close)
		// Every host failed its checks: in panic mode every try is bounded, the last one too.
		for _, h := range c.hosts {
			h.failedActiveHC = true
		}
		for range calls {
			if err := call(c); status.Code(err) != codes.DeadlineExceeded {
				t.Fatalf("call to silent hosts: %v, want DeadlineExceeded", err)
			}
		}
		if n := c.rqPerTryTimeout.Value(); n != calls*uint64(1+c.retry.NumRetries) {
			t.Errorf("upstream_rq_per_try_timeout = %d, want %d", n, calls*(1+c.retry.NumRetries))
		}
		assertReleased(t, c)
	})

	t.Run("refused by max_pending_requests", func(t *testing.T) {
		c := testCluster(t, HostConfig{Address: silentHost(t), Weight: 1}, HostConfig{Address: silentHost(t), Weight: 1})
		c.limits.breakers.MaxPendingRequests = 0
		for range calls {
			if err := call(c); !errors.Is(err, ErrOverloaded) {
				t.Fatalf("call beyond max_pending_requests: %v, want ErrOverloaded", err)
			}
		}
		if n := c.rqPendingOverflow.Value(); n != calls {
			t.Errorf("upstream_rq_pending_overflow = %d, want %d", n, calls)
		}
		assertReleased(t, c)
	})

	t.Run("retry refused by the budget", func(t *testing.T) {
		c := testCluster(t, HostConfig{Address: closedHost(t), Weight: 1}, HostConfig{Address: closedHost(t), Weight: 1})
		c.limits.retry.BudgetPercent, c.limits.breakers.MaxRetries = 0, 0
		for range calls {
			if err := call(c); status.Code(err) != codes.Unavailable {
				t.Fatalf("call to refusing hosts: %v, want Unavailable", err)
			}
		}
		if n := c.rqRetryOverflow.Value(); n != calls {
			t.Errorf("upstream_rq_retry_overflow = %d, want %d", n, calls)
		}
		assertReleased(t, c)
	})
}

// TestBreakerGauges: the breakers' state as Envoy exports it, circuit_breakers.default.*_open and
// remaining_*, follows the slots taken and given back (issue 42).
func TestBreakerGauges(t *testing.T) {
	store := stats.New()
	active := store.Gauge("cluster.secrets.upstream_rq_active")
	l := newLimits(BreakerConfig{MaxRequests: 2, MaxPendingRequests: 1, MaxRetries: 1}, RetryConfig{}, active)
	l.register(store, "cluster.secrets.")
	value := func(name string) int64 {
		t.Helper()
		for _, st := range store.Snapshot() {
			if st.Name == "cluster.secrets.circuit_breakers.default."+name {
				return st.Value
			}
		}
		t.Fatalf("no gauge %s", name)
		return 0
	}
	want := func(name string, v int64) {
		t.Helper()
		if got := value(name); got != v {
			t.Errorf("%s = %d, want %d", name, got, v)
		}
	}
	want("rq_open", 0)
	want("remaining_rq", 2)
	want("remaining_pending", 1)
	want("remaining_retries", 1)
	active.Set(2)
	releasePending, _ := l.acquirePending()
	releaseRetry, _ := l.acquireRetry()
	want("rq_open", 1)
	want("remaining_rq", 0)
	want("rq_pending_open", 1)
	want("remaining_pending", 0)
	want("rq_retry_open", 1)
	want("remaining_retries", 0)
	releasePending()
	releaseRetry()
	active.Set(0)
	want("rq_open", 0)
	want("rq_pending_open", 0)
	want("rq_retry_open", 0)
	want("remaining_rq", 2)
}
