package main

import (
	"bytes"
	"flag"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/settings"
)

// helpFlag is a flag in a help's flag list ("  -name kind").
var (
	helpFlag    = regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)\b`)
	doubleDash  = regexp.MustCompile(`(?:^|[^\w-])--([a-z][a-z0-9-]*)`)
	helpSection = []string{"\nUsage:\n", "\nExamples:\n", "\nFlags:\n"}
)

// TestEveryCommandHelp: every command and subcommand answers -h, -help, --help and gantry help
// COMMAND on stdout with exit 0, in one style: a description line naming the command, then Usage,
// Examples and Flags; and no help spells one of its flags --flag (Go's flag package prints -flag).
func TestEveryCommandHelp(t *testing.T) {
	var cases [][]string
	for _, c := range commands() {
		cases = append(cases, []string{c.name, "-h"}, []string{c.name, "--help"}, []string{"help", c.name})
	}
	cases = append(cases, []string{"serve", "-help"}, []string{"keyring", "rotate", "-h"}, []string{"keyring", "rewrap", "-h"},
		[]string{"queue", "list", "-h"}, []string{"tls", "init", "-h"}, []string{"import", "confidant", "-h"},
		[]string{"creds", "get", "-h"}, []string{"certs", "issue", "--help"}, []string{"services", "-h"},
		[]string{"changes", "list", "-h"}, []string{"changes", "reject", "--help"}, []string{"creds", "due", "-h"}, []string{"services", "revert", "-h"})
	for _, args := range cases {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Chdir(t.TempDir())
			var stdout, stderr bytes.Buffer
			if code := dispatch(args, &stdout, &stderr); code != 0 || stderr.Len() != 0 {
				t.Fatalf("exit %d, stderr %q", code, stderr.String())
			}
			help := stdout.String()
			command := args[0]
			if command == "help" && !strings.HasPrefix(args[1], "-") {
				command = args[1]
			}
			if !strings.HasPrefix(help, "gantry "+command) || !strings.Contains(strings.SplitN(help, "\n", 2)[0], ": ") {
				t.Errorf("the first line is not \"gantry %s...: description\": %q", command, strings.SplitN(help, "\n", 2)[0])
			}
			for _, section := range helpSection {
				if !strings.Contains(help, section) {
					t.Errorf("no %q section:\n%s", strings.TrimSpace(section), help)
				}
			}
			flags := map[string]bool{}
			for _, m := range helpFlag.FindAllStringSubmatch(help, -1) {
				flags[m[1]] = true
			}
			for _, m := range doubleDash.FindAllStringSubmatch(help, -1) {
				if flags[m[1]] {
					t.Errorf("the help spells its flag -%s as --%s", m[1], m[1])
				}
			}
		})
	}
}

// TestMistypedFlagIsOneLine: a bad flag is one line naming it, with the nearest flag when one is
// close, and a line saying where every flag is; exit 2, nothing on stdout, never the whole list.
func TestMistypedFlagIsOneLine(t *testing.T) {
	tests := []struct {
		args     []string
		suggest  string // "": no suggestion
		pointsTo string
	}{
		{[]string{"serve", "-tls-cert", "x"}, "did you mean -tls-cert-file?", "gantry serve -h"},
		{[]string{"-gatway-listen", "x"}, "did you mean -gateway-listen?", "docs/configuration.md"},
		{[]string{"serve", "-zzzzzzzzzz"}, "", "gantry help serve"},
		{[]string{"check", "-etcd-endpoint", "x"}, "did you mean -etcd-endpoints?", "gantry check -h"},
		{[]string{"backup", "-etcd-request-timout", "1s"}, "did you mean -etcd-request-timeout?", "gantry backup -h"},
		{[]string{"queue", "list", "-limt", "3"}, "did you mean -limit?", "gantry queue list -h"},
		{[]string{"keyring", "rotate", "-stag"}, "did you mean -stage?", "gantry keyring rotate -h"},
		{[]string{"creds", "list", "--outptu", "json"}, "did you mean -output?", "gantry creds list -h"},
		{[]string{"token", "-form", "alice"}, "did you mean -from?", "gantry token -h"},
		{[]string{"login", "-usr", "a@b"}, "did you mean -user?", "gantry login -h"},
		{[]string{"tls", "init", "-ca-dri", "x"}, "did you mean -ca-dir?", "gantry tls init -h"},
		{[]string{"import", "confidant", "-dryrun"}, "did you mean -dry-run?", "gantry import confidant -h"},
		{[]string{"creds", "update", "x", "-break-glas"}, "did you mean -break-glass?", "gantry creds update -h"},
		{[]string{"changes", "list", "-stauts", "all"}, "did you mean -status?", "gantry changes list -h"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Chdir(t.TempDir())
			var stdout, stderr bytes.Buffer
			if code := dispatch(tt.args, &stdout, &stderr); code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if len(lines) != 2 || stdout.Len() != 0 {
				t.Fatalf("want two lines on stderr and nothing on stdout, got stdout %q, stderr:\n%s", stdout.String(), stderr.String())
			}
			if !strings.Contains(lines[0], "unknown flag -") || (tt.suggest != "" && !strings.HasSuffix(lines[0], tt.suggest)) ||
				(tt.suggest == "" && strings.Contains(lines[0], "did you mean")) {
				t.Errorf("first line %q, want the flag and %q", lines[0], tt.suggest)
			}
			if !strings.Contains(lines[1], tt.pointsTo) {
				t.Errorf("second line %q does not point to %q", lines[1], tt.pointsTo)
			}
		})
	}
}

// TestOperatorCommandsTakeServeSettings: the data-folder tools take serve's settings under serve's
// flag names and variables (every etcd one for check and backup, the queue's for gantry queue), and
// really read them: a bad GANTRY_ETCD_REQUEST_TIMEOUT, which serve refuses, is refused by check.
func TestOperatorCommandsTakeServeSettings(t *testing.T) {
	cfg := stack.DefaultConfig()
	table := cfg.Settings()
	tests := []struct {
		args     []string
		settings []string
	}{
		{[]string{"check", "-h"}, []string{"etcd-*", "data-dir", "kms", "store", "grpc-tls-dir"}},
		{[]string{"backup", "-h"}, []string{"etcd-*", "data-dir", "kms", "store", "grpc-tls-ca-file", "grpc-tls-cert-file", "grpc-tls-key-file"}},
		{[]string{"queue", "list", "-h"}, []string{"data-dir", "chat-inbound-queue", "chat-inbound-queue-path", "chat-inbound-sqs-*"}},
		{[]string{"keyring", "retire", "-h"}, []string{"data-dir", "kms-master-key", "grpc-tls-dir"}},
		{[]string{"token", "-h"}, []string{"data-dir"}},
	}
	for _, tt := range tests {
		var stdout bytes.Buffer
		if code := dispatch(tt.args, &stdout, &bytes.Buffer{}); code != 0 {
			t.Fatalf("%v: exit %d", tt.args, code)
		}
		for _, s := range table.Select(tt.settings...).Settings() {
			entry := "\n  -" + s.Name + " " + s.Value.Kind() + "\n"
			env := "\n    \tenv " + strings.Join(s.EnvNames(), ", ") + "\n"
			if !strings.Contains(stdout.String(), entry) || !strings.Contains(stdout.String(), env) {
				t.Errorf("gantry %s lacks serve's -%s (%s)", strings.Join(tt.args, " "), s.Name, strings.Join(s.EnvNames(), ", "))
			}
		}
	}
	t.Setenv("GANTRY_ETCD_REQUEST_TIMEOUT", "soon")
	var stderr bytes.Buffer
	if code := dispatch([]string{"check", "-data-dir", t.TempDir()}, &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), "GANTRY_ETCD_REQUEST_TIMEOUT (env)") {
		t.Errorf("check with a bad GANTRY_ETCD_REQUEST_TIMEOUT: exit %d, stderr %q", code, stderr.String())
	}
}

// TestEveryVariableACommandReadsIsInATable: every variable the commands look up (through the one
// lookup of environment.go) is a setting of serve's table or of the client commands' table, so each
// is in gantry serve -h and docs/configuration.md, or in the commands' -h and docs/cli.md. The
// commands run until they fail on an empty data folder, after reading their settings.
func TestEveryVariableACommandReadsIsInATable(t *testing.T) {
	var read []string
	previous := environment
	environment = func(name string) (string, bool) { read = append(read, name); return "", false }
	t.Cleanup(func() { environment = previous })
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	runs := [][]string{
		{"token", "-from", "alice", "-data-dir", missing},
		{"login", "-user", "a@example.com", "-data-dir", missing},
		{"check", "-data-dir", missing},
		{"backup", "-data-dir", missing, "-out", filepath.Join(dir, "out")},
		{"restore", "-from", missing, "-data-dir", filepath.Join(dir, "new")},
		{"queue", "list", "-data-dir", missing},
		{"keyring", "retire", "-data-dir", missing, "-key", "k", "-version", "1"},
		{"creds", "list", "-data-dir", missing},
		{"whoami", "-data-dir", missing},
		{"env", "-service", "s", "-data-dir", missing, "--", "true"},
	}
	for _, args := range runs {
		before := len(read)
		if code := dispatch(args, &bytes.Buffer{}, &bytes.Buffer{}); code != 1 {
			t.Errorf("%v: exit %d, want 1 (no data folder)", args, code)
		}
		if len(read) == before {
			t.Errorf("%v read no variable", args)
		}
	}
	cfg := stack.DefaultConfig()
	server := cfg.Settings()
	client := addClientFlags(flag.NewFlagSet("client", flag.ContinueOnError), &bytes.Buffer{})
	for _, name := range slices.Compact(slices.Sorted(slices.Values(read))) {
		if !server.Reads(name) && !slices.ContainsFunc(client.settings, func(t *settings.Table) bool { return t.Reads(name) }) {
			t.Errorf("a command reads %s, which neither serve's table nor the client commands' holds", name)
		}
	}
}
