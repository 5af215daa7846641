// Package logtest gives tests a zap logger that writes to the test's log until the test ends and
// drops what comes later.
//
// zaptest's logger calls t.Log, which panics once the test has completed; a component that logs
// from a timer (logging.Sampler's summary line, written when its interval ends) would then crash
// the whole test binary in the middle of another test. The logger returned here stops writing
// when the test's cleanups run, after every cleanup registered later (a stack's shutdown) has logged.
package logtest

import (
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
)

// New returns a logger writing to t's log (zaptest, debug level and up) until t's cleanups run.
func New(t testing.TB, opts ...zap.Option) *zap.Logger {
	g := &gate{}
	t.Cleanup(g.close)
	inner := zaptest.NewLogger(t).Core()
	return zap.New(&gatedCore{Core: inner, gate: g}, opts...)
}

// gate is closed once: a write holds it open for its whole duration, so no write is still under way
// in t.Log when the test completes.
type gate struct {
	mu     sync.RWMutex
	closed bool
}

func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

type gatedCore struct {
	zapcore.Core
	gate *gate
}

func (c *gatedCore) With(fields []zapcore.Field) zapcore.Core {
	return &gatedCore{Core: c.Core.With(fields), gate: c.gate}
}

func (c *gatedCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *gatedCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	c.gate.mu.RLock()
	defer c.gate.mu.RUnlock()
	if c.gate.closed {
		return nil
	}
	return c.Core.Write(e, fields)
}
