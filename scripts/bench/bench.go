package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/internal/benchload"
	"github.com/gantry-dev/gantry/pkg/freeport"
	"github.com/gantry-dev/gantry/pkg/wirekeys"
)

// options are the flags of make bench and make bench-peer.
type options struct {
	gantryBin string
	repo      string
	duration  time.Duration
	rounds    int
	warmup    time.Duration
	fsyncTime time.Duration
}

func addOptions(fs *flag.FlagSet, defaultRounds int) *options {
	o := &options{}
	fs.StringVar(&o.gantryBin, "gantry", "bin/gantry", "the gantry binary to measure (make build's)")
	fs.StringVar(&o.repo, "repo", ".", "the repository root (for deploy/chat.yaml)")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "load time of each workload (and of its limit), split over the rounds")
	fs.IntVar(&o.rounds, "rounds", defaultRounds, "rounds a workload alternates with its reference, so load from other work weighs on both alike")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "load before each workload's measurement (connections, caches; with the write limit on, the burst is spent here)")
	fs.DurationVar(&o.fsyncTime, "fsync-time", 2*time.Second, "how long the raw fdatasync rate is measured")
	return o
}

// shortForm turns the options into the quick form CI could run (about 1 s per workload).
func (o *options) shortForm() {
	o.duration, o.rounds, o.warmup, o.fsyncTime = time.Second, 1, 200*time.Millisecond, 500*time.Millisecond
}

// workload is one thing the table measures: requests against gantry, and the limit it is compared with.
type workload struct {
	name  string
	conns int
	req   benchload.Request
	// bareBody, when set, is the answer a bare server returns from memory: the read's limit.
	bareBody []byte
	// write workloads are compared with the fsync rate; chat ones with the direct call to Slack.
	write  bool
	direct benchload.Request
}

// row is one line of the table.
type row struct {
	workload, settings string
	conns              int
	res                benchload.Result
	limit              *benchload.Result // the bare server or the direct call, interleaved
	kind               string            // "read", "write", "chat"
	// limitOn says the write limit was on: 429s are then the expected answer, not a failure.
	limitOn bool
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o := addOptions(fs, 2)
	short := fs.Bool("short", false, "the quick form (about 1 s per workload, one round): checks that every workload runs, figures are rough")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *short {
		o.shortForm()
	}
	b, err := newBencher(o, stderr)
	if err != nil {
		return err
	}
	defer b.close()
	load0 := loadAvg()
	fsync, err := benchload.FsyncRate(b.dir, o.fsyncTime)
	if err != nil {
		return fmt.Errorf("fsync rate: %w", err)
	}
	configs := []struct {
		s     settings
		which func(w workload) bool
	}{
		{settings{writeLimit: "0"}, func(workload) bool { return true }},
		{settings{}, func(w workload) bool { return w.write }},
		{settings{writeLimit: "0", accessLog: true}, oneReadOneWrite},
	}
	var rows []row
	for _, c := range configs {
		got, err := b.measureGantry(ctx, c.s, c.which)
		if err != nil {
			return err
		}
		rows = append(rows, got...)
	}
	version, _ := exec.Command(o.gantryBin, "version").Output()
	fmt.Fprintf(stdout, "%s as its own process (serve -kms local, bbolt, every role in one process, internal mutual TLS, log level info, stdout to a file;\n", strings.TrimSpace(string(version)))
	fmt.Fprintf(stdout, "chat on the demo Slack workspace, which runs in the gantry process); load from this separate process (internal/benchload, keep-alive connections),\n")
	fmt.Fprintf(stdout, "%v per workload after %v of warm-up; reads alternate with their bare server in %d round(s). %d CPUs; load average %s at the start, %s at the end.\n",
		o.duration, o.warmup, o.rounds, runtime.NumCPU(), load0, loadAvg())
	fmt.Fprintf(stdout, "Raw 4 KiB write+fdatasync rate of the data folder's disk: %.0f/s. CPU µs/ok is the CPU of gantry's process alone per successful request (the bare server's for the limit).\n\n", fsync)
	render(stdout, rows, fsync)
	return nil
}

func oneReadOneWrite(w workload) bool {
	return w.name == "read one credential" || w.name == "one sequential writer"
}

// bencher holds what the runs share: a scratch folder, the generator's clients, this binary.
type bencher struct {
	o      *options
	dir    string
	self   string
	log    io.Writer
	client *http.Client
}

