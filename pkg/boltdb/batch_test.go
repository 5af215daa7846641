package boltdb

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"
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
