package stack

import (
	"flag"
	"io"
	"testing"
)

// TestInMemoryUpstreamsSetting: the gateway reaches the services of its own process in memory unless
// -grpc-in-memory=false asks for loopback TCP (the environment variable follows the flag's name).
func TestInMemoryUpstreamsSetting(t *testing.T) {
	cfg := DefaultConfig()
	if !cfg.InMemoryUpstreams {
		t.Fatal("in-memory upstreams are off by default")
	}
	fs := flag.NewFlagSet("gantry", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.AddFlags(fs)
	if err := fs.Parse([]string{"-grpc-in-memory=false"}); err != nil {
		t.Fatal(err)
	}
	if cfg.InMemoryUpstreams {
		t.Fatal("-grpc-in-memory=false left them on")
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
}