func newBencher(o *options, log io.Writer) (*bencher, error) {
	if _, err := os.Stat(o.gantryBin); err != nil {
		return nil, fmt.Errorf("no gantry binary at %s (make build makes it): %w", o.gantryBin, err)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gantry-bench-")
	if err != nil {
		return nil, err
	}
	return &bencher{o: o, dir: dir, self: self, log: log, client: benchload.NewClient(64)}, nil
}

func (b *bencher) close() { _ = os.RemoveAll(b.dir) }

// measureGantry starts gantry with s, creates the records, and measures the workloads which picks.
func (b *bencher) measureGantry(ctx context.Context, s settings, which func(workload) bool) ([]row, error) {
	fmt.Fprintf(b.log, "bench: gantry with %s\n", s)
	g, err := startGantry(ctx, b.o.gantryBin, b.o.repo, b.dir, s)
	if err != nil {
		return nil, err
	}
	defer g.stop()
	workloads, err := b.gantryWorkloads(g)
	if err != nil {
		return nil, err
	}
	var rows []row
	for _, w := range workloads {
		if !which(w) {
			continue
		}
		fmt.Fprintf(b.log, "bench:   %s (%d connections)\n", w.name, w.conns)
		r, err := b.measure(ctx, g.pid(), w, s.writeLimit != "0")
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", w.name, s, err)
		}
		r.settings = s.String()
		rows = append(rows, r)
	}
	return rows, nil
}

// measure runs w (after its warm-up), alternating with its limit: a bare server process for a read,
// the direct call for chat. Writes run alone (their limit is the fsync rate).
func (b *bencher) measure(ctx context.Context, pid int, w workload, limitOn bool) (row, error) {
	r := row{workload: w.name, conns: w.conns, kind: "write", limitOn: limitOn}
	run := func(req benchload.Request, pid int, d time.Duration) (benchload.Result, error) {
		return benchload.Run(ctx, b.client, benchload.Options{Conns: w.conns, Duration: d, PID: pid}, req)
	}
	if _, err := run(w.req, 0, b.o.warmup); err != nil {
		return r, err
	}
	if w.write && limitOn {
		// The burst (200 writes) is spent before the measurement, which then shows the sustained rate.
		if _, err := benchload.Run(ctx, b.client, benchload.Options{Conns: w.conns, Count: 300}, w.req); err != nil {
			return r, err
		}
	}
	var limitReq benchload.Request
	limitPID := pid
	switch {
	case w.bareBody != nil:
		r.kind = "read"
		bare, addr, err := b.startBare(ctx, w.bareBody)
		if err != nil {
			return r, err
		}
		defer bare.stop()
		limitPID = bare.pid()
		limitReq = func(int) (string, string, http.Header, []byte) {
			return http.MethodGet, "http://" + addr + "/", nil, nil
		}
	case w.direct != nil:
		r.kind = "chat"
		limitReq = w.direct
	}
	if limitReq == nil {
		res, err := run(w.req, pid, b.o.duration)
		r.res = res
		return r, err
	}
	if _, err := run(limitReq, 0, b.o.warmup); err != nil {
		return r, err
	}
	var work, limit benchload.Result
	per := b.o.duration / time.Duration(b.o.rounds)
	for i := range b.o.rounds {
		l, err := run(limitReq, limitPID, per)
		if err != nil {
			return r, err
		}
		m, err := run(w.req, pid, per)
		if err != nil {
			return r, err
		}
		if i == 0 {
			work, limit = m, l
			continue
		}
		work, limit = work.Merge(m), limit.Merge(l)
	}
	r.res, r.limit = work, &limit
	return r, nil
}

// startBare starts this binary's bare server answering body, and returns it with its address.
func (b *bencher) startBare(ctx context.Context, body []byte) (*proc, string, error) {
	f, err := os.CreateTemp(b.dir, "bare-body-")
	if err != nil {
		return nil, "", err
	}
	if _, err := f.Write(body); err != nil {
		return nil, "", err
	}
	_ = f.Close()
	addr, err := freeport.Find()
	if err != nil {
		return nil, "", err
	}
	p, err := startProc("bare server", b.self, f.Name()+".log", "bare", "-addr", addr, "-body", f.Name())
	if err != nil {
		return nil, "", err
	}
	if err := p.waitHTTP(ctx, "http://"+addr+"/", http.StatusOK); err != nil {
		p.stop()
		return nil, "", err
	}
	return p, addr, nil
}

// call makes one JSON request to gantry as auth and decodes the answer into out.
func (b *bencher) call(method, target, auth string, body any, out any) error {
	data, _ := json.Marshal(body)
	req, err := http.NewRequest(method, target, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", auth)
	resp, err := b.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d %.300s", method, target, resp.StatusCode, answer)
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = answer
		return nil
	}
	return json.Unmarshal(answer, out)
}

