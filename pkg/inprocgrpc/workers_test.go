package inprocgrpc

import (
	"testing"
	"time"
)

// waitWorkersEnded waits until every worker of w has ended, and fails the test when one still runs
// after a deadline that only bounds a hang.
func waitWorkersEnded(t *testing.T, w *workers) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for w.live.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d workers still run 30 s after they should have ended", w.live.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWorkersAreReused: a worker waits for the next call after its first (it, not a new goroutine,
// receives the next task), and ends when the server stops; a call after that still runs.
func TestWorkersAreReused(t *testing.T) {
	stop := make(chan struct{})
	w := &workers{tasks: make(chan func()), idle: time.Hour, stop: stop}
	ran := make(chan string, 1)
	w.run(func() { ran <- "first" })
	<-ran
	// A blocking send: only a worker waiting in its loop can take it.
	w.tasks <- func() { ran <- "second, on the first call's worker" }
	<-ran
	close(stop)
	waitWorkersEnded(t, w)
	w.run(func() { ran <- "after stop" })
	if got := <-ran; got != "after stop" {
		t.Fatal(got)
	}
}

// TestWorkersEndWhenIdle: a worker with no call for its idle time ends.
func TestWorkersEndWhenIdle(t *testing.T) {
	w := &workers{tasks: make(chan func()), idle: time.Millisecond, stop: make(chan struct{})}
	done := make(chan struct{})
	w.run(func() { close(done) })
	<-done
	waitWorkersEnded(t, w)
}

// TestAStuckHandlerHoldsOnlyItsWorker: while one call's handler does not return, other calls run.
func TestAStuckHandlerHoldsOnlyItsWorker(t *testing.T) {
	w := &workers{tasks: make(chan func()), idle: time.Hour, stop: make(chan struct{})}
	release := make(chan struct{})
	defer close(release)
	stuck := make(chan struct{})
	w.run(func() { close(stuck); <-release })
	<-stuck
	for i := range 3 {
		done := make(chan struct{})
		w.run(func() { close(done) })
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("call %d did not run while another handler was stuck", i)
		}
	}
}
