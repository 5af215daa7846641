package e2e

import (
	"fmt"
	"net"
	"net/http"
	"runtime"
	"slices"
	"testing"
	"time"
)

// BenchmarkLimit measures the ceiling of this machine for the read workloads: a bare net/http server
// on loopback returning, from memory, the exact body the gateway returns for each read of
// BenchmarkReads, driven by the same 16 clients. The workloads' req/s divided by these is comparable
// across machines (and across runs on a shared machine), where raw req/s is not.
func BenchmarkLimit(b *testing.B) {
	s := startStack(b, unlimitedWrites)
	bodies := map[string][]byte{}
	for name, path := range readPaths(b, s) {
		r := s.get(path)
		if r.code != http.StatusOK {
			b.Fatalf("%s: %d %s", path, r.code, r.body)
		}
		bodies[name] = r.body
	}
	for _, name := range readWorkloads {
		b.Run(name, func(b *testing.B) { runClients(b, bareServer(b, s, bodies[name])) })
	}
}

// bareServer starts a plain net/http server on loopback answering every request with body from
// memory, and returns the operation of one client request to it.
func bareServer(b *testing.B, s *testStack, body []byte) func(int) error {
	b.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})}
	go func() { _ = srv.Serve(lis) }()
	b.Cleanup(func() { _ = srv.Close() })
	url := "http://" + lis.Addr().String() + "/"
	return func(int) error {
		// Through the same client and request building as the workloads (the Authorization header
		// included), so the difference is the gateway and the services alone.
		r := s.do(http.MethodGet, url, "", nil)
		if r.code != http.StatusOK || len(r.body) != len(body) {
			return fmt.Errorf("bare server: %d, %d bytes", r.code, len(r.body))
		}
		return nil
	}
}

// limitRounds is how many times runClientsWithLimit alternates between the bare server and the
// workload: load from other work that comes and goes then weighs on both alike.
const limitRounds = 4

// runClientsWithLimit is runClients for a workload measured together with its limit: it alternates
// rounds of the bare server's operation and the workload's, b.N requests of each in all, and reports
// the workload's figures as runClients does plus the limit's req/s and CPU per request (limit-req/s,
// limit-cpu-us/op), so the ratio holds on a machine shared with other work.
func runClientsWithLimit(b *testing.B, op, limitOp func(i int) error) {
	b.Helper()
	rounds := min(limitRounds, b.N)
	var (
		work, limit         []time.Duration
		workTime, limitTime time.Duration
		workCPU, limitCPU   time.Duration
		workAllocs          uint64
	)
	measure := func(n int, op func(int) error, lat *[]time.Duration, elapsed, cpu *time.Duration) uint64 {
		start, cpuStart, allocStart := time.Now(), processCPU(), mallocs()
		l, err := concurrentLatencies(n, benchClients, op)
		*elapsed += time.Since(start)
		*cpu += processCPU() - cpuStart
		allocs := mallocs() - allocStart
		if err != nil {
			b.Fatal(err)
		}
		*lat = append(*lat, l...)
		return allocs
	}
	b.ResetTimer()
	for i := range rounds {
		n := b.N/rounds + boolInt(i < b.N%rounds)
		measure(n, limitOp, &limit, &limitTime, &limitCPU)
		workAllocs += measure(n, op, &work, &workTime, &workCPU)
	}
	b.StopTimer()
	// -benchmem's allocs/op counts both operations; this is the workload's alone.
	b.ReportMetric(float64(workAllocs)/float64(b.N), "allocs/req")
	slices.Sort(work)
	b.ReportMetric(float64(b.N)/workTime.Seconds(), "req/s")
	b.ReportMetric(float64(workCPU.Microseconds())/float64(b.N), "cpu-us/op")
	b.ReportMetric(ms(percentile(work, 0.50)), "p50-ms")
	b.ReportMetric(ms(percentile(work, 0.99)), "p99-ms")
	b.ReportMetric(float64(b.N)/limitTime.Seconds(), "limit-req/s")
	b.ReportMetric(float64(limitCPU.Microseconds())/float64(b.N), "limit-cpu-us/op")
}

// mallocs is the number of heap allocations of the process so far.
func mallocs() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.Mallocs
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}
