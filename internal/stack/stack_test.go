package stack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

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

// TestKeyringForDevelopmentSaidAtStart: a secrets service with the local keyring outside the default
// development data folder says at start that `gantry token` is for development only and names the
// workload methods; the default development folder, AWS KMS and authentication off do not.
func TestKeyringForDevelopmentSaidAtStart(t *testing.T) {
	for _, c := range []struct {
		name   string
		mutate func(*Config)
		said   bool
	}{
		{"operator data folder", func(c *Config) { c.DataDir = "/var/lib/gantry" }, true},
		{"default development folder", func(*Config) {}, false},
		{"aws kms", func(c *Config) { c.DataDir, c.Secrets.KMS = "/var/lib/gantry", "aws" }, false},
		{"auth off", func(c *Config) { c.DataDir, c.Secrets.Auth.UseAuth = "/var/lib/gantry", false }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			c.mutate(&cfg)
			core, logs := observer.New(zapcore.InfoLevel)
			logNextSteps(zap.New(core), cfg, &Stack{SecretsAddr: "127.0.0.1:9090"})
			said := logs.FilterMessage(keyringForDevelopment).Len() == 1
			if said != c.said {
				t.Fatalf("said %v, want %v", said, c.said)
			}
			if said && !strings.Contains(keyringForDevelopment, "development only") {
				t.Fatal("the warning does not say development only")
			}
		})
	}
}
