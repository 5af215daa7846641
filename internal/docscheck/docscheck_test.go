package docscheck

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stacktest"
	"github.com/gantry-dev/gantry/pkg/dynamotest"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kms/kmstest"
	"github.com/gantry-dev/gantry/services/secrets/confidant/confidanttest"
)

func TestExtract(t *testing.T) {
	md := "# T\n\n```sh\necho one\n```\n\n<!-- docs-check: skip (needs Docker) -->\n\n```sh\nmake up\n```\n\n" +
		"```yaml\na: 1\n```\n\n```console\n$ echo two\ntwo\n```\n"
	blocks, err := Extract([]byte(md))
	if err != nil {
		t.Fatal(err)
	}
	want := []Block{
		{Line: 4, Lang: "sh", Code: []string{"echo one"}},
		{Line: 10, Lang: "sh", Code: []string{"make up"}, Skip: "needs Docker"},
		{Line: 18, Lang: "console", Code: []string{"$ echo two", "two"}},
	}
	if !reflect.DeepEqual(blocks, want) {
		t.Fatalf("Extract:\n got %+v\nwant %+v", blocks, want)
	}
	script := BuildScript(blocks, strings.NewReplacer())
	if !strings.Contains(script.Text, "echo one\n") || strings.Contains(script.Text, "make up") || !strings.Contains(script.Text, "echo two\n") || strings.Contains(script.Text, "\ntwo\n") {
		t.Errorf("script runs the wrong lines:\n%s", script.Text)
	}
	if !reflect.DeepEqual(script.BlockLines, []int{4, 18}) {
		t.Errorf("block lines %v", script.BlockLines)
	}

	for _, bad := range []string{
		"<!-- docs-check: skip -->\n```sh\nx\n```\n",         // no reason
		"<!-- docs-check: skip (why) -->\n```yaml\nx\n```\n", // not a shell block
		"<!-- docs-check: skip (why) -->\nsome prose\n",      // not followed by a block
		"```sh\nnever closed\n",                              // unterminated fence
	} {
		if _, err := Extract([]byte(bad)); err == nil {
			t.Errorf("Extract(%q) accepted", bad)
		}
	}
}

