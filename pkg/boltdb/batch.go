package boltdb

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrPanicked is what a PanicError is: Batcher.Do returns one when bbolt panicked, or faulted on
// memory, while committing a batch. The database's in-memory state can no longer be trusted, and the
// caller should stop using it.
var ErrPanicked = errors.New("bbolt panicked")

// ErrClosed is returned by Batcher.Do once Close was called.
var ErrClosed = errors.New("boltdb: batcher closed")

// ErrStalled is what a StalledError is: Batcher.Do refused a write because writes are stalled.
var ErrStalled = errors.New("boltdb: writes stalled")

// StalledError is Batcher.Do's refusal of a write while writes are stalled (see
// Batcher.SetStallTimeout). The write was never committed and never will be: it is safe to retry.
type StalledError struct {
	// For is how long the oldest write has waited to commit.
	For time.Duration
}

func (e *StalledError) Error() string {
	return fmt.Sprintf("boltdb: writes stalled: the oldest write has waited %s to commit (a stalled or frozen disk?)", e.For.Round(time.Millisecond))
}

// Unwrap makes a StalledError match ErrStalled.
func (e *StalledError) Unwrap() error { return ErrStalled }

// PanicError is a panic of bbolt while it committed a batch, with the stack of the goroutine that
// committed it (not the caller's).
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("bbolt panicked while committing a batch: %v", e.Value)
}

// Unwrap makes a PanicError match ErrPanicked.
func (e *PanicError) Unwrap() error { return ErrPanicked }

// Batcher group-commits the write transactions of one bbolt database, without a fixed delay: one
// writer loop drains a queue of calls, as etcd's backend and raft log do. A call that finds the
// database idle is committed at once; calls that arrive while a commit is syncing wait in the queue
// and share the next commit (one transaction, one fsync), at most MaxBatchSize of them. So a lone
// writer pays one fsync and no timer, and under load the number of commits per second stays near
// what the disk syncs while each carries many writes. bbolt's own DB.Batch instead waits
// MaxBatchDelay (10 ms) after the first call for company, which a lone writer always pays in full;
// MaxBatchDelay is not used here.
//
// Durability is bbolt's: a call returns only after its transaction was committed (and, unless the
// database was opened with NoSync, synced) or rolled back.
//
// Failures stay the caller's own. A function that fails or panics inside a shared commit is taken
// out, the others are run again without it, and its caller re-runs it alone, in the caller's
// goroutine (where the caller's own recover sees a panic); a function may therefore run more than
// once and must only touch the transaction. A panic of bbolt itself while committing (a damaged page
// met while rewriting it) happens on the writer loop's goroutine, where nobody could recover it and
// it would end the process: it is recovered there and fails every call of that commit with a
// *PanicError instead.
//
// The writer loop runs only while there are calls queued (an idle Batcher holds no goroutine). Close
// lets it finish the calls already queued, waits for it, and makes later calls fail with ErrClosed.
type Batcher struct {
	db      *bolt.DB
	maxSize int
	// stallAfter is the stall timeout (SetStallTimeout); 0 turns stall detection off.
	stallAfter atomic.Int64
	// committing is when the commit in progress started (UnixNano), 0 between commits.
	committing atomic.Int64
	// now is the clock of stall detection.
	now func() time.Time

	mu     sync.Mutex
	queue  []batchCall
	closed bool
	// loopDone is open while a writer loop runs and closed when it exits; nil when none runs.
	loopDone chan struct{}
}

// NewBatcher returns a Batcher of db that commits at most db.MaxBatchSize calls in one transaction.
func NewBatcher(db *bolt.DB) *Batcher {
	return &Batcher{db: db, maxSize: max(1, db.MaxBatchSize), now: time.Now}
}

// SetStallTimeout turns on stall detection: once the oldest write (committing, or queued behind a
// commit) has waited d without committing, writes are stalled (Stalled reports for how long) until
// it commits. Meanwhile Do refuses new writes at once with a *StalledError, and a write still queued
// after waiting d is taken out of the queue and refused the same way, so that callers get an answer
// instead of waiting for the disk; a write whose commit has begun waits for its outcome (it may
// still take effect). d <= 0 turns detection off. Call it before the Batcher is used.
func (b *Batcher) SetStallTimeout(d time.Duration) { b.stallAfter.Store(int64(max(d, 0))) }

// Stalled returns how long the oldest write has waited to commit, when that is at least the stall
// timeout, and 0 otherwise (or when detection is off).
func (b *Batcher) Stalled() time.Duration {
	after := time.Duration(b.stallAfter.Load())
	if after <= 0 {
		return 0
	}
	now := b.now()
	oldest := now
	if c := b.committing.Load(); c != 0 {
		oldest = time.Unix(0, c)
	}
	b.mu.Lock()
	if len(b.queue) > 0 && b.queue[0].queued.Before(oldest) {
		oldest = b.queue[0].queued
	}
	b.mu.Unlock()
	if waited := now.Sub(oldest); waited >= after {
		return waited
	}
	return 0
}

