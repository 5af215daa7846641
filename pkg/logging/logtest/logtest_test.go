package logtest

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gantry-dev/gantry/pkg/logging"
)

// lateWrites counts the log lines TestATimerOutlivesItsTest leaves for after its end, in every run
// of it (-count=n): its timer's line and the sampler's summary.
var lateWrites sync.WaitGroup

// TestMain waits, after every test has completed, until the late lines were written: with zaptest's
// own logger t.Log panics there ("Log in goroutine after ... has completed") and the binary fails,
// as a stack's sampler summary did to the e2e suite when its timer fired after the last test.
func TestMain(m *testing.M) {
	code := m.Run()
	written := make(chan struct{})
	go func() { lateWrites.Wait(); close(written) }()
	select {
	case <-written:
	case <-time.After(60 * time.Second):
		fmt.Fprintln(os.Stderr, "the late log lines were never written (a hang)")
		code = 1
	}
	os.Exit(code)
}

// TestATimerOutlivesItsTest leaves a sampler whose summary line is due after the test, and a timer
// that logs after it. A hook on the logger sees each line once it went through the test's core.
func TestATimerOutlivesItsTest(t *testing.T) {
	lateWrites.Add(2)
	logger := New(t, zap.Hooks(func(e zapcore.Entry) error {
		if e.Message == "after the test" || e.Message == "repeated log lines left out" {
			lateWrites.Done()
		}
		return nil
	}))
	s := logging.NewSampler(logger, 1, 50*time.Millisecond)
	for range 3 {
		s.Info("refused", "a refusal") // the second and third are left out: a summary is scheduled
	}
	time.AfterFunc(100*time.Millisecond, func() { logger.Info("after the test") })
}
