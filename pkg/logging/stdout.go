package logging

import (
	"io"
	"os"
	"sync"
)

// Stdout is the process's standard output for the writers that share it (the gateway's access log,
// the audit trail): one write at a time, so a record of one is never split by a record of the other.
// A write to a pipe longer than PIPE_BUF (4 KiB; a flush of the access log is) is not atomic: without
// this lock another thread's line could land in the middle of it.
var Stdout io.Writer = &lockedWriter{w: os.Stdout}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
