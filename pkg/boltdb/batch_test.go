package boltdb

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gantry-dev/gantry/pkg/testwait"
)

func openBatchDB(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := Open(filepath.Join(t.TempDir(), "batch.db"), Options{NoSync: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("b")); return err }); err != nil {
		t.Fatal(err)
	}
	return db
}

// TestBatcherSharesCommitsAndIsolatesFailures: concurrent calls all land (in fewer commits than
// calls), a failing function fails only its own call, and a panicking one panics in its caller.
func TestBatcherSharesCommitsAndIsolatesFailures(t *testing.T) {
	db := openBatchDB(t)
	b := NewBatcher(db)
	var txs sync.Map // the distinct write transactions the calls ran in
	errBad := errors.New("bad write")
	const n = 200
	var wg sync.WaitGroup
	errs := make([]error, n)
	panics := make([]any, n)
	for i := range n {
		wg.Go(func() {
			defer func() { panics[i] = recover() }()
			errs[i] = b.Do(func(tx *bolt.Tx) error {
				switch {
				case i == 7:
					return errBad
				case i == 9:
					panic("fn bug")
				}
				txs.Store(tx, true)
				return tx.Bucket([]byte("b")).Put([]byte(fmt.Sprint(i)), []byte("v"))
			})
		})
	}
	wg.Wait()
	for i := range n {
		switch {
		case i == 7:
			if !errors.Is(errs[i], errBad) {
				t.Errorf("call 7 = %v, want its own error", errs[i])
			}
		case i == 9:
			if panics[i] != "fn bug" {
				t.Errorf("call 9 recovered %v, want its own panic in its goroutine", panics[i])
			}
		case errs[i] != nil || panics[i] != nil:
			t.Errorf("call %d = %v, %v", i, errs[i], panics[i])
		}
	}
	var keys int
	_ = db.View(func(tx *bolt.Tx) error { keys = tx.Bucket([]byte("b")).Stats().KeyN; return nil })
	if keys != n-2 {
		t.Errorf("%d keys stored, want %d", keys, n-2)
	}
	commits := 0
	txs.Range(func(any, any) bool { commits++; return true })
	if commits >= n-2 {
		t.Errorf("%d commits for %d calls: the calls were not batched", commits, n)
	}
}

// TestBatcherContainsACommitPanic: a panic while bbolt commits the batch (here a commit handler's,
// which bbolt runs inside Commit) fails every call of the batch with a PanicError instead of ending
// the process, and the database stays usable enough to close.
func TestBatcherContainsACommitPanic(t *testing.T) {
	db := openBatchDB(t)
	b := NewBatcher(db)
	err := b.Do(func(tx *bolt.Tx) error {
		tx.OnCommit(func() { panic("commit bug") })
		return tx.Bucket([]byte("b")).Put([]byte("k"), []byte("v"))
	})
	var p *PanicError
	if !errors.As(err, &p) || !errors.Is(err, ErrPanicked) || p.Value != "commit bug" || len(p.Stack) == 0 {
		t.Fatalf("Do with a panicking commit = %v, want a PanicError with the value and a stack", err)
	}
	// The lock is released (bbolt's Update rolled back or finished): another write goes through.
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("b")).Put([]byte("k2"), nil) }); err != nil {
		t.Fatalf("write after the contained panic: %v", err)
	}
}

// TestBatcherLoneWriterIsNotDelayed: a call that finds the database idle commits at once. bbolt's own
// Batch (and this Batcher before it had a writer loop) waits MaxBatchDelay for company; with that set
// to an hour a single call would hang for an hour.
func TestBatcherLoneWriterIsNotDelayed(t *testing.T) {
	db := openBatchDB(t)
	db.MaxBatchDelay = time.Hour
	b := NewBatcher(db)
	defer b.Close()
	for i := range 3 {
		done := make(chan error, 1)
		go func() {
			done <- b.Do(func(tx *bolt.Tx) error { return tx.Bucket([]byte("b")).Put([]byte(fmt.Sprint(i)), []byte("v")) })
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("call %d of a lone writer still waiting after 30s: it waits for a timer (MaxBatchDelay)", i)
		}
	}
}

