package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantry-dev/gantry/internal/benchload"
)

// make bench-flood measures issues 24 and 40's attack from processes of their own: gantry (bin/gantry
// serve), an attacking process (this binary, "bench attack") whose connections each offer a 900 KB
// JSON body to POST /v1/credentials once a second, with no credential or a forged one, and this
// process, which probes with one reader (GET /v1/credentials/{id}) and one small writer (PUT of a
// 40-byte body), each one request at a time on a kept-alive connection. Windows without and with the
// attack alternate, so that other load on a shared machine falls on both alike; requests in the first
// part of a window (-settle) are left out. The figure is each probe's p99 under the attack over its
// p99 without it, per credential form.

// floodBodySize is the size of each attacking body, as in the report of the flood that multiplied a read's p99 by 4-19.
const floodBodySize = 900 << 10

// floodForms are the credentials the attack sends, by name: none, a forged kmsauth token in HTTP
// Basic, a token shaped like a JWT, a session cookie with an XSRF header (the default cookie name).
var floodForms = map[string]string{
	"none":    "",
	"basic":   "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("2/user/alice:"+strings.Repeat("A", 300))) + "\r\n",
	"bearer":  "Authorization: Bearer aaaa.bbbb.cccc\r\n",
	"session": "Cookie: confidant_session=" + strings.Repeat("x", 200) + "\r\nX-XSRF-TOKEN: " + strings.Repeat("y", 40) + "\r\n",
}

type floodOptions struct {
	gantryBin, repo string
	conns, windows  int
	window, settle  time.Duration
	forms           string
}

func runFlood(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench flood", flag.ContinueOnError)
	o := floodOptions{}
	fs.StringVar(&o.gantryBin, "gantry", "bin/gantry", "the gantry binary to measure (make build's)")
	fs.StringVar(&o.repo, "repo", ".", "the repository root (for deploy/chat.yaml)")
	fs.IntVar(&o.conns, "conns", 64, "attacking connections, each offering one 900 KB body a second")
	fs.IntVar(&o.windows, "windows", 4, "windows with and without the attack, per credential form")
	fs.DurationVar(&o.window, "window", 2*time.Second, "length of each window")
	fs.DurationVar(&o.settle, "settle", 500*time.Millisecond, "start of each window left out (the other side settles after a change)")
	fs.StringVar(&o.forms, "forms", "none,basic,bearer,session", "credential forms of the attack, comma-separated")
	short := fs.Bool("short", false, "the quick form (one window of 1 s each way per form): checks that it runs, figures are rough")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *short {
		o.windows, o.window, o.settle = 1, time.Second, 250*time.Millisecond
	}
	b, err := newBencher(&options{gantryBin: o.gantryBin, repo: o.repo}, stderr)
	if err != nil {
		return err
	}
	defer b.close()
	load0 := loadAvg()
	g, err := startGantry(ctx, o.gantryBin, o.repo, b.dir, settings{writeLimit: "0"})
	if err != nil {
		return err
	}
	defer g.stop()
	var created struct {
		ID string `json:"id"`
	}
	if err := b.call(http.MethodPost, g.rest+"/v1/credentials", g.setupAuth,
		map[string]any{"name": "flood-probe", "documentation": "make bench-flood", "credential_pairs": map[string]string{"password": "v0"}}, &created); err != nil {
		return err
	}
	read := func(int) (string, string, http.Header, []byte) {
		return http.MethodGet, g.rest + "/v1/credentials/" + created.ID, http.Header{"Authorization": {g.auth}}, nil
	}
	write := func(i int) (string, string, http.Header, []byte) {
		return http.MethodPut, g.rest + "/v1/credentials/" + created.ID, http.Header{"Authorization": {g.auth}, "Content-Type": {"application/json"}},
			fmt.Appendf(nil, `{"credential_pairs":{"password":"v%d"}}`, i)
	}
	var rows []floodRow
	for _, form := range strings.Split(o.forms, ",") {
		if _, ok := floodForms[form]; !ok {
			return fmt.Errorf("-forms: unknown form %q (none, basic, bearer, session)", form)
		}
		fmt.Fprintf(stderr, "bench: flood with %d connections, credential %s\n", o.conns, form)
		r, err := measureFlood(ctx, b, g, o, form, read, write)
		if err != nil {
			return fmt.Errorf("flood (%s): %w", form, err)
		}
		rows = append(rows, r)
	}
	version, _ := exec.Command(o.gantryBin, "version").Output()
	fmt.Fprintf(stdout, "%s as its own process (serve -kms local, bbolt, every role in one process, internal mutual TLS, write limit off, access log off, audit on (stdout to a file)).\n",
		strings.TrimSpace(string(version)))
	fmt.Fprintf(stdout, "Attack from a process of its own: %d connections, each offering a %d KB body to POST /v1/credentials once a second. Probes from this process: one reader\n", o.conns, floodBodySize>>10)
	fmt.Fprintf(stdout, "(GET /v1/credentials/{id}) and one small writer (PUT, 40-byte body), one request at a time each. %d window(s) of %v without and with the attack, alternating,\n", o.windows, o.window)
	fmt.Fprintf(stdout, "the first %v of each left out. %d CPUs; load average %s at the start, %s at the end.\n\n", o.settle, runtime.NumCPU(), load0, loadAvg())
	fmt.Fprintln(stdout, "| attack's credential | probe | without: n, p50 / p99 ms | with: n, p50 / p99 ms | p99 with / without | attack answers | RSS peak without / with |")
	fmt.Fprintln(stdout, "|---|---|---|---|---:|---|---|")
	for _, r := range rows {
		for _, p := range []struct {
			name      string
			base, hit []time.Duration
		}{{"read", r.baseRead, r.hitRead}, {"small write", r.baseWrite, r.hitWrite}} {
			fmt.Fprintf(stdout, "| %s | %s | %d, %s / %s | %d, %s / %s | %.2fx | %s | %d / %d MB |\n", r.form, p.name,
				len(p.base), ms(pct(p.base, 0.5)), ms(pct(p.base, 0.99)), len(p.hit), ms(pct(p.hit, 0.5)), ms(pct(p.hit, 0.99)),
				float64(pct(p.hit, 0.99))/float64(max(pct(p.base, 0.99), 1)), r.answers, r.baseRSS>>20, r.hitRSS>>20)
		}
	}
	return nil
}

