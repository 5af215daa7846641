package stack

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gantry-dev/gantry/pkg/settings"
)

// TestInMemoryUpstreamsSetting: the gateway reaches the services of its own process in memory unless
// -grpc-in-memory=false asks for loopback TCP (the environment variable follows the flag's name).
func TestInMemoryUpstreamsSetting(t *testing.T) {
	cfg := DefaultConfig()
	if !cfg.InMemoryUpstreams {
		t.Fatal("in-memory upstreams are off by default")
	}
	if err := cfg.Settings().Parse([]string{"-grpc-in-memory=false"}, settings.MapLookup(nil)); err != nil {
		t.Fatal(err)
	}
	if cfg.InMemoryUpstreams {
		t.Fatal("-grpc-in-memory=false left them on")
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
}

// TestSelfCommand: the startup lines name the binary as it can be run again from the current folder.
func TestSelfCommand(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	defer func(args []string) { os.Args = args }(os.Args)
	for exe, want := range map[string]string{
		"gantry":                             "gantry",
		filepath.Join(wd, "bin", "gantry"):   filepath.Join("bin", "gantry"),
		filepath.Join(wd, "gantry"):          "./gantry",
		"/tmp/go-build123/b001/exe/gantry":   "gantry",
		filepath.Join(wd, "..", "elsewhere"): "gantry",
	} {
		os.Args = []string{exe}
		if got := selfCommand(); got != want {
			t.Errorf("selfCommand() with os.Args[0] %q = %q, want %q", exe, got, want)
		}
	}
}
