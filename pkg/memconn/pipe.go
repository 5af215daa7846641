package memconn

import (
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// pipe is one direction of a connection: a buffer of at most limit bytes that one end writes and the
// other reads. Writes wait while it is full and reads while it is empty, until a deadline passes or
// an end closes. One condition variable serves both: every change wakes every waiter, which is
// simple and cheap with one reader and one writer.
type pipe struct {
	mu      sync.Mutex
	changed sync.Cond
	// buf holds the unread bytes at its start; its capacity is the limit.
	buf []byte
	// readClosed: the reading end closed (reads and writes fail); writeClosed: the writing end
	// closed (reads drain the buffer, then see io.EOF).
	readClosed, writeClosed bool
	// readDeadline and writeDeadline are the deadlines of each end, both watched by timers that
	// wake the waiters when they pass.
	readDeadline, writeDeadline deadline
}

func newPipe(limit int) *pipe {
	p := &pipe{buf: make([]byte, 0, limit)}
	p.changed.L = &p.mu
	return p
}

// Read implements io.Reader.
func (p *pipe) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		switch {
		case p.readClosed:
			return 0, io.ErrClosedPipe
		case len(p.buf) > 0:
			n := copy(b, p.buf)
			p.buf = p.buf[:copy(p.buf, p.buf[n:])]
			p.changed.Broadcast()
			return n, nil
		case p.writeClosed:
			return 0, io.EOF
		case p.readDeadline.passed():
			return 0, os.ErrDeadlineExceeded
		}
		p.changed.Wait()
	}
}

// Write implements io.Writer: it returns once all of b is in the buffer.
func (p *pipe) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for {
		switch {
		case p.readClosed || p.writeClosed:
			return n, io.ErrClosedPipe
		case n == len(b):
			return n, nil
		case len(p.buf) < cap(p.buf):
			free := cap(p.buf) - len(p.buf)
			chunk := b[n:min(len(b), n+free)]
			p.buf = append(p.buf, chunk...)
			n += len(chunk)
			p.changed.Broadcast()
			continue
		case p.writeDeadline.passed():
			return n, os.ErrDeadlineExceeded
		}
		p.changed.Wait()
	}
}

// close ends the pipe for the reading end (closing its conn), or for the writing end (writeOnly).
func (p *pipe) close(writeOnly bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if writeOnly {
		p.writeClosed = true
	} else {
		p.readClosed = true
	}
	p.changed.Broadcast()
}

// setDeadline sets the read or the write deadline of the pipe.
func (p *pipe) setDeadline(d *deadline, t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d.set(t, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.changed.Broadcast()
	})
}

// deadline is a point in time after which waiting ends; the zero deadline never passes.
type deadline struct {
	at    time.Time
	timer *time.Timer
}

func (d *deadline) passed() bool { return !d.at.IsZero() && !time.Now().Before(d.at) }

// set replaces the deadline with t, calling wake once t passes.
func (d *deadline) set(t time.Time, wake func()) {
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	d.at = t
	if !t.IsZero() {
		d.timer = time.AfterFunc(time.Until(t), wake)
	}
}

// pipeConn is one end of a connection: it reads one pipe and writes the other.
type pipeConn struct {
	in, out *pipe
}

func (c *pipeConn) Read(b []byte) (int, error)  { return c.in.Read(b) }
func (c *pipeConn) Write(b []byte) (int, error) { return c.out.Write(b) }

// Close ends both directions for this end: its reads and writes fail, and the other end reads what
// is buffered, then io.EOF.
func (c *pipeConn) Close() error {
	c.in.close(false)
	c.out.close(true)
	return nil
}

func (c *pipeConn) SetDeadline(t time.Time) error {
	c.in.setDeadline(&c.in.readDeadline, t)
	c.out.setDeadline(&c.out.writeDeadline, t)
	return nil
}

func (c *pipeConn) SetReadDeadline(t time.Time) error {
	c.in.setDeadline(&c.in.readDeadline, t)
	return nil
}

func (c *pipeConn) SetWriteDeadline(t time.Time) error {
	c.out.setDeadline(&c.out.writeDeadline, t)
	return nil
}

// LocalAddr and RemoteAddr are set by the listener's conn, which wraps this one.
func (c *pipeConn) LocalAddr() net.Addr  { return Addr("") }
func (c *pipeConn) RemoteAddr() net.Addr { return Addr("") }

// newConnPair returns the two ends of a new connection, each direction buffered up to limit bytes.
func newConnPair(limit int) (client, server *pipeConn) {
	up, down := newPipe(limit), newPipe(limit)
	return &pipeConn{in: down, out: up}, &pipeConn{in: up, out: down}
}
