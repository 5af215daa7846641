package stack

import (
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
