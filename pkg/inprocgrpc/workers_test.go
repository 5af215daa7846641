package inprocgrpc

import (
	"testing"
	"time"
)

// endsEventually waits until no worker of w takes a call any more: a send to w.tasks succeeds only
// while a worker waits for one. It never returns while a worker lives on (the test then times out).
func endsEventually(w *workers) {
	for {
		select {
		case w.tasks <- func() {}:
			time.Sleep(time.Millisecond)
		default:
			return
		}
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
	endsEventually(w)
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
	endsEventually(w)
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