// CommitWaited reports how long the oldest write of the commit in progress has waited (0 between
// commits): one atomic load and a clock read, cheap enough for every read to ask whether the disk is
// slow right now.
func (b *Batcher) CommitWaited() time.Duration {
	c := b.committing.Load()
	if c == 0 {
		return 0
	}
	return b.now().Sub(time.Unix(0, c))
}

type batchCall struct {
	fn     func(*bolt.Tx) error
	err    chan error
	queued time.Time
}

// errTrySolo tells a caller to run its function alone: it failed or panicked inside a shared commit.
var errTrySolo = errors.New("boltdb: batch function failed; run it alone")

// Do runs fn in a write transaction, shared with the other calls queued meanwhile, and returns fn's
// error or the commit's.
// With stall detection on (SetStallTimeout) it refuses the write with a *StalledError, never
// having run it, while writes are stalled.
func (b *Batcher) Do(fn func(*bolt.Tx) error) error {
	if waited := b.Stalled(); waited > 0 {
		return &StalledError{For: waited}
	}
	errc := make(chan error, 1)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	queued := b.now()
	b.queue = append(b.queue, batchCall{fn: fn, err: errc, queued: queued})
	if b.loopDone == nil {
		b.loopDone = make(chan struct{})
		go b.writeLoop(b.loopDone)
	}
	b.mu.Unlock()

	var err error
	if after := time.Duration(b.stallAfter.Load()); after > 0 {
		timer := time.NewTimer(after)
		select {
		case err = <-errc:
		case <-timer.C:
			if b.unqueue(errc) {
				return &StalledError{For: b.now().Sub(queued)}
			}
			// Its commit has begun: the outcome is the commit's.
			err = <-errc
		}
		timer.Stop()
	} else {
		err = <-errc
	}
	if err == errTrySolo {
		err = b.db.Update(fn)
	}
	return err
}

// Queued returns how many writes wait in the queue for their commit (not counting those of the
// commit in progress): the store's write queue depth.
func (b *Batcher) Queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// unqueue takes the call answering on errc out of the queue, if the writer loop has not taken it yet.
func (b *Batcher) unqueue(errc chan error) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, c := range b.queue {
		if c.err == errc {
			b.queue = append(b.queue[:i:i], b.queue[i+1:]...)
			return true
		}
	}
	return false
}

// Close stops the Batcher: the calls already queued are committed, later calls fail with ErrClosed.
// It returns once the writer loop has exited. Closing twice is harmless.
func (b *Batcher) Close() {
	b.mu.Lock()
	b.closed = true
	done := b.loopDone
	b.mu.Unlock()
	if done != nil {
		<-done
	}
}

// writeLoop commits the queue, up to maxSize calls at a time, until it is empty. Calls queued while a
// commit runs are taken by the next round: that is where writers share a commit.
func (b *Batcher) writeLoop(done chan struct{}) {
	defer close(done)
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.loopDone = nil
			b.mu.Unlock()
			return
		}
		var calls []batchCall
		if len(b.queue) <= b.maxSize {
			calls, b.queue = b.queue, nil
		} else {
			calls, b.queue = b.queue[:b.maxSize:b.maxSize], append([]batchCall(nil), b.queue[b.maxSize:]...)
		}
		b.committing.Store(calls[0].queued.UnixNano())
		b.mu.Unlock()
		b.commit(calls)
	}
}

// commit runs calls in one transaction, taking out (to run alone) each function that fails, until
// the rest commits or the commit itself fails.
func (b *Batcher) commit(calls []batchCall) {
	for len(calls) > 0 {
		failed := -1
		err := updateContained(b.db, func(tx *bolt.Tx) error {
			for i, c := range calls {
				if err := callContained(c.fn, tx); err != nil {
					failed = i
					return err
				}
			}
			return nil
		})
		if failed >= 0 && !errors.Is(err, ErrPanicked) {
			c := calls[failed]
			calls[failed], calls = calls[len(calls)-1], calls[:len(calls)-1]
			c.err <- errTrySolo
			continue
		}
		// Done before answering, so a caller that got its answer never sees its own commit stalled.
		b.committing.Store(0)
		for _, c := range calls {
			c.err <- err
		}
		return
	}
}

// fnPanicked marks a panic of a batch function (not of bbolt): its caller re-runs it alone.
type fnPanicked struct{ reason any }

func (p fnPanicked) Error() string { return fmt.Sprintf("batch function panicked: %v", p.reason) }

func callContained(fn func(*bolt.Tx) error, tx *bolt.Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fnPanicked{r}
		}
	}()
	return fn(tx)
}

// updateContained is db.Update with a panic or memory fault of bbolt (its commit) returned as
// ErrPanicked. bbolt's Update rolls the transaction back on a panic, releasing its lock.
func updateContained(db *bolt.DB, fn func(*bolt.Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return db.Update(fn)
}
