package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

// TestMain lets the test binary serve as the bare server and the attacking process: the
// orchestration starts its own executable with "bare" or "attack", which in a test is this binary.
//
// With "server" it is a stand-in for OpenBao (fakeBao), for TestPeerAgainstFakeOpenBao: OpenBao
// cannot be built here, and the orchestration of make bench-peer must still be exercised.
//
// With --name=... (or --version) it is a real etcd member: etcd's own server main (etcdmain, as
// cmd/etcd), so TestPeerEtcdAgainstFakeOpenBao runs make bench-peer STORE=etcd's cluster without
// building bin/etcd.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == "bare" || os.Args[1] == "attack") {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 2 && os.Args[1] == "server" {
		fakeBao(strings.TrimPrefix(os.Args[2], "-config="))
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "version" {
		fmt.Println("OpenBao stand-in (scripts/bench's test binary)")
		return
	}
	if len(os.Args) > 1 && (strings.HasPrefix(os.Args[1], "--name=") || os.Args[1] == "--version") {
		etcdmain.Main(os.Args)
		return
	}
	os.Exit(m.Run())
}

// fakeBao serves the part of OpenBao's HTTP API that make bench-peer uses, with its statuses: the
// health check answers 501 until init (or a raft join) and 503 while sealed, and a node that joined
// another's raft cluster answers 429 (standby) once unsealed; KV v2 needs the policy token, not the
// root token. With an audit stanza in its configuration, every KV request appends a line to the
// audit file.
func fakeBao(configPath string) {
	config, err := os.ReadFile(configPath)
	if err != nil {
		panic(err)
	}
	addr := regexp.MustCompile(`(?m)^\s*address\s*=\s*"([^"]+)"`).FindSubmatch(config)
	if addr == nil {
		panic("no listener address in " + configPath)
	}
	var auditFile *os.File
	if m := regexp.MustCompile(`(?s)audit "file".*file_path\s*=\s*"([^"]+)"`).FindSubmatch(config); m != nil {
		if auditFile, err = os.OpenFile(string(m[1]), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
			panic(err)
		}
	}
	var (
		mu                                  sync.Mutex
		initialised, joined, unsealed, kvOn bool
		secrets                             = map[string][]byte{}
	)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sys/health", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case !initialised && !joined:
			w.WriteHeader(http.StatusNotImplemented)
		case !unsealed:
			w.WriteHeader(http.StatusServiceUnavailable)
		case joined:
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	mux.HandleFunc("POST /v1/sys/storage/raft/join", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Leader string `json:"leader_api_addr"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Leader == "" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		joined = true
		mu.Unlock()
		_, _ = io.WriteString(w, `{"joined":true}`)
	})
	mux.HandleFunc("PUT /v1/sys/init", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		initialised = true
		mu.Unlock()
		_, _ = io.WriteString(w, `{"keys_base64":["a2V5"],"root_token":"root"}`)
	})
	mux.HandleFunc("PUT /v1/sys/unseal", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		unsealed = true
		mu.Unlock()
		_, _ = io.WriteString(w, `{"sealed":false}`)
	})
	root := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Vault-Token") != "root" {
				w.WriteHeader(http.StatusForbidden)
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("POST /v1/sys/mounts/secret", root(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		kvOn = true
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.HandleFunc("PUT /v1/sys/policies/acl/bench", root(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	mux.HandleFunc("POST /v1/auth/token/create", root(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"auth":{"client_token":"policy-token"}}`)
	}))
	mux.HandleFunc("/v1/secret/data/{name}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if !kvOn || r.Header.Get("X-Vault-Token") != "policy-token" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		name := r.PathValue("name")
		if auditFile != nil {
			_, _ = fmt.Fprintf(auditFile, "{\"path\":%q}\n", r.URL.Path)
		}
		if r.Method == http.MethodGet {
			_, _ = w.Write(secrets[name])
			return
		}
		body, _ := io.ReadAll(r.Body)
		secrets[name] = append([]byte(`{"data":`), append(body, '}')...)
		_, _ = io.WriteString(w, `{"data":{"version":1}}`)
	})
	_ = http.ListenAndServe(string(addr[1]), mux)
}