// holdCommit makes the next commit of b block, inside bbolt's Commit, until the returned release is
// called; it returns once that commit is blocked. Calls made meanwhile queue behind it.
func holdCommit(t *testing.T, b *Batcher) (release func(), result <-chan error) {
	t.Helper()
	held, unblock := make(chan struct{}), make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- b.Do(func(tx *bolt.Tx) error {
			tx.OnCommit(func() { close(held); <-unblock })
			return tx.Bucket([]byte("b")).Put([]byte("held"), []byte("v"))
		})
	}()
	<-held
	return func() { close(unblock) }, errc
}

// waitQueued waits until n calls are queued behind the running commit.
func waitQueued(t *testing.T, b *Batcher, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b.mu.Lock()
		queued := len(b.queue)
		b.mu.Unlock()
		if queued >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", queued, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBatcherCoalescesWhileACommitSyncs: calls that arrive while a commit runs share the next commit,
// and no commit carries more than MaxBatchSize calls.
func TestBatcherCoalescesWhileACommitSyncs(t *testing.T) {
	for _, tc := range []struct {
		name            string
		maxSize, calls  int
		wantTxs         int
		wantLargestSize int
	}{
		{"all in one commit", 1000, 20, 1, 20},
		{"capped at MaxBatchSize", 4, 10, 3, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openBatchDB(t)
			db.MaxBatchSize = tc.maxSize
			b := NewBatcher(db)
			defer b.Close()
			release, heldErr := holdCommit(t, b)

			var mu sync.Mutex
			sizes := map[*bolt.Tx]int{}
			var wg sync.WaitGroup
			errs := make([]error, tc.calls)
			for i := range tc.calls {
				wg.Go(func() {
					errs[i] = b.Do(func(tx *bolt.Tx) error {
						mu.Lock()
						sizes[tx]++
						mu.Unlock()
						return tx.Bucket([]byte("b")).Put([]byte(fmt.Sprint(i)), []byte("v"))
					})
				})
			}
			waitQueued(t, b, tc.calls)
			release()
			wg.Wait()
			if err := <-heldErr; err != nil {
				t.Fatalf("held call: %v", err)
			}
			for i, err := range errs {
				if err != nil {
					t.Errorf("call %d: %v", i, err)
				}
			}
			largest := 0
			for _, n := range sizes {
				largest = max(largest, n)
			}
			if len(sizes) != tc.wantTxs || largest != tc.wantLargestSize {
				t.Errorf("%d calls queued during a commit ran in %d transactions (largest %d calls), want %d (largest %d)",
					tc.calls, len(sizes), largest, tc.wantTxs, tc.wantLargestSize)
			}
		})
	}
}

// TestBatcherCloseFinishesQueuedCallsAndStopsTheLoop: Close commits what was queued before it, then
// refuses new calls, and leaves no writer loop running.
func TestBatcherCloseFinishesQueuedCallsAndStopsTheLoop(t *testing.T) {
	db := openBatchDB(t)
	b := NewBatcher(db)
	release, heldErr := holdCommit(t, b)
	queued := make(chan error, 1)
	go func() {
		queued <- b.Do(func(tx *bolt.Tx) error { return tx.Bucket([]byte("b")).Put([]byte("queued"), []byte("v")) })
	}()
	waitQueued(t, b, 1)
	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a commit was still running")
	case <-time.After(20 * time.Millisecond):
	}
	release()
	<-closed
	if err := <-heldErr; err != nil {
		t.Errorf("call committing during Close: %v", err)
	}
	if err := <-queued; err != nil {
		t.Errorf("call queued before Close: %v", err)
	}
	if err := b.Do(func(*bolt.Tx) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("Do after Close = %v, want ErrClosed", err)
	}
	b.mu.Lock()
	running := b.loopDone != nil
	b.mu.Unlock()
	if running {
		t.Error("writer loop still running after Close")
	}
	_ = db.View(func(tx *bolt.Tx) error {
		if tx.Bucket([]byte("b")).Get([]byte("queued")) == nil {
			t.Error("the call queued before Close was not committed")
		}
		return nil
	})
	b.Close() // twice is harmless
}

