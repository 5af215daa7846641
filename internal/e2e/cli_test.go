package e2e

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gantry-dev/gantry/pkg/ca"
)

// The CLI tests run the gantry binary as a user does, against a stack of the suite. The binary is
// built once, on the first test that needs it, into a folder TestMain removes.

var (
	cliBuild     sync.Once
	cliBinary    string
	cliBuildErr  error
	cliBuildRoot string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cliBuildRoot != "" {
		_ = os.RemoveAll(cliBuildRoot)
	}
	os.Exit(code)
}

// gantryBinary builds cmd/gantry (once per test binary) and returns its path.
func gantryBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("CLI tests build the gantry binary; skipped with -short")
	}
	cliBuild.Do(func() {
		if cliBuildRoot, cliBuildErr = os.MkdirTemp("", "gantry-cli-test-"); cliBuildErr != nil {
			return
		}
		cliBinary = filepath.Join(cliBuildRoot, "gantry")
		out, err := exec.Command("go", "build", "-o", cliBinary, "github.com/gantry-dev/gantry/cmd/gantry").CombinedOutput()
		if err != nil {
			cliBuildErr = errors.New("go build: " + err.Error() + ": " + string(out))
		}
	})
	if cliBuildErr != nil {
		t.Fatal(cliBuildErr)
	}
	return cliBinary
}

// cliResult is what one run of the binary did.
type cliResult struct {
	code           int
	stdout, stderr string
}

// json decodes stdout (the CLI prints JSON when stdout is not a terminal).
func (r cliResult) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("stdout %q is not JSON: %v (stderr %q)", r.stdout, err, r.stderr)
	}
}

// must fails the test unless the run exited with code.
func (r cliResult) must(t *testing.T, code int) cliResult {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d; stdout %q, stderr %q", r.code, code, r.stdout, r.stderr)
	}
	return r
}

