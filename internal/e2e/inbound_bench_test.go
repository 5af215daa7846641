package e2e

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/services/chat/slackfake"
)

// BenchmarkInboundEvents: signed Events API requests accepted per second through the gateway (each
// verified and stored durably before the 200), and the receive-to-dispatch latency of the backend
// calls they cause (p50/p99 reported as metrics).
func BenchmarkInboundEvents(b *testing.B) {
	f := slackfake.StartWorkspace(b)
	be := startBackend(b, `{}`)
	s := startInbound(b, f, be, func(c *stack.Config) { c.Chat.Inbound.Workers = 8 })
	var seq atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := fmt.Sprintf("EvBENCH%09d", seq.Add(1))
			r := s.slackPost("/api/v1/slack/event", "application/json", messageEvent(id, "<@U0BOT0001> ping"), inboundSecret, time.Now(), 0)
			if r.code != 200 {
				b.Errorf("%d %s", r.code, r.body)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "accepted/s")
	deadline := time.Now().Add(2 * time.Minute)
	for len(be.calls()) < b.N && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	for _, h := range s.Stats.Histograms() {
		if strings.HasSuffix(h.Name, "event.receive_to_dispatch") {
			b.ReportMetric(h.Quantile(50), "p50-ms")
			b.ReportMetric(h.Quantile(99), "p99-ms")
		}
	}
}
