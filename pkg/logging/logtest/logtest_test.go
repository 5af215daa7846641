package logtest

import (
	"os"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/logging"
)

// lateWrite is closed once the timer of TestATimerOutlivesItsTest has logged.
var lateWrite = make(chan struct{})

// TestMain waits, after every test has completed, for the late write: with zaptest's own logger
// t.Log panics there ("Log in goroutine after ... has completed") and the binary fails, as a stack's
// sampler summary did to the e2e suite when its timer fired after the last test.
func TestMain(m *testing.M) {
	code := m.Run()
	select {
	case <-lateWrite:
	case <-time.After(10 * time.Second):
	}
	time.Sleep(100 * time.Millisecond) // the sampler's summary (due 50 ms after the test) too
	os.Exit(code)
}

// TestATimerOutlivesItsTest leaves a sampler whose summary line is due after the test, and a timer
// that logs after it.
func TestATimerOutlivesItsTest(t *testing.T) {
	logger := New(t)
	s := logging.NewSampler(logger, 1, 50*time.Millisecond)
	for range 3 {
		s.Info("refused", "a refusal") // the second and third are left out: a summary is scheduled
	}
	time.AfterFunc(100*time.Millisecond, func() {
		logger.Info("after the test")
		close(lateWrite)
	})
}
