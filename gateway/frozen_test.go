package gateway

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/api/httpbody"

	"github.com/gantry-dev/gantry/pkg/faultnet"
	"github.com/gantry-dev/gantry/pkg/grpcserver"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/testwait"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
)

// writeCounter is a chat upstream whose PerformAction (a write: never retried once it reached a host)
// counts its calls and takes delay to answer.
type writeCounter struct {
	echoChat
	writes atomic.Int64
	delay  time.Duration
}

func (w *writeCounter) PerformAction(ctx context.Context, _ *chatv1.PerformActionRequest) (*chatv1.PerformActionResponse, error) {
	w.writes.Add(1)
	if w.delay > 0 {
		select {
		case <-time.After(w.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &chatv1.PerformActionResponse{Result: &httpbody.HttpBody{ContentType: "application/json", Data: []byte(`{"ok":true}`)}}, nil
}

// startWriteCounter serves a writeCounter and returns it with its address.
func startWriteCounter(t *testing.T, delay time.Duration) (*writeCounter, string) {
	t.Helper()
	lis := listen(t)
	srv := grpcserver.New(logtest.New(t))
	w := &writeCounter{delay: delay}
	chatv1.RegisterChatServiceServer(srv.Server, w)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	return w, lis.Addr().String()
}

func write(t *testing.T, rest string) int {
	t.Helper()
	code, _, _ := do(t, "POST", rest+"/api/v2/chat/action/t/b", strings.NewReader(`{"action":"x"}`), http.Header{"Content-Type": {"application/json"}})
	return code
}

// TestFrozenHostWriteIsCutNotRetriedAndEjected: a write on a host that froze (its connection open,
// nothing answered) is cut once it has run the per-try timeout and the host fails one health check:
// it answers 504 (it may have been applied), is not sent to the other host, and the frozen host is
// ejected at once, so the writes that follow all go to the other host. Before, it waited the whole
// upstream timeout, and with a few concurrent clients every client soon waited in one.
func TestFrozenHostWriteIsCutNotRetriedAndEjected(t *testing.T) {
	good, goodAddr := startWriteCounter(t, 0)
	frozenSrv, frozenAddr := startWriteCounter(t, 0)
	proxy, err := faultnet.Listen("", frozenAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	h := startHarness(t, func(c *Config) {
		c.ChatUpstream = proxy.Addr() + "," + goodAddr
		c.HealthCheck.Interval = time.Hour // only the write's own check may find the host frozen
		c.Retry.PerTryTimeout = 300 * time.Millisecond
		c.UpstreamTimeout = 20 * time.Second
	})
	// Warm both connections up, then freeze one host.
	testwait.Until(t, "a write on each host", func() bool {
		write(t, h.rest)
		return good.writes.Load() > 0 && frozenSrv.writes.Load() > 0
	})
	proxy.Freeze()
	goodBefore := good.writes.Load()
	// Writes go to either host at random: one lands on the frozen host soon.
	answered, timedOut := 0, 0
	testwait.Until(t, "a write on the frozen host answered 504", func() bool {
		switch code := write(t, h.rest); code {
		case http.StatusOK:
			answered++
		case http.StatusGatewayTimeout:
			timedOut++
		default:
			t.Fatalf("write with a frozen host: %d", code)
		}
		return timedOut > 0
	})
	if timedOut != 1 {
		t.Errorf("%d writes answered 504, want 1 (the host is ejected after the first)", timedOut)
	}
	if n := statValue(t, h.admin, "cluster.chat.outlier_detection.ejections_enforced_consecutive_local_origin_failure"); n != 1 {
		t.Errorf("local-origin ejections = %d, want 1", n)
	}
	// The frozen host is out of rotation: every write goes to the good host and succeeds.
	for i := range 20 {
		if code := write(t, h.rest); code != http.StatusOK {
			t.Fatalf("write %d after the ejection: %d", i, code)
		}
		answered++
	}
	// No write was repeated on the good host: it saw exactly the writes answered 200.
	if got := good.writes.Load() - goodBefore; got != int64(answered) {
		t.Errorf("the good host saw %d writes, %d were answered 200: a write was retried", got, answered)
	}
	if n := statValue(t, h.admin, "cluster.chat.upstream_rq_retry"); n != 0 {
		t.Errorf("upstream_rq_retry = %d, want 0", n)
	}
	if n := statValue(t, h.admin, "cluster.chat.upstream_rq_per_try_timeout"); n != 1 {
		t.Errorf("upstream_rq_per_try_timeout = %d, want 1", n)
	}
	proxy.Thaw()
}

// TestSlowHostWriteIsNotCut: a write that a live host takes longer than the per-try timeout to answer
// is not cut, whether the host showed it is alive by answering other calls or only by answering the
// health check its write's guard sends, even with an error (a service_name its health service does
// not know: the host answered, so it is not frozen): it answers 200, and no host is ejected.
func TestSlowHostWriteIsNotCut(t *testing.T) {
	const perTry = time.Second
	for _, tc := range []struct {
		name        string
		hcInterval  time.Duration
		serviceName string
	}{
		{"health checks answered meanwhile", 50 * time.Millisecond, ""},
		{"no other traffic: the guard's own check", time.Hour, ""},
		{"the guard's check answered NotFound", time.Hour, "no-such-service"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, aAddr := startWriteCounter(t, 3*perTry)
			b, bAddr := startWriteCounter(t, 3*perTry)
			h := startHarness(t, func(c *Config) {
				c.ChatUpstream = aAddr + "," + bAddr
				c.HealthCheck.Interval = tc.hcInterval
				c.HealthCheck.ServiceName = tc.serviceName
				c.Retry.PerTryTimeout = perTry
				c.UpstreamTimeout = 30 * time.Second
			})
			if code := write(t, h.rest); code != http.StatusOK {
				t.Fatalf("slow write: %d", code)
			}
			if n := a.writes.Load() + b.writes.Load(); n != 1 {
				t.Errorf("the hosts saw %d writes, want 1", n)
			}
			for _, stat := range []string{"upstream_rq_per_try_timeout", "outlier_detection.ejections_total"} {
				if n := statValue(t, h.admin, "cluster.chat."+stat); n != 0 {
					t.Errorf("%s = %d, want 0", stat, n)
				}
			}
		})
	}
}

// TestFrozenReplicaThroughput measures what a 10 s freeze of one of two hosts costs 6 clients doing
// reads and writes through the gateway, per 250 ms: GANTRY_MEASURE_FREEZE=1 go test -run
// TestFrozenReplicaThroughput -v ./gateway (docs/gateway.md). The gateway's defaults but the host
// list.
func TestFrozenReplicaThroughput(t *testing.T) {
	if os.Getenv("GANTRY_MEASURE_FREEZE") == "" {
		t.Skip("a measurement: GANTRY_MEASURE_FREEZE=1")
	}
	_, goodAddr := startWriteCounter(t, 0)
	_, frozenAddr := startWriteCounter(t, 0)
	proxy, err := faultnet.Listen("", frozenAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	h := startHarness(t, func(c *Config) { c.ChatUpstream = proxy.Addr() + "," + goodAddr })
	const bucket, before, freeze, after = 250 * time.Millisecond, 2 * time.Second, 10 * time.Second, 2 * time.Second
	start := time.Now()
	n := int((before + freeze + after) / bucket)
	ok := make([]atomic.Int64, n+1)
	failed := make([]atomic.Int64, n+1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{}
	for c := range 6 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var req *http.Request
				if (c+i)%2 == 0 {
					req, _ = http.NewRequest("GET", h.rest+"/api/v1/chat/get_team/echo", nil)
				} else {
					req, _ = http.NewRequest("POST", h.rest+"/api/v2/chat/action/t/b", strings.NewReader(`{"action":"x"}`))
					req.Header.Set("Content-Type", "application/json")
				}
				resp, err := client.Do(req)
				b := min(int(time.Since(start)/bucket), n)
				if err == nil && resp.StatusCode == http.StatusOK {
					ok[b].Add(1)
				} else {
					failed[b].Add(1)
				}
				if err == nil {
					resp.Body.Close()
				}
			}
		})
	}
	time.Sleep(before)
	proxy.Freeze()
	time.Sleep(freeze)
	proxy.Thaw()
	time.Sleep(after)
	close(stop)
	wg.Wait()
	var out strings.Builder
	for i := range n {
		mark := " "
		if at := time.Duration(i) * bucket; at >= before && at < before+freeze {
			mark = "F"
		}
		fmt.Fprintf(&out, "%6.2fs %s ok/s %5d failed/s %3d\n", (time.Duration(i) * bucket).Seconds(), mark, ok[i].Load()*4, failed[i].Load()*4)
	}
	t.Logf("6 clients, reads and writes alternating, one of two hosts frozen (F) for %v:\n%s", freeze, out.String())
}