// floodRow is one credential form's measurement.
type floodRow struct {
	form                                   string
	baseRead, hitRead, baseWrite, hitWrite []time.Duration
	answers                                string
	baseRSS, hitRSS                        int64
}

func measureFlood(ctx context.Context, b *bencher, g *gantry, o floodOptions, form string, read, write benchload.Request) (floodRow, error) {
	r := floodRow{form: form}
	attack, err := startAttack(b, g.rest, o.conns, form)
	if err != nil {
		return r, err
	}
	defer attack.stop()
	probes := []benchload.Request{read, write}
	for i := 0; i < o.windows; i++ {
		for _, on := range []bool{false, true} {
			attack.set(on)
			rss := sampleRSS(g.pid())
			got, err := probeWindow(ctx, b.client, probes, o.window, o.settle)
			peak := rss()
			if err != nil {
				return r, err
			}
			if on {
				r.hitRead, r.hitWrite, r.hitRSS = append(r.hitRead, got[0]...), append(r.hitWrite, got[1]...), max(r.hitRSS, peak)
			} else {
				r.baseRead, r.baseWrite, r.baseRSS = append(r.baseRead, got[0]...), append(r.baseWrite, got[1]...), max(r.baseRSS, peak)
			}
		}
	}
	r.answers = attack.stop()
	for _, l := range [][]time.Duration{r.baseRead, r.hitRead, r.baseWrite, r.hitWrite} {
		slices.Sort(l)
	}
	return r, nil
}

