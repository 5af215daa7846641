package e2e

import (
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/etcdtest"
)

// benchClients is the number of concurrent HTTP clients of the gateway benchmarks.
const benchClients = 16

// runClients drives op from benchClients goroutines until b.N requests were made, then reports
// requests per second and the p50/p99 latency. It is a benchmark, never a test: numbers are printed,
// not asserted.
func runClients(b *testing.B, op func(i int) error) {
	b.Helper()
	b.ResetTimer()
	start, cpuStart := time.Now(), processCPU()
	latencies, err := concurrentLatencies(b.N, benchClients, op)
	elapsed, cpu := time.Since(start), processCPU()-cpuStart
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	// CPU per request (clients, gateway and services together: one process) holds up on a machine
	// shared with other work, where req/s and latencies swing with the neighbours' load.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/op")
	b.ReportMetric(ms(percentile(latencies, 0.50)), "p50-ms")
	b.ReportMetric(ms(percentile(latencies, 0.99)), "p99-ms")
}

// concurrentLatencies runs op n times (with i = 0..n-1) from the given number of goroutines and
// returns the sorted latencies; it stops at the first error.
func concurrentLatencies(n, clients int, op func(i int) error) ([]time.Duration, error) {
	var (
		next   atomic.Int64
		mu     sync.Mutex
		all    = make([]time.Duration, 0, n)
		failed error
		wg     sync.WaitGroup
	)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []time.Duration
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				t0 := time.Now()
				if err := op(int(i)); err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
					return
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			all = append(all, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(all)
	return all, failed
}

// percentile of sorted latencies, p in [0, 1].
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(float64(len(sorted)-1)*p)]
}

// processCPU is the CPU time (user and system) the test process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkSecretsThroughGateway measures REST calls through the gateway on loopback, durable writes
// included, once per store: bbolt, and a single-member etcd with fsync on (embedded in the test
// process, so it shares the CPU with the stack). Per store: a credential read with decrypted pairs,
// a service read expanding 10 credentials with their pairs, and a credential update (a new revision
// with a fresh data key).
func BenchmarkSecretsThroughGateway(b *testing.B) {
	b.Logf("GOMAXPROCS=%d, %d concurrent clients", runtime.GOMAXPROCS(0), benchClients)
	b.Run("bolt", func(b *testing.B) { benchSecrets(b, startStack(b, unlimitedWrites)) })
	b.Run("etcd", func(b *testing.B) {
		cluster := etcdtest.New(b, 1, zap.NewNop(), etcdtest.Durable())
		onBenchEtcd := onEtcd(cluster.Endpoints(), "/bench/")
		benchSecrets(b, startStack(b, func(c *stack.Config) { onBenchEtcd(c); unlimitedWrites(c) }))
	})
}

// unlimitedWrites turns the per-principal write rate limit off for loads of one user far beyond it:
// benchmarks measure how fast the store writes, which the limit would hide, and fuzzers must reach
// the validation behind it.
func unlimitedWrites(c *stack.Config) { c.Secrets.Limits.WriteRate = 0 }

// readWorkloads are the read benchmarks, in order; BenchmarkLimit has one bare-server ceiling for each.
var readWorkloads = []string{"credential_read", "service_read_10_credentials"}

// readPaths creates the records the read benchmarks read and returns the path of each workload: a
// credential with two pairs, and a service mapping 10 credentials of one pair each.
func readPaths(b testing.TB, s *testStack) map[string]string {
	b.Helper()
	cred := s.createCredential("bench", map[string]any{"user": "app", "password": "hunter2"})
	var mapped []string
	for i := range 10 {
		mapped = append(mapped, s.createCredential(fmt.Sprintf("svc-cred-%d", i), map[string]any{fmt.Sprintf("key_%d", i): "v"}))
	}
	s.call("PUT", "/v1/services/bench-service", map[string]any{"credentials": mapped}).must(b, 200)
	return map[string]string{"credential_read": "/v1/credentials/" + cred, "service_read_10_credentials": "/v1/services/bench-service"}
}

// benchReads runs the read workloads on s.
func benchReads(b *testing.B, s *testStack) {
	paths := readPaths(b, s)
	for _, name := range readWorkloads {
		b.Run(name, func(b *testing.B) {
			runClients(b, func(int) error {
				if r := s.get(paths[name]); r.code != 200 {
					return fmt.Errorf("%s: status %d: %s", paths[name], r.code, r.body)
				}
				return nil
			})
		})
	}
}

// BenchmarkReads is the read workloads of make bench, on the default stack (bbolt, every role in one
// process, internal mutual TLS); BenchmarkLimit is their ceiling on the same machine.
//
// Each workload alternates with its own bare server (the same body from memory, as BenchmarkLimit) and
// reports that limit beside its figures: limit-req/s and limit-cpu-us/op.
func BenchmarkReads(b *testing.B) {
	b.Logf("GOMAXPROCS=%d, %d concurrent clients", runtime.GOMAXPROCS(0), benchClients)
	s := startStack(b, unlimitedWrites)
	paths := readPaths(b, s)
	for _, name := range readWorkloads {
		b.Run(name, func(b *testing.B) {
			r := s.get(paths[name])
			if r.code != 200 {
				b.Fatalf("%s: status %d: %s", paths[name], r.code, r.body)
			}
			runClientsWithLimit(b, func(int) error {
				if r := s.get(paths[name]); r.code != 200 {
					return fmt.Errorf("%s: status %d: %s", paths[name], r.code, r.body)
				}
				return nil
			}, bareServer(b, s, r.body))
		})
	}
}

func benchSecrets(b *testing.B, s *testStack) {
	benchReads(b, s)
	expect := func(path string, r response) error {
		if r.code != 200 {
			return fmt.Errorf("%s: status %d: %s", path, r.code, r.body)
		}
		return nil
	}
	b.Run("credential_update", func(b *testing.B) {
		ids := make([]string, benchClients)
		for i := range ids {
			ids[i] = s.createCredential(fmt.Sprintf("update-%d-%d", b.N, i), map[string]any{"password": "v0"})
		}
		runClients(b, func(i int) error {
			// Each client mostly writes its own credential, as independent services would.
			return expect("update", s.call("PUT", "/v1/credentials/"+ids[i%benchClients], map[string]any{"credential_pairs": map[string]any{"password": fmt.Sprint(i)}}))
		})
	})
}

// BenchmarkGatewayFeatures measures a credential read through the gateway (bbolt) with the costs the
// edge adds switched on one by one: internal mutual TLS (the default) against -grpc-plaintext, the
// direct in-process call to the co-located service (the default) against gRPC over loopback TCP
// (-grpc-in-memory=false), and the access log written to a file. Histograms are always on.
func BenchmarkGatewayFeatures(b *testing.B) {
	for _, tc := range []struct {
		name   string
		mutate func(*stack.Config)
	}{
		{"plaintext_no_access_log", func(c *stack.Config) { c.InternalTLS.Plaintext = true }},
		{"mtls_no_access_log", nil},
		{"mtls_loopback_tcp_no_access_log", func(c *stack.Config) { c.InMemoryUpstreams = false }},
		{"mtls_access_log", func(c *stack.Config) { c.Gateway.AccessLog = filepath.Join(b.TempDir(), "access.log") }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := startStack(b, tc.mutate)
			cred := s.createCredential("bench", map[string]any{"user": "app", "password": "hunter2"})
			runClients(b, func(int) error {
				if r := s.get("/v1/credentials/" + cred); r.code != 200 {
					return fmt.Errorf("status %d: %s", r.code, r.body)
				}
				return nil
			})
		})
	}
}
