// Package memconn is a net.Listener whose connections are in-memory pipes: a gRPC server served on
// one runs exactly the code it runs over TCP (the same interceptors and transport credentials, TLS
// over the pipe) with no socket. Tests use it to serve gRPC without ports. Its Addr also names the
// peer of the gateway's in-process calls to the services of its own process ("memory:secrets"),
// which no longer cross a connection (package inprocgrpc).
//
// The pipes are grpc-go's bufconn (buffered, with deadlines and half-close); this package gives the
// listener and its connections a name, so logs and peers read "memory:<name>" rather than "bufconn".
package memconn

import (
	"context"
	"net"

	"google.golang.org/grpc/test/bufconn"
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
	pipes *bufconn.Listener
	addr  Addr
}

// Listen returns a listener named name (shown as the address of both ends of its connections).
func Listen(name string) *Listener {
	return &Listener{pipes: bufconn.Listen(bufferSize), addr: Addr(name)}
}

// Accept implements net.Listener; after Close it fails with an error wrapping net.ErrClosed, which
// grpc.Server.Serve treats as the end of the listener.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.pipes.Accept()
	if err != nil {
		return nil, &net.OpError{Op: "accept", Net: Network, Addr: l.addr, Err: net.ErrClosed}
	}
	return &conn{Conn: c, addr: l.addr}, nil
}

// Close implements net.Listener: new dials fail; connections already open stay open until their
// owners close them (as with TCP).
func (l *Listener) Close() error { return l.pipes.Close() }

// Addr implements net.Listener.
func (l *Listener) Addr() net.Addr { return l.addr }

// Dial opens a connection to the listener; it fails once the listener is closed, and waits for an
// Accept until ctx ends.
func (l *Listener) Dial(ctx context.Context) (net.Conn, error) {
	c, err := l.pipes.DialContext(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, &net.OpError{Op: "dial", Net: Network, Addr: l.addr, Err: ctx.Err()}
		}
		return nil, &net.OpError{Op: "dial", Net: Network, Addr: l.addr, Err: net.ErrClosed}
	}
	return &conn{Conn: c, addr: l.addr}, nil
}

// conn names both ends of a pipe after its listener.
type conn struct {
	net.Conn
	addr Addr
}

func (c *conn) LocalAddr() net.Addr  { return c.addr }
func (c *conn) RemoteAddr() net.Addr { return c.addr }
