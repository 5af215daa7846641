package boltdb

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrPanicked is what a PanicError is: Batcher.Do returns one when bbolt panicked, or faulted on
// memory, while committing a batch. The database's in-memory state can no longer be trusted, and the
// caller should stop using it.
var ErrPanicked = errors.New("bbolt panicked")

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

// Batcher is bbolt's DB.Batch (concurrent writers share one commit, one fsync) with one difference:
// the shared commit runs under a recover. bbolt commits a batch on a goroutine of its own (a timer's,
// or one it starts when the batch is full), where a panic inside bbolt — a damaged page met while
// rewriting it — cannot be recovered by anyone and ends the whole process. Here such a panic fails
// every call of the batch with ErrPanicked instead. Everything else is as bbolt does it: a batch runs
// when it holds MaxSize calls or MaxDelay after its first; a function that fails or panics is taken
// out and run again alone, in its caller's goroutine (where the caller's own recover sees a panic);
// a function may therefore run more than once and must only touch the transaction.
type Batcher struct {
	db       *bolt.DB
	maxSize  int
	maxDelay time.Duration

	mu      sync.Mutex
	pending *batch
}

// NewBatcher returns a Batcher of db with bbolt's batch settings of db (MaxBatchSize, MaxBatchDelay).
func NewBatcher(db *bolt.DB) *Batcher {
	return &Batcher{db: db, maxSize: max(1, db.MaxBatchSize), maxDelay: db.MaxBatchDelay}
}

type batch struct {
	b     *Batcher
	timer *time.Timer
	start sync.Once
	calls []batchCall
}

type batchCall struct {
	fn  func(*bolt.Tx) error
	err chan error
}

// errTrySolo tells a caller to run its function alone: it failed or panicked inside a shared batch.
var errTrySolo = errors.New("boltdb: batch function failed; run it alone")

// Do runs fn in a write transaction shared with other concurrent calls, and returns fn's error or
// the commit's.
func (b *Batcher) Do(fn func(*bolt.Tx) error) error {
	errc := make(chan error, 1)
	b.mu.Lock()
	if b.pending == nil || len(b.pending.calls) >= b.maxSize {
		bt := &batch{b: b}
		bt.timer = time.AfterFunc(b.maxDelay, bt.trigger)
		b.pending = bt
	}
	b.pending.calls = append(b.pending.calls, batchCall{fn: fn, err: errc})
	if len(b.pending.calls) >= b.maxSize {
		go b.pending.trigger()
	}
	b.mu.Unlock()

	err := <-errc
	if err == errTrySolo {
		err = b.db.Update(fn)
	}
	return err
}

func (bt *batch) trigger() { bt.start.Do(bt.run) }

// run commits the batch, taking out (to run alone) each function that fails, until the rest commits.
func (bt *batch) run() {
	b := bt.b
	b.mu.Lock()
	bt.timer.Stop()
	if b.pending == bt {
		b.pending = nil // no call joins a batch that is running
	}
	b.mu.Unlock()

	for len(bt.calls) > 0 {
		failed := -1
		err := updateContained(b.db, func(tx *bolt.Tx) error {
			for i, c := range bt.calls {
				if err := callContained(c.fn, tx); err != nil {
					failed = i
					return err
				}
			}
			return nil
		})
		if failed >= 0 && !errors.Is(err, ErrPanicked) {
			c := bt.calls[failed]
			bt.calls[failed], bt.calls = bt.calls[len(bt.calls)-1], bt.calls[:len(bt.calls)-1]
			c.err <- errTrySolo
			continue
		}
		for _, c := range bt.calls {
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