// gantryWorkloads creates the records of the workloads (as the setup user) and returns them.
func (b *bencher) gantryWorkloads(g *gantry) ([]workload, error) {
	n := 0
	create := func(pairs map[string]string) (string, error) {
		n++
		var c struct {
			ID string `json:"id"`
		}
		err := b.call(http.MethodPost, g.rest+"/v1/credentials", g.setupAuth,
			map[string]any{"name": fmt.Sprintf("bench-%d", n), "documentation": "make bench", "credential_pairs": pairs}, &c)
		return c.ID, err
	}
	read, err := create(map[string]string{"user": "app", "password": "hunter2"})
	if err != nil {
		return nil, err
	}
	var mapped []string
	for i := range 10 {
		id, err := create(map[string]string{fmt.Sprintf("key_%d", i): "v"})
		if err != nil {
			return nil, err
		}
		mapped = append(mapped, id)
	}
	if err := b.call(http.MethodPut, g.rest+"/v1/services/bench-service", g.setupAuth, map[string]any{"credentials": mapped}, nil); err != nil {
		return nil, err
	}
	var writeIDs []string
	for range 102 {
		id, err := create(map[string]string{"password": "v0"})
		if err != nil {
			return nil, err
		}
		writeIDs = append(writeIDs, id)
	}
	get := func(path string) (benchload.Request, []byte, error) {
		var body []byte
		if err := b.call(http.MethodGet, g.rest+path, g.auth, nil, &body); err != nil {
			return nil, nil, err
		}
		header := http.Header{"Authorization": {g.auth}}
		return func(int) (string, string, http.Header, []byte) { return http.MethodGet, g.rest + path, header, nil }, body, nil
	}
	readCred, credBody, err := get("/v1/credentials/" + read)
	if err != nil {
		return nil, err
	}
	readService, serviceBody, err := get("/v1/services/bench-service")
	if err != nil {
		return nil, err
	}
	update := func(ids []string) benchload.Request {
		header := http.Header{"Authorization": {g.auth}, "Content-Type": {"application/json"}}
		return func(i int) (string, string, http.Header, []byte) {
			body := fmt.Appendf(nil, `{"credential_pairs":{"password":"v%d"}}`, i)
			return http.MethodPut, g.rest + "/v1/credentials/" + ids[i%len(ids)], header, body
		}
	}
	chatHeader := http.Header{"Content-Type": {"application/json"}, http.CanonicalHeaderKey(wirekeys.DownstreamServiceCluster): {"alerts"}}
	chatBody := []byte(`{"action":"chat.postMessage","kwargs":{"channel":"C0GENERAL","text":"benchmark message","as_user":true}}`)
	viaGateway := func(int) (string, string, http.Header, []byte) {
		return http.MethodPost, g.rest + "/api/v2/chat/action/example-team/example-bot", chatHeader, chatBody
	}
	directHeader := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "Authorization": {"Bearer xoxb-demo-a00000001"}}
	directBody := []byte(url.Values{"channel": {"C0GENERAL"}, "text": {"benchmark message"}, "as_user": {"true"}}.Encode())
	direct := func(int) (string, string, http.Header, []byte) {
		return http.MethodPost, g.slackAPI + "chat.postMessage", directHeader, directBody
	}
	// A Prometheus scrape of every family, on the read-only stats listener (-stats-listen, what the
	// Helm chart's Prometheus scrapes: the page rendered in process) and on the admin port (its HTTP
	// handler, then the admin service over internal gRPC with mutual TLS). Their limit is the bare
	// server answering the same page.
	scrape := func(base string) (benchload.Request, []byte, error) {
		target := base + "/stats/prometheus"
		var page []byte
		if err := b.call(http.MethodGet, target, "", nil, &page); err != nil {
			return nil, nil, err
		}
		return func(int) (string, string, http.Header, []byte) { return http.MethodGet, target, nil, nil }, page, nil
	}
	var scrapes []workload
	if g.stats != "" { // make bench-peer's etcd topology has no stats listener, and no scrape row
		scrapeStats, statsPage, err := scrape(g.stats)
		if err != nil {
			return nil, err
		}
		scrapeAdmin, adminPage, err := scrape(g.admin)
		if err != nil {
			return nil, err
		}
		scrapes = []workload{
			{name: "scrape /stats/prometheus (stats listener)", conns: 1, req: scrapeStats, bareBody: statsPage},
			{name: "scrape /stats/prometheus (admin port)", conns: 1, req: scrapeAdmin, bareBody: adminPage},
		}
	}
	return append([]workload{
		{name: "read one credential", conns: 16, req: readCred, bareBody: credBody},
		{name: "read a service of 10 credentials", conns: 16, req: readService, bareBody: serviceBody},
		{name: "one sequential writer", conns: 1, req: update(writeIDs[:1]), write: true},
		{name: "16 writers over 100 credentials", conns: 16, req: update(writeIDs[2:]), write: true},
		{name: "16 writers on one credential", conns: 16, req: update(writeIDs[1:2]), write: true},
		{name: "chat action, 16 clients", conns: 16, req: viaGateway, direct: direct},
		{name: "chat action, 1 client", conns: 1, req: viaGateway, direct: direct},
	}, scrapes...), nil
}

// loadAvg is the 1, 5 and 15 minute load averages, the noise the figures were taken in.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