// TestShortForm runs make bench's orchestration in its quick form (about 1 s per workload) against a
// gantry built for the test: every workload runs against a separate gantry process, the read limits
// against bare server processes, and the table has every row with its settings and no unexpected
// error. This is the smoke form CI could run (about 30 s); the figures are not checked.
func TestShortForm(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gantry and runs the benchmark orchestration; skipped with -short")
	}
	bin := gantryBinary(t)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-short", "-gantry", bin, "-repo", "../.."}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, &stdout, &stderr)
	}
	table := stdout.String()
	for _, want := range []string{
		"| read one credential | write limit off, access log off, audit on (stdout) | 16 |",
		"| read a service of 10 credentials |", "| one sequential writer |", "| 16 writers over 100 credentials |",
		"| 16 writers on one credential |", "| chat action, 16 clients |", "| chat action, 1 client |",
		"write limit on (default 20/s per principal, burst 200)", "access log on (a file)",
		"bare server", "of the raw fsync rate", "adds", "429×", "Raw 4 KiB write+fdatasync rate",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "first error") {
		t.Errorf("unexpected errors:\n%s", table)
	}
	// With the write limit off nothing is refused; with it on, writes beyond 20/s are.
	for _, line := range strings.Split(table, "\n") {
		if strings.Contains(line, "write limit off") && !strings.HasSuffix(line, "| 0 |") {
			t.Errorf("errors with the write limit off: %s", line)
		}
	}
}

// TestFloodShortForm runs make bench-flood's orchestration in its quick form against a gantry built
// for the test: gantry, the attacking process and the probes are three processes; every form's row is
// in the table for both probes, and the attack's bodies were all answered with the service's refusal
// (401 without a credential or with a forged session, 403 with a forged kmsauth or bearer token),
// none read and served. The figures are not checked.
func TestFloodShortForm(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gantry and runs the flood orchestration; skipped with -short")
	}
	bin := gantryBinary(t)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"flood", "-short", "-conns", "8", "-gantry", bin, "-repo", "../.."}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, &stdout, &stderr)
	}
	table := stdout.String()
	for _, form := range []struct{ name, refusal string }{{"none", "401"}, {"basic", "403"}, {"bearer", "403"}, {"session", "401"}} {
		for _, probe := range []string{"read", "small write"} {
			var row string
			for _, line := range strings.Split(table, "\n") {
				if strings.HasPrefix(line, "| "+form.name+" | "+probe+" |") {
					row = line
				}
			}
			if row == "" {
				t.Errorf("no row for %s, %s:\n%s", form.name, probe, table)
				continue
			}
			if !regexp.MustCompile(`\| ` + form.refusal + ` ×[0-9]+ \|`).MatchString(row) {
				t.Errorf("%s: the attack's answers are not all %s: %s", form.name, form.refusal, row)
			}
		}
	}
}

// TestPeerSkipsWithoutOpenBao: make bench-peer without an OpenBao binary says how to get one and
// succeeds, so it can sit in any checklist.
func TestPeerSkipsWithoutOpenBao(t *testing.T) {
	for _, bao := range []string{"", filepath.Join(t.TempDir(), "no-such-bao")} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"peer", "-bao", bao}, &stdout, &stderr); code != 0 {
			t.Fatalf("BAO=%q: exit %d, want 0 (skipped); stderr %s", bao, code, &stderr)
		}
		if !strings.Contains(stdout.String(), "skipped") || !strings.Contains(stdout.String(), "docs/performance.md") {
			t.Errorf("BAO=%q: %q does not say it skipped and where the build is documented", bao, stdout.String())
		}
	}
}

var (
	buildOnce  sync.Once
	builtPath  string
	buildError error
)

// gantryBinary builds cmd/gantry once per test binary.
func gantryBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "bench-test-gantry-")
		if err != nil {
			buildError = err
			return
		}
		builtPath = filepath.Join(dir, "gantry")
		if out, err := exec.Command("go", "build", "-o", builtPath, "github.com/gantry-dev/gantry/cmd/gantry").CombinedOutput(); err != nil {
			buildError = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildError != nil {
		t.Fatal(buildError)
	}
	return builtPath
}

