package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// BenchmarkChatActionPassThrough measures what the gateway and the chat service add to a Slack call:
// chat.postMessage through the action route against the fake Slack, and the same call made directly
// to the fake, each from 16 concurrent clients. overhead-p50-ms is the difference of the medians; with
// 16 clients on a small machine it is mostly queueing (16 / throughput), so the same difference for
// one client is reported too, and the CPU the two hops add to a call (overhead-cpu-us/op).
func BenchmarkChatActionPassThrough(b *testing.B) {
	b.Logf("GOMAXPROCS=%d, %d concurrent clients", runtime.GOMAXPROCS(0), benchClients)
	f := slacktest.StartWorkspace(b)
	s := startChat(b, f, chatTeams+chatACL, nil)
	body := `{"action":"chat.postMessage","kwargs":{"channel":"C0GENERAL","text":"benchmark message","as_user":true}}`
	form := url.Values{"channel": {"C0GENERAL"}, "text": {"benchmark message"}, "as_user": {"true"}}.Encode()

	direct := func(int) error {
		req, _ := http.NewRequest(http.MethodPost, f.APIURL()+"chat.postMessage", strings.NewReader(form))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer "+e2eBotToken)
		return expectOK(client.Do(req))
	}
	gateway := func(int) error {
		req, _ := http.NewRequest(http.MethodPost, s.rest+"/api/v2/chat/action/acme/pingbot", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Proxy-Downstream-Service-Cluster", "echobot")
		return expectOK(client.Do(req))
	}
	// Warm the connection pools of both paths.
	if _, err := concurrentLatencies(4*benchClients, benchClients, direct); err != nil {
		b.Fatal(err)
	}
	if _, err := concurrentLatencies(4*benchClients, benchClients, gateway); err != nil {
		b.Fatal(err)
	}

	b.ResetTimer()
	start, cpuStart := time.Now(), processCPU()
	viaGateway, err := concurrentLatencies(b.N, benchClients, gateway)
	elapsed, gatewayCPU := time.Since(start), processCPU()-cpuStart
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	cpuStart = processCPU()
	directLat, err := concurrentLatencies(b.N, benchClients, direct)
	directCPU := processCPU() - cpuStart
	if err != nil {
		b.Fatal(err)
	}
	// One client alone shows the added latency of a call without the queueing of 16 clients on few
	// cores.
	n1 := min(b.N, 500)
	gw1, err := concurrentLatencies(n1, 1, gateway)
	if err != nil {
		b.Fatal(err)
	}
	direct1, err := concurrentLatencies(n1, 1, direct)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(ms(percentile(gw1, 0.5)-percentile(direct1, 0.5)), "overhead-p50-1client-ms")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	b.ReportMetric(ms(percentile(viaGateway, 0.5)), "gateway-p50-ms")
	b.ReportMetric(ms(percentile(directLat, 0.5)), "direct-p50-ms")
	b.ReportMetric(ms(percentile(viaGateway, 0.5)-percentile(directLat, 0.5)), "overhead-p50-ms")
	// The CPU the gateway and chat add to one call (the fake Slack runs in the process too, on both paths).
	b.ReportMetric(float64((gatewayCPU-directCPU).Microseconds())/float64(b.N), "overhead-cpu-us/op")
}

func expectOK(resp *http.Response, err error) error {
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %s", resp.StatusCode, data)
	}
	return nil
}