// probeWindow runs each probe, one request at a time, for d, and returns the latencies of the
// requests that started after skip. Any answer but 200 is an error: the probes are legitimate.
func probeWindow(ctx context.Context, client *http.Client, probes []benchload.Request, d, skip time.Duration) ([][]time.Duration, error) {
	out := make([][]time.Duration, len(probes))
	errs := make([]error, len(probes))
	var wg sync.WaitGroup
	begin := time.Now()
	for p, probe := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Since(begin) < d && ctx.Err() == nil; i++ {
				method, url, header, body := probe(i)
				req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(string(body)))
				if err != nil {
					errs[p] = err
					return
				}
				req.Header = header
				start := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					errs[p] = err
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					errs[p] = fmt.Errorf("%s %s: status %d", method, url, resp.StatusCode)
					return
				}
				if start.Sub(begin) >= skip {
					out[p] = append(out[p], time.Since(start))
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, ctx.Err()
}

// sampleRSS samples the resident memory of pid every 50 ms until the returned function is called,
// which returns the largest sample.
func sampleRSS(pid int) func() int64 {
	var peak atomic.Int64
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if rss := rssOf(pid); rss > peak.Load() {
				peak.Store(rss)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() int64 {
		close(done)
		<-finished
		return peak.Load()
	}
}

// rssOf reads VmRSS from /proc/<pid>/status, in bytes (0 where there is no /proc).
func rssOf(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// attackProc is the attacking process: "on" and "off" lines on its standard input start and pause
// it; closing its input ends it, and it prints how its requests were answered.
type attackProc struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	lines   *bufio.Scanner
	stopped bool
	summary string
}

func startAttack(b *bencher, url string, conns int, form string) (*attackProc, error) {
	cmd := exec.Command(b.self, "attack", "-url", url, "-conns", strconv.Itoa(conns), "-credential", form)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = b.log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &attackProc{cmd: cmd, stdin: stdin, lines: bufio.NewScanner(stdout)}, nil
}

func (a *attackProc) set(on bool) {
	line := "off\n"
	if on {
		line = "on\n"
	}
	_, _ = io.WriteString(a.stdin, line)
}

// stop ends the attack and returns its summary line: how its requests were answered.
func (a *attackProc) stop() string {
	if a.stopped {
		return a.summary
	}
	a.stopped = true
	_ = a.stdin.Close()
	for a.lines.Scan() {
		if s, ok := strings.CutPrefix(a.lines.Text(), "answers "); ok {
			a.summary = s
		}
	}
	_ = a.cmd.Wait()
	return a.summary
}

// runAttack is the attacking process: conns connections, each offering one body a second while the
// attack is on (it starts paused), until standard input closes.
func runAttack(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench attack", flag.ContinueOnError)
	url := fs.String("url", "", "gantry's REST address, http://host:port")
	conns := fs.Int("conns", 64, "connections")
	form := fs.String("credential", "none", "none, basic, bearer or session (forged)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	credential, ok := floodForms[*form]
	if !ok {
		return fmt.Errorf("-credential: unknown form %q", *form)
	}
	addr := strings.TrimPrefix(*url, "http://")
	head, tail := `{"name": "flood", "documentation": "d", "credential_pairs": {"k": "`, `"}}`
	body := []byte(head + strings.Repeat("a", floodBodySize-len(head)-len(tail)) + tail)
	header := fmt.Appendf(nil, "POST /v1/credentials HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n", addr, len(body), credential)

	ctx, cancel := context.WithCancel(context.Background())
	var on atomic.Bool
	var mu sync.Mutex
	codes := map[string]int{}
	var wg sync.WaitGroup
	for i := 0; i < *conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Connections start spread over one second, so their requests do not arrive in bursts.
			start := time.NewTimer(time.Second * time.Duration(i) / time.Duration(*conns))
			select {
			case <-ctx.Done():
				start.Stop()
				return
			case <-start.C:
			}
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for ctx.Err() == nil {
				if on.Load() {
					answer := benchload.OfferBody(addr, header, body)
					mu.Lock()
					codes[answer]++
					mu.Unlock()
				}
				select {
				case <-ctx.Done():
				case <-tick.C:
				}
			}
		}()
	}
	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		on.Store(lines.Text() == "on")
	}
	cancel()
	wg.Wait()
	var parts []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range codes {
			if !yield(k) {
				return
			}
		}
	}) {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, codes[k]))
	}
	fmt.Fprintf(stdout, "answers %s\n", strings.Join(parts, ", "))
	return nil
}

// pct is the p-th percentile of sorted latencies (0 for none).
func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}
