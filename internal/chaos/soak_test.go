package chaos

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/internal/stack"
)

// envSoakDuration selects the soak's length (make soak sets it; the default is the short form).
const envSoakDuration = "GANTRY_SOAK_DURATION"

// sample is one reading of the process during the soak.
type sample struct {
	at         time.Duration
	heapInuse  uint64
	goroutines int
	requests   int64
	errors     int64
}

// TestSoak runs mixed load (credential reads with values, listings, updates, service reads by the
// service itself, admin scrapes of /stats, /clusters and /stats/prometheus) against an in-process
// stack, sampling heap in use and goroutines every few seconds. It fails on any unexpected answer or an
// obvious growth trend (the last third's average more than twice the first third's, by a margin that
// rules out noise), never on a latency. GANTRY_SOAK_DURATION sets its length (make soak: 10m).
func TestSoak(t *testing.T) {
	duration := 4 * time.Second
	if testing.Short() {
		duration = 2 * time.Second
	}
	if v := os.Getenv(envSoakDuration); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q is not a positive duration", envSoakDuration, v)
		}
		duration = d
	}
	every := min(max(duration/30, 500*time.Millisecond), 10*time.Second)

	dataDir := filepath.Join(t.TempDir(), "data")
	ctx, cancel := context.WithCancel(context.Background())
	st, err := stack.Start(ctx, loopbackConfig(dataDir), zap.NewNop())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	defer func() {
		cancel()
		if err := st.Wait(); err != nil {
			t.Errorf("stack did not stop cleanly: %v", err)
		}
	}()
	rest, adm := "http://"+st.GatewayAddr, "http://"+st.AdminAddr
	user := userAuth(t, dataDir)

	const credentials = 8
	ids := make([]string, credentials)
	for i := range ids {
		r := request(t, rest, user, "POST", "/v1/credentials", map[string]any{"name": fmt.Sprintf("soak-%d", i),
			"documentation": "soak", "credential_pairs": map[string]any{fmt.Sprintf("password_%d", i): "initial"}})
		if r.code != 200 {
			t.Fatalf("create: %d %s", r.code, r.body)
		}
		ids[i] = r.json["id"].(string)
	}
	if r := request(t, rest, user, "PUT", "/v1/services/soak-svc", map[string]any{"credentials": ids[:4]}); r.code != 200 {
		t.Fatalf("service: %d %s", r.code, r.body)
	}
	service := "Basic " + base64.StdEncoding.EncodeToString([]byte("2/service/soak-svc:"+mintToken(t, dataDir, "soak-svc", "service")))

	var requests, errorCount atomic.Int64
	var firstErr sync.Once
	fail := func(format string, args ...any) {
		errorCount.Add(1)
		firstErr.Do(func() { t.Errorf(format, args...) })
	}
	// call is request for the workers: a transport error counts as an error (Fatal is for the test goroutine).
	call := func(base, auth, method, path string, body any) reply {
		x, err := tryRequest(base, auth, method, path, body)
		if err != nil {
			fail("%s %s: %v", method, path, err)
			return reply{code: -1}
		}
		return x
	}
	// Each worker repeats one kind of operation; together they mix reads, writes and scrapes.
	ops := []func(r *rand.Rand){
		func(r *rand.Rand) { // read with values
			if x := call(rest, user, "GET", "/v1/credentials/"+ids[r.IntN(credentials)], nil); x.code != 200 && x.code != -1 {
				fail("read: %d %s", x.code, x.body)
			}
		},
		func(r *rand.Rand) { // list
			if x := call(rest, user, "GET", "/v1/credentials?limit=5", nil); x.code != 200 && x.code != -1 {
				fail("list: %d %s", x.code, x.body)
			}
		},
		func(r *rand.Rand) { // update
			i := r.IntN(credentials)
			x := call(rest, user, "PUT", "/v1/credentials/"+ids[i],
				map[string]any{"credential_pairs": map[string]any{fmt.Sprintf("password_%d", i): fmt.Sprintf("v%d", r.Int())}})
			if x.code != 200 && x.code != 409 && x.code != -1 {
				fail("update: %d %s", x.code, x.body)
			}
		},
		func(r *rand.Rand) { // the service reads its credentials
			if x := call(rest, service, "GET", "/v1/services/soak-svc", nil); x.code != 200 && x.code != -1 {
				fail("service read: %d %s", x.code, x.body)
			}
		},
		func(r *rand.Rand) { // admin scrapes
			for _, p := range []string{"/stats", "/clusters", "/stats/prometheus"} {
				if x := call(adm, "", "GET", p, nil); x.code != 200 && x.code != -1 {
					fail("admin %s: %d", p, x.code)
				}
			}
		},
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, op := range ops {
		for w := range 2 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(i), uint64(w)))
				for {
					select {
					case <-stop:
						return
					default:
					}
					op(r)
					requests.Add(1)
				}
			})
		}
	}

	start := time.Now()
	var samples []sample
	read := func() {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		samples = append(samples, sample{time.Since(start), ms.HeapInuse, runtime.NumGoroutine(), requests.Load(), errorCount.Load()})
	}
	for time.Since(start) < duration {
		time.Sleep(every)
		read()
	}
	close(stop)
	wg.Wait()

	var table strings.Builder
	fmt.Fprintf(&table, "soak: %v of mixed load, sampled every %v\n%10s %14s %11s %10s %7s\n", duration, every, "elapsed", "heap_inuse_MiB", "goroutines", "requests", "errors")
	for _, s := range samples {
		fmt.Fprintf(&table, "%10s %14.1f %11d %10d %7d\n", s.at.Round(100*time.Millisecond), float64(s.heapInuse)/(1<<20), s.goroutines, s.requests, s.errors)
	}
	last := samples[len(samples)-1]
	fmt.Fprintf(&table, "soak: %d requests (%.0f/s), %d errors\n", last.requests, float64(last.requests)/time.Since(start).Seconds(), last.errors)
	if os.Getenv(envSoakDuration) != "" {
		fmt.Print(table.String())
	} else {
		t.Log(table.String())
	}

	if len(samples) >= 6 {
		third := len(samples) / 3
		avg := func(ss []sample, f func(sample) float64) float64 {
			sum := 0.0
			for _, s := range ss {
				sum += f(s)
			}
			return sum / float64(len(ss))
		}
		heap := func(s sample) float64 { return float64(s.heapInuse) }
		gr := func(s sample) float64 { return float64(s.goroutines) }
		first, end := samples[:third], samples[len(samples)-third:]
		if a, b := avg(first, heap), avg(end, heap); b > 2*a && b-a > 32<<20 {
			t.Errorf("heap in use grew from %.1f MiB (first third) to %.1f MiB (last third)", a/(1<<20), b/(1<<20))
		}
		if a, b := avg(first, gr), avg(end, gr); b > 2*a && b-a > 50 {
			t.Errorf("goroutines grew from %.0f (first third) to %.0f (last third)", a, b)
		}
	}
}
