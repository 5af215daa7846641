// Package memconn is a net.Listener whose connections are in-memory pipes: a gRPC server served on
// one runs exactly the code it runs over TCP (the same interceptors and transport credentials, TLS
// over the pipe) with no socket. Tests use it to serve gRPC without ports. Its Addr also names the
// peer of the gateway's in-process calls to the services of its own process ("memory:secrets"),
// which no longer cross a connection (package inprocgrpc).
//
// The pipes are this package's own (pipe.go): buffered, with deadlines, like grpc-go's
// test/bufconn, which it replaced so that no test package is linked into the gantry binary
// (internal/importrules checks it). The listener and its connections have a name, so logs and peers
// read "memory:<name>".
package memconn

import (
	"context"
	"net"
	"sync"
)

// Network is the network name of in-memory addresses.
const Network = "memory"

// bufferSize is the capacity of each direction of a connection: larger than gRPC's 64 KiB default
// flow-control window and 32 KiB write buffer, so a writer rarely waits for its reader.
const bufferSize = 256 << 10

// Addr is the address of an in-memory listener or connection.
type Addr string

// Network implements net.Addr.
func (Addr) Network() string { return Network }

// String implements net.Addr.
func (a Addr) String() string { return Network + ":" + string(a) }

// Listener accepts the connections its Dial opens. It is safe for concurrent use.
type Listener struct {
	addr Addr
	// accepts hands the server end of a dialled connection to Accept.
	accepts chan net.Conn
	// closed is closed by Close.
	closed    chan struct{}
	closeOnce sync.Once
}

// Listen returns a listener named name (shown as the address of both ends of its connections).
func Listen(name string) *Listener {
	return &Listener{addr: Addr(name), accepts: make(chan net.Conn), closed: make(chan struct{})}
}

// Accept implements net.Listener; after Close it fails with an error wrapping net.ErrClosed, which
// grpc.Server.Serve treats as the end of the listener.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.accepts:
		return c, nil
	case <-l.closed:
		return nil, &net.OpError{Op: "accept", Net: Network, Addr: l.addr, Err: net.ErrClosed}
	}
}

// Close implements net.Listener: new dials fail; connections already open stay open until their
// owners close them (as with TCP).
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

// Addr implements net.Listener.
func (l *Listener) Addr() net.Addr { return l.addr }

// Dial opens a connection to the listener; it fails once the listener is closed, and waits for an
// Accept until ctx ends.
func (l *Listener) Dial(ctx context.Context) (net.Conn, error) {
	client, server := newConnPair(bufferSize)
	select {
	case l.accepts <- &conn{Conn: server, addr: l.addr}:
		return &conn{Conn: client, addr: l.addr}, nil
	case <-ctx.Done():
		return nil, &net.OpError{Op: "dial", Net: Network, Addr: l.addr, Err: ctx.Err()}
	case <-l.closed:
		return nil, &net.OpError{Op: "dial", Net: Network, Addr: l.addr, Err: net.ErrClosed}
	}
}

// conn names both ends of a pipe after its listener.
type conn struct {
	net.Conn
	addr Addr
}

func (c *conn) LocalAddr() net.Addr  { return c.addr }
func (c *conn) RemoteAddr() net.Addr { return c.addr }
