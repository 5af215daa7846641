package boltdb

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// ErrPanicked is what a PanicError is: Batcher.Do returns one when bbolt panicked, or faulted on
// memory, while committing a batch. The database's in-memory state can no longer be trusted, and the
// caller should stop using it.
var ErrPanicked = errors.New("bbolt panicked")

// ErrClosed is returned by Batcher.Do once Close was called.
var ErrClosed = errors.New("boltdb: batcher closed")

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

	mu     sync.Mutex
	queue  []batchCall
	closed bool
	// loopDone is open while a writer loop runs and closed when it exits; nil when none runs.
	loopDone chan struct{}
}

// NewBatcher returns a Batcher of db that commits at most db.MaxBatchSize calls in one transaction.
func NewBatcher(db *bolt.DB) *Batcher {
	return &Batcher{db: db, maxSize: max(1, db.MaxBatchSize)}
}

type batchCall struct {
	fn  func(*bolt.Tx) error
	err chan error
}

// errTrySolo tells a caller to run its function alone: it failed or panicked inside a shared commit.
var errTrySolo = errors.New("boltdb: batch function failed; run it alone")

// Do runs fn in a write transaction, shared with the other calls queued meanwhile, and returns fn's
// error or the commit's.
func (b *Batcher) Do(fn func(*bolt.Tx) error) error {
	errc := make(chan error, 1)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	b.queue = append(b.queue, batchCall{fn: fn, err: errc})
	if b.loopDone == nil {
		b.loopDone = make(chan struct{})
		go b.writeLoop(b.loopDone)
	}
	b.mu.Unlock()

	err := <-errc
	if err == errTrySolo {
		err = b.db.Update(fn)
	}
	return err
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
