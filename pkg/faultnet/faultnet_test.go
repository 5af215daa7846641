package faultnet

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echo runs a server that writes back every line it reads.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func proxy(t *testing.T, target string, opts ...Option) *Proxy {
	t.Helper()
	p, err := Listen("", target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// client is one connection through the proxy that sends a first request with X-Server-From: from.
type client struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dial(t *testing.T, p *Proxy, from string) *client {
	t.Helper()
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c := &client{t: t, conn: conn, r: bufio.NewReader(conn)}
	c.send(fmt.Sprintf("GET /raft/stream/message/1 HTTP/1.1\r\nHost: x\r\nX-Server-From: %s\r\n\r\n", from))
	return c
}

func (c *client) send(s string) {
	c.t.Helper()
	if _, err := c.conn.Write([]byte(s)); err != nil {
		c.t.Fatal(err)
	}
}

// read reads n bytes within d; a deadline only bounds a hang where the bytes are expected.
func (c *client) read(n int, d time.Duration) (string, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, n)
	_, err := io.ReadFull(c.r, buf)
	return string(buf), err
}

const hang = 30 * time.Second

func TestForwardsFreezesAndThaws(t *testing.T) {
	p := proxy(t, echo(t))
	c := dial(t, p, "a")
	head := "GET /raft/stream/message/1 HTTP/1.1\r\nHost: x\r\nX-Server-From: a\r\n\r\n"
	if got, err := c.read(len(head), hang); err != nil || got != head {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	p.Freeze()
	c.send("ping\n")
	// Nothing may come back while frozen: whatever the machine's load, a frozen proxy sends nothing,
	// so this wait cannot pass by being slow.
	if got, err := c.read(5, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("frozen proxy answered %q, %v", got, err)
	}
	// A connection made while frozen is accepted but gets nothing either.
	c2 := dial(t, p, "b")
	if got, err := c2.read(1, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection made while frozen answered %q, %v", got, err)
	}
	p.Thaw()
	if got, err := c.read(5, hang); err != nil || got != "ping\n" {
		t.Fatalf("after the thaw: %q, %v", got, err)
	}
	if _, err := c2.read(len(head), hang); err != nil {
		t.Fatalf("connection made while frozen, after the thaw: %v", err)
	}
}

func TestCutsOneSender(t *testing.T) {
	p := proxy(t, echo(t), WithTagger(TagEtcdPeer))
	a, b := dial(t, p, "8e9e05c52164694d"), dial(t, p, "91bc3c398fb3c146")
	head := func(from string) int {
		return len(fmt.Sprintf("GET /raft/stream/message/1 HTTP/1.1\r\nHost: x\r\nX-Server-From: %s\r\n\r\n", from))
	}
	for _, c := range []*client{a, b} {
		if _, err := c.read(head("8e9e05c52164694d"), hang); err != nil {
			t.Fatal(err)
		}
	}
	p.Cut("8e9e05c52164694d")
	if _, err := a.read(1, hang); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the cut sender's connection is still open: %v", err)
	}
	// A new connection of the cut sender is closed; the other sender's go on.
	a2 := dial(t, p, "8e9e05c52164694d")
	if _, err := a2.read(1, hang); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a new connection of the cut sender was served: %v", err)
	}
	b.send("still\n")
	if got, err := b.read(6, hang); err != nil || got != "still\n" {
		t.Fatalf("the other sender: %q, %v", got, err)
	}
	p.Heal("8e9e05c52164694d")
	a3 := dial(t, p, "8e9e05c52164694d")
	if _, err := a3.read(head("8e9e05c52164694d"), hang); err != nil {
		t.Fatalf("after the heal: %v", err)
	}
}

func TestCutAll(t *testing.T) {
	p := proxy(t, echo(t), WithTagger(TagEtcdPeer))
	a := dial(t, p, "x")
	if _, err := a.read(len("GET /raft/stream/message/1 HTTP/1.1\r\nHost: x\r\nX-Server-From: x\r\n\r\n"), hang); err != nil {
		t.Fatal(err)
	}
	p.CutAll()
	if _, err := a.read(1, hang); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection still open after CutAll: %v", err)
	}
	b := dial(t, p, "y")
	if _, err := b.read(1, hang); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a new connection was served after CutAll: %v", err)
	}
	p.HealAll()
	c := dial(t, p, "y")
	if _, err := c.read(1, hang); err != nil {
		t.Fatalf("after HealAll: %v", err)
	}
}
