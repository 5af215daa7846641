package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/freeport"
	"github.com/gantry-dev/gantry/pkg/grpcserver"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
)

// startEcho serves an echoChat upstream and returns its address.
func startEcho(t *testing.T) string {
	t.Helper()
	lis := listen(t)
	srv := grpcserver.New(logtest.New(t))
	chatv1.RegisterChatServiceServer(srv.Server, echoChat{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	return lis.Addr().String()
}

// freezer is a TCP proxy in front of a host that can stop moving bytes, as a SIGSTOPped process
// does: connections stay open, nothing is answered.
type freezer struct {
	lis    net.Listener
	mu     sync.Mutex
	frozen bool
	thaw   chan struct{}
}

func startFreezer(t *testing.T, backend string) *freezer {
	t.Helper()
	f := &freezer{lis: listen(t), thaw: make(chan struct{})}
	t.Cleanup(func() { _ = f.lis.Close(); f.unfreeze() })
	go func() {
		for {
			c, err := f.lis.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", backend)
			if err != nil {
				_ = c.Close()
				continue
			}
			go f.pipe(c, b)
			go f.pipe(b, c)
		}
	}()
	return f
}

func (f *freezer) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		f.mu.Lock()
		frozen, thaw := f.frozen, f.thaw
		f.mu.Unlock()
		if frozen {
			<-thaw
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

func (f *freezer) freeze() { f.mu.Lock(); f.frozen = true; f.mu.Unlock() }

func (f *freezer) unfreeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen {
		f.frozen = false
		close(f.thaw)
		f.thaw = make(chan struct{})
	}
}

func (f *freezer) addr() string { return f.lis.Addr().String() }

func statValue(t *testing.T, admin, name string) int {
	t.Helper()
	_, _, body := do(t, "GET", admin+"/stats?filter=^"+regexp.QuoteMeta(name)+"$", nil, nil)
	_, v, ok := strings.Cut(strings.TrimSpace(string(body)), ": ")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(v)
	return n
}

// TestFrozenHostCostsAReaderOnePerTryTimeout: with one of two hosts frozen, every read still succeeds,
// each in at most about one per-try timeout, and a write sent to the frozen host is not repeated.
func TestFrozenHostCostsAReaderOnePerTryTimeout(t *testing.T) {
	good := startEcho(t)
	frozen := startFreezer(t, startEcho(t))
	h := startHarness(t, func(c *Config) {
		c.ChatUpstream = frozen.addr() + "," + good
		c.HealthCheck.Interval = time.Hour // only retries may save the readers
		c.Outlier.ConsecutiveFailures = 0
		c.Retry.PerTryTimeout = 300 * time.Millisecond
		c.UpstreamTimeout = 1500 * time.Millisecond
	})
	// Warm both connections up, then freeze one host.
	for range 10 {
		do(t, "GET", h.rest+"/api/v1/chat/get_team/echo", nil, nil)
	}
	frozen.freeze()
	for i := range 12 {
		start := time.Now()
		code, _, body := do(t, "GET", h.rest+"/api/v1/chat/get_team/echo", nil, nil)
		if code != http.StatusOK {
			t.Fatalf("read %d with a frozen host: %d %s", i, code, body)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("read %d took %v, want about one per-try timeout at most", i, d)
		}
	}
	if statValue(t, h.admin, "cluster.chat.upstream_rq_per_try_timeout") == 0 || statValue(t, h.admin, "cluster.chat.upstream_rq_retry_success") == 0 {
		t.Error("no per-try timeout or successful retry counted")
	}
	// A write (PerformAction) is never retried once it reached a host: against the frozen host it waits
	// out the upstream timeout and answers 504.
	retriesBefore := statValue(t, h.admin, "cluster.chat.upstream_rq_retry")
	for range 4 {
		do(t, "POST", h.rest+"/api/v2/chat/action/t/b", strings.NewReader(`{"action":"x"}`), http.Header{"Content-Type": {"application/json"}})
	}
	if got := statValue(t, h.admin, "cluster.chat.upstream_rq_retry"); got != retriesBefore {
		t.Errorf("writes were retried: upstream_rq_retry %d -> %d", retriesBefore, got)
	}
}

// TestKilledHostFailsNoRead: a host that dies under an idempotent read has it retried elsewhere.
func TestKilledHostFailsNoRead(t *testing.T) {
	lis := listen(t)
	srv := grpcserver.New(logtest.New(t))
	hc := hangingChat{started: make(chan struct{}, 1)}
	chatv1.RegisterChatServiceServer(srv.Server, hc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis, time.Second) }()
	good := startEcho(t)
	h := startHarness(t, func(c *Config) {
		c.ChatUpstream = lis.Addr().String() + "," + good
		c.HealthCheck.Interval = time.Hour
		c.Retry.PerTryTimeout = 0 // only the reset may end the first attempt
	})
	go func() {
		<-hc.started
		srv.Stop()
	}()
	for i := range 10 {
		if code, _, body := do(t, "GET", h.rest+"/api/v1/chat/get_team/echo", nil, nil); code != http.StatusOK {
			t.Fatalf("read %d: %d %s", i, code, body)
		}
	}
	<-served
}

// TestRetriedConnectFailureCountsOnlyTheAnswer: a call that could not reach its first host and got
// 200 from the next is one upstream_rq_200, not a 503 besides.
func TestRetriedConnectFailureCountsOnlyTheAnswer(t *testing.T) {
	dead := freeport.Refused(t)
	rest, admin := startGateway(t, func(c *Config) {
		c.ChatUpstream = dead + "," + c.ChatUpstream
		c.HealthCheck.Interval = time.Hour
		c.Outlier.ConsecutiveFailures = 0
	})
	for range 20 {
		if code, _, body := do(t, "GET", rest+"/api/v1/chat/get_team/echo", nil, nil); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
	}
	if got := statValue(t, admin, "cluster.chat.upstream_rq_200"); got != 20 {
		t.Errorf("upstream_rq_200 = %d, want 20", got)
	}
	if got := statValue(t, admin, "cluster.chat.upstream_rq_5xx"); got != 0 {
		t.Errorf("upstream_rq_5xx = %d, want 0 (the connect failures were retried)", got)
	}
}

// TestCircuitBreakerMaxRequests: beyond max_requests in flight a request is refused at once with 503
// and x-envoy-overloaded.
func TestCircuitBreakerMaxRequests(t *testing.T) {
	h := startHarness(t, func(c *Config) {
		c.Breakers.MaxRequests = 1
		c.UpstreamTimeout = 2 * time.Second
		c.Retry.PerTryTimeout = 0
	})
	slowDone := make(chan struct{})
	go func() {
		defer close(slowDone)
		do(t, "GET", h.rest+"/api/v1/chat/get_team/slow", nil, nil) // holds the only slot until the timeout
	}()
	deadline := time.Now().Add(5 * time.Second)
	for statValue(t, h.admin, "cluster.chat.upstream_rq_active") < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	code, header, body := do(t, "GET", h.rest+"/api/v1/chat/get_team/echo", nil, nil)
	if code != http.StatusServiceUnavailable || header.Get("X-Envoy-Overloaded") != "true" || !strings.Contains(string(body), "overloaded") {
		t.Errorf("over max_requests: %d %v %s", code, header, body)
	}
	if got := statValue(t, h.admin, "cluster.chat.upstream_rq_pending_overflow"); got != 1 {
		t.Errorf("upstream_rq_pending_overflow = %d, want 1", got)
	}
	<-slowDone
	if code, _, _ := do(t, "GET", h.rest+"/api/v1/chat/get_team/echo", nil, nil); code != http.StatusOK {
		t.Errorf("after the slot freed: %d", code)
	}
}

// TestCircuitBreakerMaxPendingRequests: requests waiting for a host's connection to become ready
// beyond max_pending_requests are refused at once with 503 and x-envoy-overloaded.
func TestCircuitBreakerMaxPendingRequests(t *testing.T) {
	silent := listen(t) // accepts connections and never answers: the connection never becomes ready
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	h := startHarness(t, func(c *Config) {
		c.ChatUpstream = silent.Addr().String()
		c.Breakers.MaxPendingRequests = 1
		c.HealthCheck.Interval = time.Hour
	})
	first := make(chan int, 1)
	go func() {
		code, _, _ := do(t, "GET", h.rest+"/api/v1/chat/get_team/echo", nil, nil)
		first <- code
	}()
	deadline := time.Now().Add(5 * time.Second)
	for statValue(t, h.admin, "cluster.chat.upstream_rq_active") < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	code, header, body := do(t, "GET", h.rest+"/api/v1/chat/get_team/echo", nil, nil)
	if code != http.StatusServiceUnavailable || header.Get("X-Envoy-Overloaded") != "true" {
		t.Errorf("second pending request: %d %v %s", code, header, body)
	}
	if got := statValue(t, h.admin, "cluster.chat.upstream_rq_pending_overflow"); got != 1 {
		t.Errorf("upstream_rq_pending_overflow = %d, want 1", got)
	}
	<-first
}

// slowOnceChat answers like echoChat, but its first armed call waits delay first: a healthy host
// that is slow for a moment under load.
type slowOnceChat struct {
	echoChat
	armed *atomic.Bool
	delay time.Duration
	// answerEarly makes the host answer DeadlineExceeded itself shortly before the deadline the
	// gateway propagated (grpc-timeout): under load the host's timer can fire before the gateway's
	// own, so the gateway sees an answer rather than its per-try timeout.
	answerEarly bool
}

func (s slowOnceChat) GetTeam(ctx context.Context, req *chatv1.GetTeamRequest) (*chatv1.GetTeamResponse, error) {
	if s.armed.CompareAndSwap(true, false) {
		wait := s.delay
		if deadline, ok := ctx.Deadline(); ok && s.answerEarly {
			wait = min(wait, time.Until(deadline)-20*time.Millisecond)
		}
		select {
		case <-time.After(wait):
			if s.answerEarly {
				return nil, status.FromContextError(context.DeadlineExceeded).Err()
			}
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	return s.echoChat.GetTeam(ctx, req)
}

// TestRetryOntoAFrozenHostIsCutShort: a read whose first try on the healthy host times out (slow for a
// moment) is retried on the other host, which is frozen; that try too is cut by the per-try timeout
// (it used to run unbounded, to the upstream timeout: found by CI as 30 s reads), and the read is then
// tried again on the healthy host, and succeeds.
func TestRetryOntoAFrozenHostIsCutShort(t *testing.T) { retryOntoAFrozenHost(t, false) }

// TestRetryAfterTheHostAnswersItsDeadline: the same read when the slow host's own copy of the
// per-try deadline fires first and it answers DeadlineExceeded (found by CI as a 504 after one try):
// that answer is the per-try timeout, and the read is retried.
func TestRetryAfterTheHostAnswersItsDeadline(t *testing.T) { retryOntoAFrozenHost(t, true) }

func retryOntoAFrozenHost(t *testing.T, answerEarly bool) {
	const perTry = 300 * time.Millisecond
	armed := &atomic.Bool{}
	lis := listen(t)
	srv := grpcserver.New(logtest.New(t))
	chatv1.RegisterChatServiceServer(srv.Server, slowOnceChat{armed: armed, delay: 3 * perTry, answerEarly: answerEarly})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	slow := lis.Addr().String()
	frozen := startFreezer(t, startEcho(t))
	h := startHarness(t, func(c *Config) {
		c.ChatUpstream = frozen.addr() + "," + slow
		c.HealthCheck.Interval = 100 * time.Millisecond
		c.HealthCheck.Timeout = 100 * time.Millisecond
		c.Outlier.ConsecutiveFailures = 0
		c.Retry.PerTryTimeout = perTry
		c.UpstreamTimeout = 10 * time.Second
	})
	for range 5 {
		do(t, "GET", h.rest+"/api/v1/chat/get_team/echo", nil, nil)
	}
	frozen.freeze()
	// The frozen host fails its health checks, so the first try goes to the slow one.
	deadline := time.Now().Add(10 * time.Second)
	for clusterLines(t, h.admin, "chat", frozen.addr())["health_flags"] == "healthy" {
		if time.Now().After(deadline) {
			t.Fatal("the frozen host never failed its health checks")
		}
		time.Sleep(20 * time.Millisecond)
	}
	armed.Store(true)
	start := time.Now()
	code, _, body := do(t, "GET", h.rest+"/api/v1/chat/get_team/echo", nil, nil)
	took := time.Since(start)
	if code != http.StatusOK {
		t.Fatalf("read: %d %s after %v", code, body, took)
	}
	if took > 6*perTry {
		t.Errorf("read took %v: the try on the frozen host was not cut at the per-try timeout (%v)", took, perTry)
	}
}

// TestEveryHostFrozenBoundsEachTry: with every host of the cluster frozen (their checks fail, so the
// cluster routes in panic mode), a read is not held for the whole freeze (the upstream timeout): each
// try, the last one and a lone host's included, ends at the per-try timeout, and the reader gets a 504.
// On main the last try ran to the upstream timeout.
func TestEveryHostFrozenBoundsEachTry(t *testing.T) {
	for _, hosts := range []int{1, 2} {
		t.Run(strconv.Itoa(hosts)+"hosts", func(t *testing.T) {
			const perTry = 200 * time.Millisecond
			const upstreamTimeout = 20 * time.Second
			var frozen []*freezer
			var addrs []string
			for range hosts {
				f := startFreezer(t, startEcho(t))
				frozen, addrs = append(frozen, f), append(addrs, f.addr())
			}
			h := startHarness(t, func(c *Config) {
				c.ChatUpstream = strings.Join(addrs, ",")
				c.HealthCheck.Interval = 100 * time.Millisecond
				c.HealthCheck.Timeout = 100 * time.Millisecond
				c.Outlier.ConsecutiveFailures = 0
				c.Retry.PerTryTimeout = perTry
				c.Retry.NumRetries = 2
				c.UpstreamTimeout = upstreamTimeout
			})
			for range 5 {
				do(t, "GET", h.rest+"/api/v1/chat/get_team/echo", nil, nil)
			}
			for _, f := range frozen {
				f.freeze()
			}
			deadline := time.Now().Add(10 * time.Second)
			for _, addr := range addrs {
				for clusterLines(t, h.admin, "chat", addr)["health_flags"] == "healthy" {
					if time.Now().After(deadline) {
						t.Fatalf("frozen host %s never failed its health checks", addr)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			start := time.Now()
			code, _, body := do(t, "GET", h.rest+"/api/v1/chat/get_team/echo", nil, nil)
			took := time.Since(start)
			if code != http.StatusGatewayTimeout {
				t.Errorf("read with every host frozen: %d %s after %v, want 504", code, body, took)
			}
			// Three tries of 200 ms; the bound leaves room for a loaded machine, far below the
			// upstream timeout the read waited for before.
			if took > upstreamTimeout/4 {
				t.Errorf("read took %v with every host frozen: its tries were not cut at the per-try timeout (%v)", took, perTry)
			}
			if n := statValue(t, h.admin, "cluster.chat.upstream_rq_per_try_timeout"); n < 1 {
				t.Errorf("upstream_rq_per_try_timeout = %d, want at least 1", n)
			}
		})
	}
}

// A host that went down since its last health check costs no client an error: a call that never
// reached it is sent to another healthy host, and counted as upstream_rq_retry.
func TestCallThatCannotReachItsHostGoesToAnother(t *testing.T) {
	deadAddr := freeport.Refused(t)
	rest, admin := startGateway(t, func(cfg *Config) {
		cfg.ChatUpstream = deadAddr + "," + cfg.ChatUpstream
		// No health check or ejection takes the dead host out during the test: only the retry can.
		cfg.HealthCheck.Interval = time.Hour
		cfg.Outlier.ConsecutiveFailures = 0
	})
	for i := range 40 {
		if code, _, body := do(t, "GET", rest+"/api/v1/chat/get_team/t", nil, nil); code != 200 {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
	}
	_, _, body := do(t, "GET", admin+"/stats?filter=^cluster.chat.upstream_rq_(retry|total)$", nil, nil)
	retries := regexp.MustCompile(`upstream_rq_retry: (\d+)`).FindSubmatch(body)
	if retries == nil || string(retries[1]) == "0" {
		t.Fatalf("no retry counted (the dead host got no request?):\n%s", body)
	}
	_, _, clusters := do(t, "GET", admin+"/clusters", nil, nil)
	if !strings.Contains(string(clusters), "chat::"+deadAddr+"::rq_error::") || strings.Contains(string(clusters), "chat::"+deadAddr+"::rq_total::0\n") {
		t.Fatalf("the dead host was never tried:\n%s", clusters)
	}
}
