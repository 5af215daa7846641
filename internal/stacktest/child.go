package stacktest

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/freeport"
)

// Addrs are the listen addresses of a gantry that a test runs as a child process.
type Addrs struct {
	Gateway, Admin, AdminGRPC, Secrets, Chat string
}

// FreeAddrs picks a free loopback address for every listener: from pkg/freeport, not port 0, since
// the child binds them a moment after the test picked them.
func FreeAddrs(t testing.TB) Addrs {
	t.Helper()
	a := freeport.Addrs(t, 5)
	return Addrs{Gateway: a[0], Admin: a[1], AdminGRPC: a[2], Secrets: a[3], Chat: a[4]}
}

// Flags are the listen flags of the addresses; an empty one gets none, so the child takes that
// setting from its environment or its default.
func (a Addrs) Flags() []string {
	var flags []string
	for _, f := range []struct{ name, addr string }{
		{"gateway-listen", a.Gateway}, {"admin-listen", a.Admin}, {"admin-grpc-listen", a.AdminGRPC},
		{"secrets-listen", a.Secrets}, {"chat-listen", a.Chat},
	} {
		if f.addr != "" {
			flags = append(flags, "-"+f.name+"="+f.addr)
		}
	}
	return flags
}
