package memconn

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

func TestDialAcceptExchange(t *testing.T) {
	l := Listen("secrets")
	defer l.Close()
	if got := l.Addr().String(); got != "memory:secrets" {
		t.Fatalf("Addr = %q", got)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	client, err := l.Dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	server := <-accepted
	// A write larger than nothing but within the buffer does not wait for the reader.
	msg := make([]byte, 100<<10)
	if _, err := client.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(server, got); err != nil {
		t.Fatal(err)
	}
	if server.RemoteAddr().String() != "memory:secrets" || client.LocalAddr().Network() != Network {
		t.Fatalf("addresses %v %v", server.RemoteAddr(), client.LocalAddr())
	}
	// Closing one end ends the other's reads.
	_ = client.Close()
	if _, err := server.Read(got); !errors.Is(err, io.EOF) {
		t.Fatalf("read after peer close: %v", err)
	}
}

func TestReadDeadline(t *testing.T) {
	l := Listen("x")
	defer l.Close()
	go func() { _, _ = l.Accept() }()
	c, err := l.Dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	var ne net.Error
	if _, err := c.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past deadline: %v", err)
	}
}

func TestClosedListener(t *testing.T) {
	l := Listen("x")
	_ = l.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	if _, err := l.Dial(context.Background()); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Dial after Close: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Listen("y").Dial(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Dial with an ended context: %v", err)
	}
}

// TestFullBuffer: a write larger than the buffer waits for the reader, and a write deadline ends the
// wait of a writer nobody reads.
func TestFullBuffer(t *testing.T) {
	l := Listen("x")
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	client, err := l.Dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	server := <-accepted
	msg := make([]byte, 2*bufferSize+7)
	for i := range msg {
		msg[i] = byte(i)
	}
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, len(msg))
		_, _ = io.ReadFull(server, b)
		got <- b
	}()
	if n, err := client.Write(msg); err != nil || n != len(msg) {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if b := <-got; !bytes.Equal(b, msg) {
		t.Fatal("the reader got other bytes than were written")
	}

	_ = client.SetWriteDeadline(time.Now().Add(20 * time.Millisecond))
	n, err := client.Write(msg)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || n != bufferSize {
		t.Fatalf("Write past the deadline of an unread conn = %d, %v; want %d, a timeout", n, err, bufferSize)
	}
}
