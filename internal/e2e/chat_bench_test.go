package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// concurrentLatencies runs op n times from the given number of goroutines and returns the sorted
// latencies.
func concurrentLatencies(n, clients int, op func() error) ([]time.Duration, error) {
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
			for next.Add(1) <= int64(n) {
				t0 := time.Now()
				if err := op(); err != nil {
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

func p50(l []time.Duration) time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[len(l)/2]
}

// BenchmarkChatActionPassThrough measures what the gateway and the chat service add to a Slack call:
// chat.postMessage through the action route against the fake Slack, and the same call made directly
// to the fake, each from 16 concurrent clients. overhead-p50-ms is the difference of the medians; with
// 16 clients on a small machine it is mostly queueing (16 / throughput), so the same difference for
// one client is reported too.
func BenchmarkChatActionPassThrough(b *testing.B) {
	b.Logf("GOMAXPROCS=%d, %d concurrent clients", runtime.GOMAXPROCS(0), benchClients)
	f := newSlack(b)
	s := startChat(b, f, chatTeams+chatACL, nil)
	body := `{"action":"chat.postMessage","kwargs":{"channel":"C0GENERAL","text":"benchmark message","as_user":true}}`
	form := url.Values{"channel": {"C0GENERAL"}, "text": {"benchmark message"}, "as_user": {"true"}}.Encode()

	direct := func() error {
		req, _ := http.NewRequest(http.MethodPost, f.APIURL()+"chat.postMessage", strings.NewReader(form))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer "+e2eBotToken)
		return expectOK(client.Do(req))
	}
	gateway := func() error {
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
	start := time.Now()
	viaGateway, err := concurrentLatencies(b.N, benchClients, gateway)
	elapsed := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	directLat, err := concurrentLatencies(b.N, benchClients, direct)
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
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(p50(gw1)-p50(direct1)), "overhead-p50-1client-ms")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	b.ReportMetric(ms(p50(viaGateway)), "gateway-p50-ms")
	b.ReportMetric(ms(p50(directLat)), "direct-p50-ms")
	b.ReportMetric(ms(p50(viaGateway)-p50(directLat)), "overhead-p50-ms")
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
