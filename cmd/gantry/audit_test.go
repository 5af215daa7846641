package main

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stacktest"
	"github.com/gantry-dev/gantry/pkg/audit/audittest"
)

// auditRecords reads the audit records of a file, failing the test unless every line is one JSON
// object tagged "log":"audit".
func auditRecords(t *testing.T, path string) []map[string]any { return readAudit(t, path, false) }

// stdoutAuditRecords reads the audit records of gantry's standard output, which it shares with the
// access log: as a log shipper would, lines that begin with "{" must be whole audit records, and
// every other line an access log line (Envoy's format begins with "[").
func stdoutAuditRecords(t *testing.T, path string) []map[string]any { return readAudit(t, path, true) }

// accessLogLine is the start of the gateway's access log line: [START_TIME] "METHOD PATH PROTOCOL" CODE.
var accessLogLine = regexp.MustCompile(`^\[[0-9TZ:.-]+\] "[A-Z]+ /\S* HTTP/[0-9.]+" [0-9]{3} `)

func readAudit(t *testing.T, path string, withAccessLog bool) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if withAccessLog {
		return audittest.Records(t, string(data), accessLogLine.MatchString)
	}
	return audittest.Records(t, string(data))
}

// TestAuditTrailAtLogLevelWarn runs gantry as an operator would, with -log-level=warn: creating a
// credential still leaves its audit records, on standard output (beside the access log; the log goes
// to standard error, without them) and in -audit-file. After the file is moved away (logrotate),
// SIGHUP reopens it under its name, and the next records go to the new file.
func TestAuditTrailAtLogLevelWarn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a gantry process")
	}
	dir := t.TempDir()
	data, auditFile := filepath.Join(dir, "data"), filepath.Join(dir, "audit.log")
	addrs := stacktest.FreeAddrs(t)
	gatewayAddr := addrs.Gateway
	args := append(addrs.Flags(), "-data-dir="+data, "-shutdown-timeout=2s",
		"-log-level=warn", "-log-format=json", "-audit-file="+auditFile)
	// Files, not pipes: the child writes them itself, so a record is there as soon as the answer is.
	stdoutPath, stderrPath := filepath.Join(dir, "stdout"), filepath.Join(dir, "stderr")
	stdout, err := os.Create(stdoutPath)
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	stderr, err := os.Create(stderrPath)
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	child := startChild(t, args, stdout, stderr)
	logs := func() string { b, _ := os.ReadFile(stderrPath); return string(b) }
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		child.waitFor(t, what, ok, logs)
	}
	waitFor("the gateway", func() bool {
		resp, err := http.Get("http://" + gatewayAddr + "/healthcheck")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	token := stacktest.Token(t, data, "alice", "user", 10*time.Minute)
	create := func(name, requestID string) string {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+gatewayAddr+"/v1/credentials",
			strings.NewReader(`{"name":"`+name+`","credential_pairs":{"k":"s3cret-`+name+`"},"documentation":"d"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", requestID)
		req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("2/user/alice:"+token)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 200 {
			t.Fatalf("create %s: %d %v %v", name, resp.StatusCode, body, err)
		}
		return body["id"].(string)
	}
	check := func(where string, recs []map[string]any, id, requestID string) {
		t.Helper()
		if len(recs) != 2 || recs[0]["outcome"] != "pending" || recs[1]["outcome"] != "allowed" {
			t.Fatalf("%s: records %v, want pending then allowed", where, recs)
		}
		for k, want := range map[string]any{"principal": "alice", "principal_type": "user", "auth_type": "kms", "action": "create",
			"resource": "credential", "resource_id": id, "request_id": requestID, "client_addr": "127.0.0.1", "service": "secrets"} {
			if recs[1][k] != want {
				t.Errorf("%s: %s = %v, want %v (%v)", where, k, recs[1][k], want, recs[1])
			}
		}
	}

	first := create("first", "req-first")
	check("stdout", stdoutAuditRecords(t, stdoutPath), first, "req-first")
	check("audit file", auditRecords(t, auditFile), first, "req-first")
	for _, line := range strings.Split(strings.TrimSpace(logs()), "\n") {
		if strings.Contains(line, `"log":"audit"`) || strings.Contains(line, "s3cret-") || strings.Contains(line, `"level":"info"`) {
			t.Errorf("standard error (the log at warn) has %q", line)
		}
	}

	// logrotate without copytruncate: move the file, then SIGHUP.
	if err := os.Rename(auditFile, auditFile+".1"); err != nil {
		t.Fatal(err)
	}
	if err := child.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor("the reopened audit file", func() bool { _, err := os.Stat(auditFile); return err == nil })
	second := create("second", "req-second")
	check("the rotated file", auditRecords(t, auditFile+".1"), first, "req-first")
	check("the reopened file", auditRecords(t, auditFile), second, "req-second")
	if info, err := os.Stat(auditFile); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("reopened audit file: %v, mode %v, want 0600", err, info.Mode().Perm())
	}

	child.stop(t, logs)
}
