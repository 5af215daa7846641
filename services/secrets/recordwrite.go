package secrets

import (
	"context"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/services/secrets/store"
)

// Writers of one record queue instead of failing. Every write of a credential or service is a
// read-modify-write: read the current revision N, build revision N+1 (for a credential, seal its
// pairs under a fresh data key, with N+1 in the additional data — which needs the KMS, so it cannot
// happen inside a storage transaction), then store it with compare-and-set on N. Two writers that
// read the same N would collide; so within a replica, the writers of one record take turns
// (recordLocks), and their compare-and-set never conflicts. Writers on other replicas sharing etcd
// can still win the race: the loser reads again and retries, with a growing random pause, until its
// request's deadline (writeRecord).

// recordLocks is a mutex per record key, held by the one writer of that record on this replica while
// the others wait in line (FIFO, as channel receivers are served). Only keys with a holder or a
// waiter have an entry, so memory is bounded by the requests in flight; waiting gives up with the
// waiter's context.
type recordLocks struct {
	mu   sync.Mutex
	keys map[string]*recordLock
}

type recordLock struct {
	// free holds a token while nobody holds the lock.
	free chan struct{}
	// users counts the holder and the waiters; the entry goes away when it drops to zero.
	users int
}

// lock waits for the record's lock, or until ctx ends (then it returns ctx's error). The returned
// function releases it.
func (l *recordLocks) lock(ctx context.Context, key string) (unlock func(), err error) {
	l.mu.Lock()
	if l.keys == nil {
		l.keys = map[string]*recordLock{}
	}
	e := l.keys[key]
	if e == nil {
		e = &recordLock{free: make(chan struct{}, 1)}
		e.free <- struct{}{}
		l.keys[key] = e
	}
	e.users++
	l.mu.Unlock()

	select {
	case <-e.free:
		return func() {
			e.free <- struct{}{}
			l.leave(key, e)
		}, nil
	case <-ctx.Done():
		l.leave(key, e)
		return nil, ctx.Err()
	}
}

func (l *recordLocks) leave(key string, e *recordLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.users--; e.users == 0 {
		delete(l.keys, key)
	}
}

// active is the number of records with a holder or a waiter.
func (l *recordLocks) active() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

func credentialLockKey(id string) string { return "credential/" + id }
func serviceLockKey(id string) string    { return "service/" + id }

// conflictRetryWindow bounds the compare-and-set retries of a request that has no deadline of its
// own (a gRPC caller that set none); requests through the gateway carry its upstream timeout.
const conflictRetryWindow = 30 * time.Second

// writeRecord runs attempt — read the current record, build the next revision, write it with
// compare-and-set — holding the record's lock on this replica. While attempt fails with
// ErrRevisionConflict (a writer on another replica got there first), it pauses and runs it again,
// until the request's deadline (or conflictRetryWindow without one); then the write answers errBusy.
// Any other result of attempt is returned as it is.
func (s *Service) writeRecord(ctx context.Context, key string, attempt func() error) error {
	unlock, err := s.recordLocks.lock(ctx, key)
	if err != nil {
		return err
	}
	defer unlock()
	retryCtx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		retryCtx, cancel = context.WithTimeout(ctx, conflictRetryWindow)
		defer cancel()
	}
	for n := 0; ; n++ {
		err := attempt()
		if !errors.Is(err, store.ErrRevisionConflict) {
			return err
		}
		if err := conflictPause(retryCtx, n); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return errBusy
		}
	}
}

// conflictPause waits before the next attempt of a write that lost a compare-and-set race to another
// replica: a random pause, growing with the attempt (full jitter, 1 ms doubling, at most 64 ms), so
// replicas racing on one record fall out of step instead of colliding again.
func conflictPause(ctx context.Context, attempt int) error {
	limit := time.Millisecond << min(attempt, 6)
	t := time.NewTimer(mathrand.N(limit))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ExpectedRevision is the revision a writer says is current, from HTTP If-Match (gantry's opt-in
// optimistic concurrency): the write goes through only while it still is, else it fails with a
// *StaleRevisionError. 0 means no expectation: the write applies to whatever revision is current.
type ExpectedRevision int32

// check compares the expectation with the current revision (0: the record does not exist).
func (e ExpectedRevision) check(kind string, current int32) error {
	if e == 0 || int32(e) == current {
		return nil
	}
	return &StaleRevisionError{Kind: kind, Expected: int32(e), Current: current}
}

// StaleRevisionError is a write whose expected revision (If-Match) is not the current one; the
// gateway answers 412 Precondition Failed.
type StaleRevisionError struct {
	Kind              string
	Expected, Current int32
}

func (e *StaleRevisionError) Error() string {
	if e.Current == 0 {
		return fmt.Sprintf("Precondition failed: the %s does not exist (If-Match: %d).", e.Kind, e.Expected)
	}
	return fmt.Sprintf("Precondition failed: the current revision of the %s is %d, not %d (If-Match).", e.Kind, e.Current, e.Expected)
}
