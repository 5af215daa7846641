// Package freeport hands tests loopback addresses that a process started later can bind.
//
// Asking the kernel for port 0 and closing the listener returns a port from the ephemeral range, the
// range the kernel also draws from for the local end of every outgoing connection: under load (a
// test suite opening thousands of connections) one of them takes the port before the process that
// was meant to bind it does, and the test fails with "address already in use" (TestSIGHUPReloadsClusters
// did, under make test on a loaded machine). The ports here come from below the ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range), which no outgoing connection takes, are checked to be
// free, and are never handed out twice by one process.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// TB is the part of testing.TB that Addr needs.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// Addr returns a free 127.0.0.1:port address outside the ephemeral range.
func Addr(tb TB) string {
	tb.Helper()
	addr, err := Find()
	if err != nil {
		tb.Fatalf("freeport: %v", err)
	}
	return addr
}

// Addrs returns n distinct addresses as Addr does.
func Addrs(tb TB, n int) []string {
	tb.Helper()
	out := make([]string, n)
	for i := range out {
		out[i] = Addr(tb)
	}
	return out
}

// Find returns a free 127.0.0.1:port address outside the ephemeral range.
func Find() (string, error) {
	lo, hi := 10000, ephemeralStart()-1
	if hi-lo < 1000 { // an unusual range: fall back to the kernel's choice
		return kernelPort()
	}
	mu.Lock()
	defer mu.Unlock()
	for range 200 {
		port := lo + rand.IntN(hi-lo+1)
		if given[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		_ = l.Close()
		given[port] = true
		return l.Addr().String(), nil
	}
	return "", fmt.Errorf("no free port in %d-%d after 200 tries", lo, hi)
}

// ephemeralStart is the first port of the kernel's ephemeral range (32768 when it cannot be read).
func ephemeralStart() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return 32768
	}
	start, err := strconv.Atoi(fields[0])
	if err != nil || start < 1024 {
		return 32768
	}
	return start
}

func kernelPort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
