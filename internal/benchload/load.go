// Package benchload is the load generator of make bench and make bench-peer: N connections sending
// HTTP requests to a target for a duration or a count, reporting requests per second, p50/p99
// latency, the answers by status, and the CPU the target process spent (read from /proc), so CPU
// per request can be compared between servers. It runs in a process of its own, never inside the
// server it measures: a generator sharing the measured process takes CPU from it and flatters
// nothing but itself.
package benchload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Request is one request of a workload: i counts the requests of the run from 0, so a workload can
// spread them over records or vary a body.
type Request func(i int) (method, url string, header http.Header, body []byte)

// Options say how hard and how long to drive a target.
type Options struct {
	// Conns is the number of concurrent connections, each sending one request after the other.
	Conns int
	// Duration ends the run after this long, unless Count > 0: then it ends after Count requests.
	Duration time.Duration
	Count    int
	// PID is the target process, whose CPU time is read before and after (0: not measured).
	PID int
	// PIDs are more processes of the target (a cluster: its members, replicas and gateway), whose
	// CPU times are added to PID's.
	PIDs []int
	// OK is the status of a successful answer (0: any 2xx).
	OK int
}

// Result is what one run measured.
type Result struct {
	Requests int
	OK       int
	Elapsed  time.Duration
	// ByStatus counts the answers by HTTP status; transport errors are counted under 0.
	ByStatus map[int]int
	// FirstError is the first transport error or unexpected answer, for the report.
	FirstError string
	// P50 and P99 are the latencies of the successful requests.
	P50, P99 time.Duration
	// CPU is the target's user and system CPU time during the run (0 when not measured).
	CPU time.Duration
	// latencies are the sorted latencies of the successful requests, for Merge.
	latencies []time.Duration
}

// OKPerSec is successful requests per second.
func (r Result) OKPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.OK) / r.Elapsed.Seconds()
}

// CPUPerOK is the target's CPU per successful request (0 when not measured or none succeeded).
func (r Result) CPUPerOK() time.Duration {
	if r.OK == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.OK)
}

// Errors is a short "429×1203, 503×2" of the answers other than success.
func (r Result) Errors(ok func(int) bool) string {
	var parts []string
	for _, code := range sortedKeys(r.ByStatus) {
		if ok(code) {
			continue
		}
		name := fmt.Sprint(code)
		if code == 0 {
			name = "transport"
		}
		parts = append(parts, fmt.Sprintf("%s×%d", name, r.ByStatus[code]))
	}
	return strings.Join(parts, ", ")
}

// Merge adds o to r: the rounds of one workload interleaved with others are reported as one, its
// percentiles over the requests of every round.
func (r Result) Merge(o Result) Result {
	out := Result{Requests: r.Requests + o.Requests, OK: r.OK + o.OK, Elapsed: r.Elapsed + o.Elapsed, CPU: r.CPU + o.CPU,
		ByStatus: map[int]int{}, FirstError: r.FirstError}
	for k, v := range r.ByStatus {
		out.ByStatus[k] += v
	}
	for k, v := range o.ByStatus {
		out.ByStatus[k] += v
	}
	if out.FirstError == "" {
		out.FirstError = o.FirstError
	}
	out.latencies = append(append(make([]time.Duration, 0, len(r.latencies)+len(o.latencies)), r.latencies...), o.latencies...)
	slices.Sort(out.latencies)
	out.P50, out.P99 = percentile(out.latencies, 0.50), percentile(out.latencies, 0.99)
	return out
}

// NewClient is an HTTP client for conns concurrent connections to one host, keeping them alive.
func NewClient(conns int) *http.Client {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConns = conns * 2
	transport.MaxIdleConnsPerHost = conns * 2
	transport.MaxConnsPerHost = conns
	return &http.Client{Transport: transport, Timeout: 30 * time.Second}
}

// Run drives req from opt.Conns goroutines through client until the duration or the count is
// reached. It stops early only when ctx ends.
func Run(ctx context.Context, client *http.Client, opt Options, req Request) (Result, error) {
	if opt.Conns < 1 {
		return Result{}, errors.New("benchload: Conns must be at least 1")
	}
	if opt.Count <= 0 && opt.Duration <= 0 {
		return Result{}, errors.New("benchload: give a Duration or a Count")
	}
	isOK := func(code int) bool { return code >= 200 && code <= 299 }
	if opt.OK != 0 {
		isOK = func(code int) bool { return code == opt.OK }
	}
	var (
		next     atomic.Int64
		mu       sync.Mutex
		lat      []time.Duration
		byStatus = map[int]int{}
		first    string
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(opt.Duration)
	more := func() (int, bool) {
		i := int(next.Add(1) - 1)
		if ctx.Err() != nil {
			return i, false
		}
		if opt.Count > 0 {
			return i, i < opt.Count
		}
		return i, time.Now().Before(deadline)
	}
	cpuStart, err := cpuOf(opt.PID, opt.PIDs)
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	for range opt.Conns {
		wg.Go(func() {
			var local []time.Duration
			counts := map[int]int{}
			var firstLocal string
			for i, ok := more(); ok; i, ok = more() {
				method, url, header, body := req(i)
				t0 := time.Now()
				code, err := send(ctx, client, method, url, header, body)
				elapsed := time.Since(t0)
				counts[code]++
				switch {
				case err != nil:
					if firstLocal == "" {
						firstLocal = err.Error()
					}
				case isOK(code):
					local = append(local, elapsed)
				}
			}
			mu.Lock()
			lat = append(lat, local...)
			for k, v := range counts {
				byStatus[k] += v
			}
			if first == "" {
				first = firstLocal
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpuEnd, err := cpuOf(opt.PID, opt.PIDs)
	if err != nil {
		return Result{}, err
	}
	slices.Sort(lat)
	res := Result{OK: len(lat), Elapsed: elapsed, ByStatus: byStatus, FirstError: first, CPU: cpuEnd - cpuStart,
		P50: percentile(lat, 0.50), P99: percentile(lat, 0.99), latencies: lat}
	for _, n := range byStatus {
		res.Requests += n
	}
	return res, nil
}

// send makes one request and reads the whole answer (a connection is reused only once its body is
// read). A transport error is status 0; an answer that is not a success is an error quoting its start.
func send(ctx context.Context, client *http.Client, method, url string, header http.Header, body []byte) (int, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return 0, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %.200s", method, url, resp.StatusCode, data)
	}
	return resp.StatusCode, nil
}

// cpuOf is the CPU time processes pid (0: none) and more have used so far, together.
func cpuOf(pid int, more []int) (time.Duration, error) {
	var sum time.Duration
	for _, p := range append([]int{pid}, more...) {
		if p == 0 {
			continue
		}
		c, err := ProcessCPU(p)
		if err != nil {
			return 0, err
		}
		sum += c
	}
	return sum, nil
}

// percentile of sorted latencies, p in [0, 1].
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(float64(len(sorted)-1)*p)]
}

func sortedKeys(m map[int]int) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	return keys
}
