package main

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/internal/stack"
)

// TestServeHelpListsEverySetting: gantry serve -h and gantry help serve print every setting of the
// table with all the variables it is read from, and exit 0 (gantry -h lists the commands alone).
func TestServeHelpListsEverySetting(t *testing.T) {
	for _, args := range [][]string{{"serve", "-h"}, {"help", "serve"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) { helpListsEverySetting(t, args) })
	}
}

func helpListsEverySetting(t *testing.T, args []string) {
	var stdout, stderr bytes.Buffer
	if code := dispatch(args, &stdout, &stderr); code != 0 {
		t.Fatalf("gantry %v exited %d: %s", args, code, stderr.String())
	}
	help := stdout.String() + stderr.String()
	cfg := stack.DefaultConfig()
	table := cfg.Settings()
	for _, s := range table.Settings() {
		if !strings.Contains(help, "\n  -"+s.Name+" ") || !strings.Contains(help, "env "+strings.Join(s.EnvNames(), ", ")) {
			t.Errorf("gantry %v does not list -%s with %v", args, s.Name, s.EnvNames())
		}
	}
	for _, f := range table.Families() {
		if !strings.Contains(help, f.Pattern) {
			t.Errorf("gantry %v does not list %s", args, f.Pattern)
		}
	}
}

// TestServeBadSettingNamesIt: a bad value stops serve before anything starts, naming the setting as
// it was given.
func TestServeBadSettingNamesIt(t *testing.T) {
	t.Setenv("AUTH_TOKEN_MAX_LIFETIME", "x")
	var stdout, stderr bytes.Buffer
	if code := dispatch([]string{"serve", "-data-dir", t.TempDir()}, &stdout, &stderr); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if want := `gantry: bad configuration: AUTH_TOKEN_MAX_LIFETIME (env): "x" is not a whole number of minutes`; strings.TrimSpace(stderr.String()) != want {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
}

// gantry serve collects garbage at GOGC=200 unless GOGC is set.
func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	if got := tuneGC(func(string) string { return "" }); got != defaultGCPercent {
		t.Errorf("without GOGC: %d, want %d", got, defaultGCPercent)
	}
	if got := debug.SetGCPercent(100); got != defaultGCPercent {
		t.Errorf("the runtime's percent without GOGC: %d", got)
	}
	if got := tuneGC(func(k string) string { return map[string]string{"GOGC": "100"}[k] }); got != 100 {
		t.Errorf("with GOGC set: %d, want the runtime's own 100", got)
	}
}
