//go:build !unix

package freeport

import "net"

// boundNotListening falls back to a closed listener's port where sockets cannot be bound without
// listening through package syscall: another listener may take it.
func boundNotListening() (addr string, release func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr = l.Addr().String()
	_ = l.Close()
	return addr, func() {}, nil
}
