package benchload

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunCountsByStatus: every request of a count-bound run is sent once and counted under its
// status; only successes have latencies and count as OK.
func TestRunCountsByStatus(t *testing.T) {
	var seen atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if seen.Add(1)%4 == 0 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	res, err := Run(context.Background(), NewClient(4), Options{Conns: 4, Count: 400}, func(int) (string, string, http.Header, []byte) {
		return http.MethodGet, srv.URL, nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 400 || seen.Load() != 400 || res.OK != 300 || res.ByStatus[200] != 300 || res.ByStatus[429] != 100 {
		t.Fatalf("result %+v, server saw %d; want 400 requests, 300 OK, 100×429", res, seen.Load())
	}
	if res.P50 <= 0 || res.P99 < res.P50 || res.OKPerSec() <= 0 {
		t.Errorf("latencies p50 %v p99 %v, %v ok/s", res.P50, res.P99, res.OKPerSec())
	}
	if got := res.Errors(func(c int) bool { return c == 200 }); got != "429×100" {
		t.Errorf("Errors() = %q", got)
	}
}

// TestRunDuration: a duration-bound run stops near its duration.
func TestRunDuration(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	res, err := Run(context.Background(), NewClient(2), Options{Conns: 2, Duration: 300 * time.Millisecond}, func(int) (string, string, http.Header, []byte) {
		return http.MethodGet, srv.URL, nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Elapsed < 300*time.Millisecond || res.Elapsed > 5*time.Second || res.OK == 0 {
		t.Fatalf("ran %v with %d OK", res.Elapsed, res.OK)
	}
}

// TestProcessCPU: the CPU time of this process grows with work it does.
func TestProcessCPU(t *testing.T) {
	before, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Spin until the process's CPU time, as ProcessCPU reads it, has grown by 50 ms: on a loaded
	// machine that takes longer than 50 ms of wall time, so the deadline only bounds a reading that
	// never moves.
	deadline := time.Now().Add(30 * time.Second)
	for after := before; after-before < 50*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatalf("CPU %v → %v after 30 s of spinning", before, after)
		}
		for end := time.Now().Add(10 * time.Millisecond); time.Now().Before(end); {
		}
		if after, err = ProcessCPU(os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := parseStat("123 (a) b) c) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0"); err != nil {
		t.Errorf("a name with parentheses: %v", err)
	}
	if d, _ := parseStat("123 (a) b) c) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0"); d != 3*time.Second {
		t.Errorf("250+50 ticks = %v, want 3s", d)
	}
}

// TestFsyncRate: the disk syncs at some positive rate.
func TestFsyncRate(t *testing.T) {
	rate, err := FsyncRate(t.TempDir(), 100*time.Millisecond)
	if err != nil || rate <= 0 {
		t.Fatalf("FsyncRate = %v, %v", rate, err)
	}
}

// TestMerge: merged rounds add their counts and take their percentiles over every request.
func TestMerge(t *testing.T) {
	a := Result{Requests: 3, OK: 2, Elapsed: time.Second, ByStatus: map[int]int{200: 2, 429: 1}, latencies: []time.Duration{1, 2}}
	b := Result{Requests: 2, OK: 2, Elapsed: time.Second, ByStatus: map[int]int{200: 2}, FirstError: "x", latencies: []time.Duration{3, 100}}
	m := a.Merge(b)
	if m.Requests != 5 || m.OK != 4 || m.ByStatus[200] != 4 || m.ByStatus[429] != 1 || m.FirstError != "x" || m.OKPerSec() != 2 {
		t.Fatalf("merged %+v", m)
	}
	if m.P50 != 2 || m.P99 != 3 {
		t.Errorf("p50 %v p99 %v, want 2 and 3 (of 1, 2, 3, 100)", m.P50, m.P99)
	}
}