// BenchmarkBatcher measures durable commits (fsync on) of small writes from 1 and 16 concurrent
// writers: with one writer every call is its own commit; with 16 they share commits.
func BenchmarkBatcher(b *testing.B) {
	for _, writers := range []int{1, 16} {
		b.Run(fmt.Sprintf("writers_%d", writers), func(b *testing.B) {
			db, err := Open(filepath.Join(b.TempDir(), "bench.db"), Options{}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("b")); return err }); err != nil {
				b.Fatal(err)
			}
			bt := NewBatcher(db)
			defer bt.Close()
			txid := func() (id int) { _ = db.View(func(tx *bolt.Tx) error { id = tx.ID(); return nil }); return id }
			firstTx := txid()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range writers {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						err := bt.Do(func(tx *bolt.Tx) error {
							return tx.Bucket([]byte("b")).Put([]byte(fmt.Sprint(i)), make([]byte, 256))
						})
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "writes/s")
			// Every commit of a write transaction advances the database's transaction id by one.
			b.ReportMetric(float64(b.N)/float64(max(1, txid()-firstTx)), "writes/commit")
		})
	}
}

// TestBatcherStall: with bbolt's write lock held (a commit stuck on a frozen disk), the write whose
// commit has begun waits for its outcome; once the oldest write has waited the stall timeout,
// Stalled reports it, a write still queued is taken out and refused with a StalledError (never run),
// and new writes are refused at once; after the lock is released the held write commits, Stalled
// reports 0 and writes commit again.
func TestBatcherStall(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "stall.db"), Options{NoSync: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := NewBatcher(db)
	defer b.Close()
	const stallAfter = 50 * time.Millisecond
	b.SetStallTimeout(stallAfter)
	put := func(key string) func(*bolt.Tx) error {
		return func(tx *bolt.Tx) error {
			bk, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			return bk.Put([]byte(key), []byte("v"))
		}
	}
	lock, err := db.Begin(true)
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() { held <- b.Do(put("held")) }()
	// The held call's commit waits for the lock; a second call queues behind it.
	testwait.Until(t, "the held call's commit", func() bool { return b.committing.Load() != 0 })
	queued := make(chan error, 1)
	var ran atomic.Bool
	go func() {
		queued <- b.Do(func(tx *bolt.Tx) error { ran.Store(true); return put("queued")(tx) })
	}()
	var stalled *StalledError
	if err := <-queued; !errors.As(err, &stalled) || stalled.For < stallAfter {
		t.Fatalf("queued call during the stall: %v, want a StalledError of at least %s", err, stallAfter)
	}
	if waited := b.Stalled(); waited < stallAfter {
		t.Fatalf("Stalled() = %s during the stall", waited)
	}
	if err := b.Do(put("new")); !errors.As(err, &stalled) {
		t.Fatalf("new call during the stall: %v, want a StalledError", err)
	}
	select {
	case err := <-held:
		t.Fatalf("the held call returned %v while its commit waited for the lock", err)
	default:
	}
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-held; err != nil {
		t.Fatalf("the held call after the stall: %v", err)
	}
	if waited := b.Stalled(); waited != 0 {
		t.Fatalf("Stalled() = %s after the commit", waited)
	}
	if err := b.Do(put("after")); err != nil {
		t.Fatalf("a call after the stall: %v", err)
	}
	_ = db.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket([]byte("b"))
		for key, want := range map[string]bool{"held": true, "queued": false, "new": false, "after": true} {
			if got := bk.Get([]byte(key)) != nil; got != want {
				t.Errorf("key %q stored: %v, want %v", key, got, want)
			}
		}
		return nil
	})
	if ran.Load() {
		t.Error("the refused queued call ran")
	}
}