// TestDocs runs every shell example of README.md and docs/*.md: per file, a freshly built gantry on
// free loopback ports with a new data folder and the demo Slack workspace, then the file's blocks in
// order in one bash (set -Eeuo pipefail) from the repository root. It runs under make docs-check
// (GANTRY_DOCS_CHECK=1); GANTRY_DOCS_CHECK_FILES narrows it to some files (space-separated).
func TestDocs(t *testing.T) {
	if os.Getenv("GANTRY_DOCS_CHECK") == "" {
		t.Skip("set GANTRY_DOCS_CHECK=1 (make docs-check) to run the documentation's examples")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files := strings.Fields(os.Getenv("GANTRY_DOCS_CHECK_FILES"))
	if len(files) == 0 {
		docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
		sort.Strings(docs)
		files = append([]string{"README.md"}, docs...)
	}
	bin := filepath.Join(t.TempDir(), "gantry")
	build := exec.Command("go", "build", "-o", bin, "./cmd/gantry")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, f := range files {
		rel, err := filepath.Rel(root, filepath.Join(root, f))
		if filepath.IsAbs(f) {
			rel, err = filepath.Rel(root, f)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Run(rel, func(t *testing.T) { checkFile(t, root, rel, bin) })
	}
}

// blockHang bounds the run of one file's examples.
const blockHang = 10 * time.Minute

func checkFile(t *testing.T, root, file, bin string) {
	md, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := Extract(md)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	runnable := 0
	for _, b := range blocks {
		if b.Skip == "" {
			runnable++
		}
	}
	if runnable == 0 {
		t.Skipf("%s: no shell block to run", file)
	}
	st := startStack(t, root, bin)
	st.confidantEnv = startConfidant(t)
	st.newDataDir = filepath.Join(t.TempDir(), "gantry")
	script := BuildScript(blocks, st.rewrite())
	failures := filepath.Join(t.TempDir(), "failures")
	// The deadline only bounds a hang (a server example that never returns): a file's examples take
	// seconds, but a loaded machine (CI beside CPU hogs) may take many times longer, and a build in
	// an example longer still. 3 minutes killed README.md's make build beside a CPU hog per core.
	ctx, cancel := context.WithTimeout(context.Background(), blockHang)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.Text)
	cmd.Dir = root
	// A timeout ends the whole process group: an example's children (a server, a build) too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// The client commands (gantry creds, login, ...) find the stack through these, as a reader's
	// find make run's defaults.
	cmd.Env = append(os.Environ(), "GANTRY_DATA_DIR="+st.dataDir, "GANTRY_ADDR=http://"+st.gateway, "GANTRY_URL_ROOT=http://"+st.gateway,
		"DOCSCHECK_FAILURES="+failures)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	if runErr == nil {
		t.Logf("%s: %d blocks ran", file, len(script.BlockLines))
		return
	}
	line := 0
	if trace, err := os.ReadFile(failures); err == nil {
		if fields := strings.Fields(string(trace)); len(fields) > 0 {
			if n, err := strconv.Atoi(fields[0]); err == nil && n >= 1 && n <= len(script.MDLine) {
				line = script.MDLine[n-1]
			}
		}
	}
	where := file
	if line > 0 {
		where = fmt.Sprintf("%s:%d", file, line)
		if code := mdLine(md, line); code != "" {
			where += ": " + code
		}
	}
	t.Fatalf("%s failed (%v)\noutput of the block:\n%s\ngantry's last log lines:\n%s", where, runErr, lastBlockOutput(out.String()), tail(st.log.String(), 15))
}

func mdLine(md []byte, n int) string {
	lines := strings.Split(string(md), "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	return strings.TrimSpace(lines[n-1])
}

// lastBlockOutput is the output after the last block marker: the failing block's.
func lastBlockOutput(out string) string {
	if i := strings.LastIndex(out, "\x1edocs-check block "); i >= 0 {
		out = out[i:]
		if j := strings.IndexByte(out, '\n'); j >= 0 {
			out = out[j+1:]
		}
	}
	return tail(out, 40)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// stack is a gantry process of the check: every role, configured as make run's, on free loopback
// ports, with its own data folder.
type stack struct {
	dataDir                                  string
	confidantEnv, newDataDir                 string
	gateway, admin, adminGRPC, secrets, chat string
	log                                      *bytes.Buffer
}

// rewrite maps the default local addresses the docs show to this stack's, and the default data
// folder to its own.
func (s *stack) rewrite() *strings.Replacer {
	return strings.NewReplacer(
		"localhost:8080", s.gateway, "127.0.0.1:8080", s.gateway,
		"localhost:9901", s.admin, "127.0.0.1:9901", s.admin,
		"127.0.0.1:9902", s.adminGRPC,
		"127.0.0.1:9090", s.secrets, "127.0.0.1:9091", s.chat,
		"gantry-data/", s.dataDir+"/",
		// The migration runbook: Confidant's env file, and the new data folder the import fills.
		"./confidant.env", s.confidantEnv,
		"/var/lib/gantry", s.newDataDir,
	)
}

// startConfidant is a Confidant installation as the import's tests have it: its DynamoDB table and
// its KMS as wire-protocol fakes, seeded in Confidant's item layout (two credentials, one with three
// revisions, and a service mapping both), and the env file that configures it, which it returns.
func startConfidant(t *testing.T) string {
	t.Helper()
	kmsFake := kmstest.NewServer()
	t.Cleanup(kmsFake.Close)
	kmsFake.CreateKey("alias/confidant")
	dynamo := dynamotest.NewServer()
	t.Cleanup(dynamo.Close)
	// The generator's own KMS client signs its calls as the import does (the fake checks no signature).
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "example")
	ctx := context.Background()
	source, err := kms.NewAWS(ctx, kms.AWSConfig{Region: kmstest.Region, Endpoint: kmsFake.URL()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	table := confidanttest.NewTable(dynamo, "confidant-production", source, "alias/confidant")
	doc := "the orders database; rotate monthly"
	db, err := table.CreateCredential(ctx, confidanttest.Credential{Name: "orders-db", Enabled: true, Documentation: &doc,
		Pairs: map[string]string{"db_user": "orders", "db_password": "first"}, Tags: []string{"pci"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, password := range []string{"second", "third"} {
		if err := table.UpdateCredential(ctx, db, func(c *confidanttest.Credential) { c.Pairs["db_password"] = password }); err != nil {
			t.Fatal(err)
		}
	}
	queue, err := table.CreateCredential(ctx, confidanttest.Credential{Name: "orders-queue", Enabled: true, Documentation: &doc,
		Pairs: map[string]string{"queue_token": "q"}})
	if err != nil {
		t.Fatal(err)
	}
	table.PutService("orders", []string{db}, nil, nil)
	table.PutService("orders", []string{db, queue}, nil, nil)
	// A credential Confidant's archive script moved to DYNAMODB_TABLE_ARCHIVE (disabled, unmapped).
	old, err := table.CreateCredential(ctx, confidanttest.Credential{Name: "orders-legacy", Enabled: false, Documentation: &doc,
		Pairs: map[string]string{"api_key": "retired"}})
	if err != nil {
		t.Fatal(err)
	}
	table.ArchiveCredentials("confidant-production-archive", old)
	env := filepath.Join(t.TempDir(), "confidant.env")
	lines := []string{"DYNAMODB_TABLE=confidant-production", "DYNAMODB_TABLE_ARCHIVE=confidant-production-archive", "DYNAMODB_URL=" + dynamo.URL(), "AWS_DEFAULT_REGION=" + kmstest.Region,
		"AWS_ACCESS_KEY_ID=AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY=example", "GANTRY_IMPORT_KMS_URL=" + kmsFake.URL(),
		// What Confidant itself runs with and the import does not use for Confidant's side: its master
		// key (an AWS KMS alias no local keyring holds) and a session secret shorter than gantry serve
		// accepts. Each stopped the runbook once.
		"KMS_MASTER_KEY=alias/confidant", "SESSION_SECRET=" + strings.Repeat("s", 29)}
	if err := os.WriteFile(env, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return env
}

func startStack(t *testing.T, root, bin string) *stack {
	t.Helper()
	st := &stack{dataDir: t.TempDir(), log: &bytes.Buffer{}}
	addrs := stacktest.FreeAddrs(t)
	st.gateway, st.admin, st.adminGRPC, st.secrets, st.chat = addrs.Gateway, addrs.Admin, addrs.AdminGRPC, addrs.Secrets, addrs.Chat
	args := append(append(serverFlags(), "-data-dir="+st.dataDir), addrs.Flags()...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = st.log, st.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + st.admin + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return st
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("gantry exited at startup: %v\n%s", err, st.log)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("gantry not ready after 30s:\n%s", st.log)
		}
	}
}

// serverFlags are make run's flags, which make docs-check passes in GANTRY_DOCS_CHECK_FLAGS (and its
// environment, inherited), so the examples run against the stack a reader starts.
func serverFlags() []string {
	if flags := strings.Fields(os.Getenv("GANTRY_DOCS_CHECK_FLAGS")); len(flags) > 0 {
		return flags
	}
	return []string{"-chat-config=deploy/chat.yaml", "-chat-demo"}
}
