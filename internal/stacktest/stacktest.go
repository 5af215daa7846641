package stacktest

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
)

// loopback is the listen address of every role of a test stack: the kernel picks the port, and
// Running holds the bound addresses.
const loopback = "127.0.0.1:0"

// Config is stack.DefaultConfig for a test: every role on a loopback port of its own, the data in a
// new temporary folder, a 2-second shutdown, and neither an access-log line per request nor the
// audit trail on standard output (benchmarks and loads make thousands; the tests of those read them
// from a file or a writer they set).
func Config(t testing.TB) stack.Config {
	t.Helper()
	cfg := stack.DefaultConfig()
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.ShutdownTimeout = 2 * time.Second
	cfg.Secrets.Listen = loopback
	cfg.Chat.Listen = loopback
	cfg.Gateway.Listen = loopback
	cfg.Gateway.AdminListen = loopback
	cfg.Gateway.AdminGRPCListen = loopback
	cfg.Gateway.AccessLog = "off"
	cfg.AuditStdout = io.Discard
	return cfg
}

// Running is a stack a test started; it stops when the test ends.
type Running struct {
	*stack.Stack
	// Config is the configuration it runs, for a restart on the same data folder.
	Config stack.Config

	cancel context.CancelFunc
	waited bool
}

// Option adjusts Start.
type Option func(*options)

type options struct {
	logger    *zap.Logger
	unchecked bool
}

// Logger sends the stack's log to logger instead of the default: logtest.New(t) in a test, nothing
// in a benchmark (which measures the stack, not its logging).
func Logger(logger *zap.Logger) Option { return func(o *options) { o.logger = logger } }

// UncheckedStop leaves how the stack stopped at the end of the test unchecked.
func UncheckedStop() Option { return func(o *options) { o.unchecked = true } }

// Start starts every role of cfg, failing the test when one cannot start. When the test ends the
// stack is stopped and, unless UncheckedStop, the test fails if it did not stop cleanly.
func Start(t testing.TB, cfg stack.Config, opts ...Option) *Running {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = zap.NewNop()
		if _, isTest := t.(*testing.T); isTest {
			o.logger = logtest.New(t)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := stack.Start(ctx, cfg, o.logger)
	if err != nil {
		cancel()
		t.Fatalf("start stack: %v", err)
	}
	r := &Running{Stack: st, Config: cfg, cancel: cancel}
	t.Cleanup(func() {
		if err := r.Stop(); err != nil && !o.unchecked {
			t.Errorf("stack did not stop cleanly: %v", err)
		}
	})
	return r
}

// Stop stops the stack and waits for every role to end; see Wait for its error.
func (r *Running) Stop() error {
	r.cancel()
	return r.Wait()
}

// Wait waits until the stack stops (on Stop, or by itself: the admin QuitQuitQuit) and returns its
// error the first time; once it has stopped, later calls return nil, so a failure is reported once.
func (r *Running) Wait() error {
	if r.waited {
		return nil
	}
	r.waited = true
	return r.Stack.Wait()
}