// runGantry runs the binary in dir with env added to a GANTRY_-free environment.
func runGantry(t *testing.T, dir string, env []string, stdin string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(gantryBinary(t), args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GANTRY_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("run gantry %v: %v", args, err)
	}
	return cliResult{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// cli runs a client command against the stack as the user alice, with a token minted from the stack's
// keyring as gantry token does.
func (s *testStack) cli(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	env := []string{"GANTRY_ADDR=" + s.rest, "GANTRY_DATA_DIR=" + s.cfg.DataDir, "GANTRY_FROM=alice"}
	return runGantry(t, t.TempDir(), env, stdin, args...)
}

// TestCLICredentials walks a credential through its life with gantry creds: values go in on stdin and
// come out only from get.
func TestCLICredentials(t *testing.T) {
	s := startStack(t, nil)
	var created map[string]any
	s.cli(t, `{"DB_PASSWORD":"hunter2","DB_USER":"orders"}`,
		"creds", "create", "--name", "orders-db", "--doc", "orders database", "--pairs-stdin", "--metadata", "team=orders", "--tags", "db,orders").
		must(t, 0).json(t, &created)
	id, _ := created["id"].(string)
	if id == "" || created["credential_pairs"] != nil || created["name"] != "orders-db" {
		t.Fatalf("create printed %v; want the credential with no values", created)
	}

	var got struct {
		Revision        int               `json:"revision"`
		CredentialPairs map[string]string `json:"credential_pairs"`
		Metadata        map[string]string `json:"metadata"`
		Tags            []string          `json:"tags"`
		ModifiedBy      string            `json:"modified_by"`
	}
	s.cli(t, "", "creds", "get", id).must(t, 0).json(t, &got)
	if got.CredentialPairs["db_password"] != "hunter2" || got.Metadata["team"] != "orders" || len(got.Tags) != 2 || got.ModifiedBy != "alice" {
		t.Fatalf("get = %+v", got)
	}

	// Flags after the id work too, and the table output is aligned text with the values.
	table := s.cli(t, "", "creds", "get", id, "--output", "table").must(t, 0)
	if !strings.Contains(table.stdout, "db_password") || !strings.Contains(table.stdout, "hunter2") {
		t.Fatalf("table output %q", table.stdout)
	}

	pairsFile := filepath.Join(t.TempDir(), "pairs.json")
	if err := os.WriteFile(pairsFile, []byte(`{"DB_PASSWORD":"rotated","DB_USER":"orders"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	update := s.cli(t, "", "creds", "update", id, "--pairs-file", pairsFile).must(t, 0)
	if strings.Contains(update.stdout+update.stderr, "rotated") {
		t.Fatalf("update printed a value: %q %q", update.stdout, update.stderr)
	}

	var history []map[string]any
	s.cli(t, "", "creds", "history", id).must(t, 0).json(t, &history)
	if len(history) != 2 || history[1]["id"] != id+"-2" {
		t.Fatalf("history = %v", history)
	}

	var diff map[string]struct{ Added, Removed any }
	s.cli(t, "", "creds", "diff", id, "1", "2").must(t, 0).json(t, &diff)
	if pairs, ok := diff["credential_pairs"]; !ok || !strings.Contains(strings.ToLower(toJSON(t, pairs)), "db_password") {
		t.Fatalf("diff = %v", diff)
	}

	var reverted map[string]any
	s.cli(t, "", "creds", "revert", id, "1").must(t, 0).json(t, &reverted)
	if reverted["revision"] != float64(3) {
		t.Fatalf("revert = %v", reverted)
	}
	s.cli(t, "", "creds", "get", id).must(t, 0).json(t, &got)
	if got.CredentialPairs["db_password"] != "hunter2" {
		t.Fatalf("after revert to 1: %v", got.CredentialPairs)
	}

	// Archive: refused while enabled (the server's message, exit 1), a dry run once disabled.
	refused := s.cli(t, "", "creds", "archive", id, "--dry-run").must(t, 1)
	if !strings.Contains(refused.stderr, "HTTP 400") || !strings.Contains(refused.stderr, "Credential still enabled") {
		t.Fatalf("archive of an enabled credential: stderr %q", refused.stderr)
	}
	s.cli(t, "", "creds", "update", id, "--enabled=false").must(t, 0)
	var archived map[string]string
	s.cli(t, "", "creds", "archive", id, "--dry-run").must(t, 0).json(t, &archived)
	if archived["result"] != "dry-run success" {
		t.Fatalf("dry run = %v", archived)
	}

	var list []map[string]any
	s.cli(t, "", "creds", "list").must(t, 0).json(t, &list)
	if len(list) != 1 || list[0]["id"] != id || list[0]["credential_pairs"] != nil {
		t.Fatalf("list = %v", list)
	}
}

// TestCLIExitCodes: usage errors are 2 and send nothing, unknown ids 3, an unreachable server 1.
func TestCLIExitCodes(t *testing.T) {
	s := startStack(t, nil)
	s.cli(t, "", "creds", "get").must(t, 2)
	s.cli(t, "", "creds", "create", "--name", "x").must(t, 2)
	s.cli(t, "", "creds", "diff", "id", "one", "2").must(t, 2)
	s.cli(t, "", "creds", "list", "--output", "yaml").must(t, 2)
	s.cli(t, "", "creds", "frobnicate").must(t, 2)
	bad := s.cli(t, "not json", "creds", "create", "--name", "x", "--doc", "d", "--pairs-stdin").must(t, 2)
	if strings.Contains(bad.stderr, "not json") {
		t.Errorf("the error quotes the input: %q", bad.stderr)
	}
	notFound := s.cli(t, "", "creds", "get", "0123456789abcdef0123456789abcdef").must(t, 3)
	if !strings.Contains(notFound.stderr, "HTTP 404") {
		t.Errorf("stderr %q", notFound.stderr)
	}
	s.cli(t, "", "services", "get", "nope").must(t, 3)
	s.cli(t, "", "creds", "list", "--addr", "http://127.0.0.1:1").must(t, 1)
	// A user name the server does not know as a service: refused (403), exit 3.
	s.cli(t, "", "creds", "list", "--token", "2/user/alice:bm90LWEtdG9rZW4=").must(t, 3)
}

// TestCLIServicesMapConflict maps credentials with gantry services, and shows the server's conflict
// message with the key and both credentials when two would expose the same key.
func TestCLIServicesMapConflict(t *testing.T) {
	s := startStack(t, nil)
	first := s.cliCreateCredential(t, "first", `{"DB_PASSWORD":"a"}`)
	second := s.cliCreateCredential(t, "second", `{"db_password":"b","other":"c"}`)

	var svc struct {
		Revision    int `json:"revision"`
		Credentials []struct {
			ID              string            `json:"id"`
			CredentialPairs map[string]string `json:"credential_pairs"`
		} `json:"credentials"`
	}
	s.cli(t, "", "services", "map", "orders", first).must(t, 0).json(t, &svc)
	if svc.Revision != 1 || len(svc.Credentials) != 1 || svc.Credentials[0].ID != first || svc.Credentials[0].CredentialPairs != nil {
		t.Fatalf("map = %+v", svc)
	}
	conflict := s.cli(t, "", "services", "map", "orders", second).must(t, 1)
	for _, want := range []string{"HTTP 400", "Conflicting key pairs", "db_password", first, second} {
		if !strings.Contains(conflict.stderr, want) {
			t.Errorf("conflict stderr %q lacks %q", conflict.stderr, want)
		}
	}
	s.cli(t, "", "services", "unmap", "orders", first).must(t, 0)
	s.cli(t, "", "services", "map", "orders", second).must(t, 0).json(t, &svc)
	if svc.Revision != 3 || len(svc.Credentials) != 1 || svc.Credentials[0].ID != second {
		t.Fatalf("after unmap and map = %+v", svc)
	}
	var history []map[string]any
	s.cli(t, "", "services", "history", "orders").must(t, 0).json(t, &history)
	if len(history) != 3 {
		t.Fatalf("history = %v", history)
	}
	s.cli(t, "", "services", "revert", "orders", "1").must(t, 0).json(t, &svc)
	if svc.Revision != 4 || len(svc.Credentials) != 1 || svc.Credentials[0].ID != first {
		t.Fatalf("revert = %+v", svc)
	}
	var list []map[string]any
	s.cli(t, "", "services", "list").must(t, 0).json(t, &list)
	if len(list) != 1 || list[0]["id"] != "orders" {
		t.Fatalf("list = %v", list)
	}
}

// TestCLIEnv runs a real child through gantry env, as the service itself, and checks that the
// service's pairs arrive as CREDENTIALS_<KEY> variables.
func TestCLIEnv(t *testing.T) {
	s := startStack(t, nil)
	id := s.cliCreateCredential(t, "orders-db", `{"DB_PASSWORD":"hunter2","db_user":"orders"}`)
	s.cli(t, "", "services", "map", "orders", id).must(t, 0)

	// A stale variable of the same name in gantry's environment is replaced, not shadowing the new value.
	env := []string{"GANTRY_ADDR=" + s.rest, "GANTRY_DATA_DIR=" + s.cfg.DataDir, "CREDENTIALS_DB_PASSWORD=stale"}
	run := runGantry(t, t.TempDir(), env, "", "env", "--service", "orders", "--from", "orders", "--user-type", "service", "--", "/usr/bin/env").must(t, 0)
	if strings.Contains(run.stdout, "stale") {
		t.Error("the child saw the stale CREDENTIALS_DB_PASSWORD")
	}
	for _, want := range []string{"CREDENTIALS_DB_PASSWORD=hunter2\n", "CREDENTIALS_DB_USER=orders\n", "GANTRY_ADDR=" + s.rest + "\n"} {
		if !strings.Contains(run.stdout, want) {
			t.Errorf("child environment lacks %q", want)
		}
	}
	if run.stderr != "" {
		t.Errorf("gantry env printed %q", run.stderr)
	}
	// The child's exit code is gantry env's, since gantry is replaced by the child.
	s.cli(t, "", "env", "--service", "orders", "--", "sh", "-c", "exit 7").must(t, 7)
	// Another service may not read orders' credentials: exit 3, nothing run.
	denied := s.cli(t, "", "env", "--service", "orders", "--from", "billing", "--user-type", "service", "--", "/usr/bin/env").must(t, 3)
	if strings.Contains(denied.stdout, "CREDENTIALS_") {
		t.Errorf("the child ran: %q", denied.stdout)
	}
	s.cli(t, "", "env", "--service", "orders").must(t, 2)
}

// TestCLICertsIssue issues a certificate as the service api and checks the files and their modes.
func TestCLICertsIssue(t *testing.T) {
	s := certStack(t, nil)
	s.asServiceHeader("api") // created by a user, so the service holds grants
	out := filepath.Join(t.TempDir(), "tls")
	var written map[string]string
	s.cli(t, "", "certs", "issue", "--ca", "development", "--cn", "api.example.com", "--san", "api.internal", "--validity", "7",
		"--out-dir", out, "--from", "api", "--user-type", "service").must(t, 0).json(t, &written)
	info, err := os.Stat(filepath.Join(out, "key.pem"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("key.pem: %v, mode %v", err, info)
	}
	if written["key"] != filepath.Join(out, "key.pem") || written["not_after"] == "" {
		t.Errorf("printed %v", written)
	}
	leafPEM, _ := os.ReadFile(filepath.Join(out, "cert.pem"))
	chainPEM, _ := os.ReadFile(filepath.Join(out, "chain.pem"))
	leaves, _ := ca.ParseCertificates(leafPEM)
	chain, _ := ca.ParseCertificates(chainPEM)
	if len(leaves) != 1 || len(chain) == 0 {
		t.Fatalf("cert.pem/chain.pem: %d/%d certificates", len(leaves), len(chain))
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(chain[len(chain)-1])
	for _, c := range chain[:len(chain)-1] {
		inter.AddCert(c)
	}
	if _, err := leaves[0].Verify(x509.VerifyOptions{DNSName: "api.internal", Roots: roots, Intermediates: inter}); err != nil {
		t.Fatalf("the issued certificate does not verify against its chain: %v", err)
	}
	// A user may not get certificates under the default rules: 403, exit 3, nothing written.
	userOut := filepath.Join(t.TempDir(), "user")
	s.cli(t, "", "certs", "issue", "--cn", "api.example.com", "--out-dir", userOut).must(t, 3)
	if _, err := os.Stat(userOut); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused issue created %s", userOut)
	}
}

// TestCLIUnknownCommand: a stray word is a usage error that starts nothing and creates nothing.
func TestCLIUnknownCommand(t *testing.T) {
	for _, tt := range []struct{ word, suggestion string }{
		{"tokne", `did you mean "token"?`},
		{"nonsense", "gantry help"},
		{"serv", `did you mean "serve"?`},
	} {
		t.Run(tt.word, func(t *testing.T) {
			dir := t.TempDir()
			r := runGantry(t, dir, nil, "", tt.word).must(t, 2)
			if !strings.Contains(r.stderr, tt.suggestion) {
				t.Errorf("stderr %q lacks %q", r.stderr, tt.suggestion)
			}
			assertEmptyDir(t, dir)
		})
	}
	dir := t.TempDir()
	help := runGantry(t, dir, nil, "", "help").must(t, 0)
	for _, c := range []string{"serve", "creds", "services", "env", "certs", "token", "keyring", "check", "backup", "version", "gantry serve -h"} {
		if !strings.Contains(help.stdout, c) {
			t.Errorf("gantry help lacks %q", c)
		}
	}
	// gantry -h is the commands alone, on one screen; the server's settings are gantry serve -h's.
	if h := runGantry(t, dir, nil, "", "-h").must(t, 0).stdout; h != help.stdout {
		t.Errorf("gantry -h is not gantry help's list (%d lines)", strings.Count(h, "\n"))
	}
	if h := runGantry(t, dir, nil, "", "serve", "-h").must(t, 0).stdout; !strings.Contains(h, "-data-dir") {
		t.Error("gantry serve -h does not list the server's settings")
	}
	assertEmptyDir(t, dir)
}

// TestCLITokenWithoutKeyring: gantry token in a folder with no keyring says where it looked and
// which flag to use, and creates nothing.
func TestCLITokenWithoutKeyring(t *testing.T) {
	dir := t.TempDir()
	r := runGantry(t, dir, nil, "", "token", "--from", "alice", "--user-type", "user").must(t, 1)
	for _, want := range []string{"-data-dir", filepath.Join(dir, "gantry-data", "keyring.json")} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr %q lacks %q", r.stderr, want)
		}
	}
	if r.stdout != "" {
		t.Errorf("printed a token: %q", r.stdout)
	}
	assertEmptyDir(t, dir)
	// The client commands mint the same way: the same error, exit 1.
	r = runGantry(t, dir, []string{"GANTRY_ADDR=http://127.0.0.1:1"}, "", "creds", "list").must(t, 1)
	if !strings.Contains(r.stderr, "-data-dir") {
		t.Errorf("stderr %q", r.stderr)
	}
	assertEmptyDir(t, dir)
}

func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("%s was created in %s", e.Name(), dir)
	}
}

// cliCreateCredential creates a credential through the CLI from a JSON object of pairs and returns its id.
func (s *testStack) cliCreateCredential(t *testing.T, name, pairs string) string {
	t.Helper()
	var cred map[string]any
	s.cli(t, pairs, "creds", "create", "--name", name, "--doc", "test", "--pairs-stdin").must(t, 0).json(t, &cred)
	id, _ := cred["id"].(string)
	if id == "" {
		t.Fatalf("create %s: %v", name, cred)
	}
	return id
}

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
