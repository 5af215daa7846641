package e2e

import (
	"io"
	"net/http"
	"testing"

	"github.com/gantry-dev/gantry/internal/stack"
)

// BenchmarkPrometheusScrape measures one scrape of /stats/prometheus (every family, the process's and
// the Go runtime's included) on a stack that has served reads: through the read-only stats listener
// (-stats-listen, what the Helm chart's Prometheus scrapes) and through the admin listener (its HTTP
// handler, then the admin service over internal gRPC). cpu-us/op is the process's CPU per scrape, the
// client's small share included; issue 43 bounds it at 1 ms.
func BenchmarkPrometheusScrape(b *testing.B) {
	s := startStack(b, func(c *stack.Config) { unlimitedWrites(c); c.StatsListen = "127.0.0.1:0" })
	paths := readPaths(b, s)
	for range 20 { // the latency histograms and route series get samples
		for _, p := range paths {
			s.get(p).must(b, 200)
		}
	}
	for _, tc := range []struct{ name, url string }{
		{"stats_listener", "http://" + s.StatsAddr + "/stats/prometheus"},
		{"admin", s.adm + "/stats/prometheus"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var size int
			b.ReportAllocs()
			cpuStart := processCPU()
			for b.Loop() {
				resp, err := client.Get(tc.url)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, resp.Body) // the client's share of the CPU kept small
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("%s: %d %v", tc.url, resp.StatusCode, err)
				}
				size = int(n)
			}
			b.ReportMetric(float64((processCPU()-cpuStart).Microseconds())/float64(b.N), "cpu-us/op")
			b.ReportMetric(float64(size), "bytes")
		})
	}
}
