package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// BenchmarkInboundEvents: signed Events API requests accepted per second through the gateway (each
// verified and stored durably before the 200), and the receive-to-dispatch latency of the backend
// calls they cause (p50/p99 reported as metrics).
func BenchmarkInboundEvents(b *testing.B) {
	f := slacktest.StartWorkspace(b)
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

// BenchmarkSlackRefusedUnsigned: what a forged, unsigned 900 KB Slack event costs the gateway before
// its 401 (issue 24: it was read whole, and passed to the chat service, before the refusal). B/op
// counts the client's allocations too.
func BenchmarkSlackRefusedUnsigned(b *testing.B) {
	f := slacktest.StartWorkspace(b)
	be := startBackend(b, `{}`)
	s := startInbound(b, f, be, nil)
	body := `{"type":"event_callback","api_app_id":"A0PING001","pad":"` + strings.Repeat("x", 900<<10) + `"}`
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("POST", s.rest+"/api/v1/slack/event", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != 401 {
				b.Errorf("%d", resp.StatusCode)
				return
			}
		}
	})
}
