package inprocgrpc

import (
	"sync/atomic"
	"time"
)

// workerIdle is how long a worker waits for its next call before it ends.
const workerIdle = 10 * time.Second

// workers run handlers, each call on a goroutine other than its caller's, so a call returns at its
// deadline even when its handler does not (as over the network). A goroutine is kept from one call to
// the next rather than started per call: a new goroutine's stack starts small and grew, copied each
// time, to what the interceptors and handlers need on every call (4% of a read's CPU). A call finds
// an idle worker or starts one, so a stuck handler holds only its own worker; workers end after
// workerIdle without a call, and when the server stops.
type workers struct {
	tasks chan func() // unbuffered: a send succeeds only when a worker waits
	idle  time.Duration
	stop  <-chan struct{}
	// live counts the running workers (one atomic add when a worker starts and one when it ends, not
	// per call), so a test can wait for them to end instead of guessing from timing.
	live atomic.Int32
}

// run runs task on an idle worker, or on a new one.
func (w *workers) run(task func()) {
	select {
	case w.tasks <- task:
	default:
		w.live.Add(1)
		go w.loop(task)
	}
}

func (w *workers) loop(task func()) {
	defer w.live.Add(-1)
	timer := time.NewTimer(w.idle)
	defer timer.Stop()
	for {
		task()
		timer.Reset(w.idle)
		select {
		case task = <-w.tasks:
		case <-timer.C:
			return
		case <-w.stop:
			return
		}
	}
}
