//go:build unix

package freeport

import (
	"fmt"
	"syscall"
)

// boundNotListening binds a TCP socket to a port of 127.0.0.1 chosen by the kernel, and never
// listens on it.
func boundNotListening() (addr string, release func(), err error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return "", nil, err
	}
	release = func() { _ = syscall.Close(fd) }
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		release()
		return "", nil, err
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		release()
		return "", nil, err
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		release()
		return "", nil, fmt.Errorf("bound to %T, not an IPv4 address", sa)
	}
	return fmt.Sprintf("127.0.0.1:%d", in4.Port), release, nil
}
