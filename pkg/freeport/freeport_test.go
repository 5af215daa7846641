package freeport

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
)

// TestAddrsAreFreeDistinctAndBelowTheEphemeralRange: every address binds, none repeats, and none is
// in the range the kernel gives outgoing connections (where the port 0 trick draws from).
func TestAddrsAreFreeDistinctAndBelowTheEphemeralRange(t *testing.T) {
	seen := map[string]bool{}
	for _, addr := range Addrs(t, 50) {
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
		_, p, _ := net.SplitHostPort(addr)
		if port, _ := strconv.Atoi(p); port >= ephemeralStart() || port < 10000 {
			t.Errorf("%s is outside 10000..%d", addr, ephemeralStart()-1)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s does not bind: %v", addr, err)
		}
		_ = l.Close()
	}
}

// TestRefusedRefusesAndHoldsThePort: a connect to Refused's address is refused, and no listener can
// take its port while the test runs.
func TestRefusedRefusesAndHoldsThePort(t *testing.T) {
	addr := Refused(t)
	if c, err := net.Dial("tcp", addr); err == nil {
		_ = c.Close()
		t.Fatalf("a connect to %s succeeded", addr)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("a connect to %s: %v, want connection refused", addr, err)
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		_ = l.Close()
		t.Fatalf("a listener took %s", addr)
	}
}
