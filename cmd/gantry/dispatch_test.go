package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDispatchUnknownWordStartsNothing: a word that names no command exits 2 with a suggestion, and
// leaves the working folder empty (no gantry-data).
func TestDispatchUnknownWordStartsNothing(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"tokne"}, `did you mean "token"?`},
		{[]string{"servics", "list"}, `did you mean "services"?`},
		{[]string{"nonsense"}, "gantry help"},
		{[]string{"help", "tokne"}, `did you mean "token"?`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			var stdout, stderr bytes.Buffer
			if code := dispatch(tt.args, &stdout, &stderr); code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tt.want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("created %v", entries)
			}
		})
	}
}

// TestHelpListsEveryCommand: gantry help, -h and --help print the same list, one line per command,
// and nothing else (every setting of the server is gantry serve -h's: TestServeHelpListsEverySetting).
func TestHelpListsEveryCommand(t *testing.T) {
	var help bytes.Buffer
	if code := dispatch([]string{"help"}, &help, &bytes.Buffer{}); code != 0 {
		t.Fatalf("gantry help exit code %d", code)
	}
	for _, c := range commands() {
		if !strings.Contains(help.String(), "\n  "+c.name+" ") {
			t.Errorf("gantry help lacks %q", c.name)
		}
	}
	for _, flag := range []string{"-h", "--help"} {
		var out bytes.Buffer
		if code := dispatch([]string{flag}, &out, &bytes.Buffer{}); code != 0 || out.String() != help.String() {
			t.Errorf("gantry %s: exit %d, output is not gantry help's (%d lines)", flag, code, strings.Count(out.String(), "\n"))
		}
	}
}

// TestTokenNeverCreatesAKeyring: gantry token with no keyring names -data-dir and the folder, exits 1
// and leaves the folder as it was.
func TestTokenNeverCreatesAKeyring(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	var stdout, stderr bytes.Buffer
	if code := runToken([]string{"--from", "alice", "--user-type", "user", "--data-dir", dir}, &stdout, &stderr); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	if !strings.Contains(stderr.String(), "-data-dir") || !strings.Contains(stderr.String(), dir) || stdout.Len() != 0 {
		t.Errorf("stdout %q, stderr %q", stdout.String(), stderr.String())
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("gantry token created %s", dir)
	}
}

func TestSuggestion(t *testing.T) {
	for word, want := range map[string]string{
		"tokne": "token", "crds": "creds", "cred": "creds", "servcie": "serve", "certz": "certs", "verison": "version",
		"xyz": "", "nonsense": "", "": "",
	} {
		got := suggestion(word)
		if (want == "" && got != "") || (want != "" && !strings.Contains(got, `"`+want+`"`)) {
			t.Errorf("suggestion(%q) = %q, want %q", word, got, want)
		}
	}
}
