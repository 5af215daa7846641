package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets the test binary serve as the bare server: the orchestration starts its own
// executable with "bare", which in a test is this binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "bare" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestShortForm runs make bench's orchestration in its quick form (about 1 s per workload) against a
// gantry built for the test: every workload runs against a separate gantry process, the read limits
// against bare server processes, and the table has every row with its settings and no unexpected
// error. This is the smoke form CI could run (about 30 s); the figures are not checked.
func TestShortForm(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gantry and runs the benchmark orchestration; skipped with -short")
	}
	bin := filepath.Join(t.TempDir(), "gantry")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/gantry-dev/gantry/cmd/gantry").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
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

// TestPeerSkipsWithoutOpenBao: make bench-peer without an OpenBao binary says how to get one and
// succeeds, so it can sit in any checklist.
func TestPeerSkipsWithoutOpenBao(t *testing.T) {
	for _, bao := range []string{"", filepath.Join(t.TempDir(), "no-such-bao")} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"peer", "-bao", bao}, &stdout, &stderr); code != 0 {
			t.Fatalf("BAO=%q: exit %d, want 0 (skipped); stderr %s", bao, code, &stderr)
		}
		if !strings.Contains(stdout.String(), "skipped") || !strings.Contains(stdout.String(), "docs/operations.md") {
			t.Errorf("BAO=%q: %q does not say it skipped and where the build is documented", bao, stdout.String())
		}
	}
}