// TestPeerAgainstFakeOpenBao runs make bench-peer's orchestration against a stand-in for OpenBao
// (fakeBao: this test binary, speaking the API calls bench-peer makes): the server is initialised,
// unsealed, given a KV v2 mount and a policy token, every workload runs against both servers in
// each round, and the table has a ratio for each. Whether the real OpenBao accepts the same calls
// is for BAO=... make bench-peer to show.
func TestPeerAgainstFakeOpenBao(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gantry and runs the benchmark orchestration; skipped with -short")
	}
	bin := gantryBinary(t)
	var stdout, stderr bytes.Buffer
	args := []string{"peer", "-gantry", bin, "-repo", "../..", "-bao", os.Args[0], "-duration", "300ms", "-rounds", "2", "-warmup", "100ms", "-fsync-time", "100ms"}
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, &stdout, &stderr)
	}
	table := stdout.String()
	t.Log("\n" + table)
	for _, name := range []string{"read one credential", "one sequential writer", "16 writers over 100 credentials", "16 writers on one credential"} {
		row := regexp.MustCompile(`(?m)^\| ` + name + ` \| \d+ \| \d+, \d+ \| \d+, \d+ \| [0-9.]+× \([0-9.]+–[0-9.]+×\) \|.* \| 0 / 0 \|$`)
		if !row.MatchString(table) {
			t.Errorf("no row for %q with two rounds, a ratio and no errors:\n%s", name, table)
		}
	}
}

// TestPeerEtcdAgainstFakeOpenBao runs make bench-peer STORE=etcd's orchestration in short form: a
// real 3-member etcd cluster (this test binary as etcd's own server main), two gantry secrets
// replicas on it and a gateway in front of both, each a process of its own, against two 3-node
// clusters of the OpenBao stand-in (one node initialised, two joined to it and unsealed as standbys),
// one with a file audit device and one without. Each table has every workload with two rounds, a
// ratio and no errors, and the settings of both sides. The figures are not checked.
func TestPeerEtcdAgainstFakeOpenBao(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gantry and runs the benchmark orchestration on an etcd cluster; skipped with -short")
	}
	bin := gantryBinary(t)
	var stdout, stderr bytes.Buffer
	args := []string{"peer", "-store", "etcd", "-etcd", os.Args[0], "-gantry", bin, "-repo", "../..", "-bao", os.Args[0],
		"-duration", "300ms", "-rounds", "2", "-warmup", "100ms", "-fsync-time", "100ms"}
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, &stdout, &stderr)
	}
	out := stdout.String()
	t.Log("\n" + out)
	if !regexp.MustCompile(`(?m)^\| read one credential \| \d+ \| \d+ \| \d+ \|$`).MatchString(out) {
		t.Errorf("no split of gantry's CPU per read by process (gateway, replicas, etcd members):\n%s", out)
	}
	out, _, _ = strings.Cut(out, "\ngantry's CPU per successful request by process")
	tables := strings.Split(out, "\n\ngantry on etcd")
	if len(tables) != 2 {
		t.Fatalf("want two tables (OpenBao with a file audit device, without), got %d:\n%s", len(tables), out)
	}
	for i, want := range []string{"a file audit device", "no audit device"} {
		table := tables[i]
		for _, s := range []string{"2 secrets replicas", "a gateway", "3-member etcd", "write limit off, access log off, audit on",
			"raft storage, 3 nodes", want, "OpenBao stand-in"} {
			if !strings.Contains(table, s) {
				t.Errorf("table %d does not say %q:\n%s", i, s, table)
			}
		}
		for _, name := range []string{"read one credential", "one sequential writer", "16 writers over 100 credentials", "16 writers on one credential"} {
			row := regexp.MustCompile(`(?m)^\| ` + name + ` \| \d+ \| \d+, \d+ \| \d+, \d+ \| [0-9.]+× \([0-9.]+–[0-9.]+×\) \|.* \| 0 / 0 \|$`)
			if !row.MatchString(table) {
				t.Errorf("table %d: no row for %q with two rounds, a ratio and no errors:\n%s", i, name, table)
			}
		}
	}
}
