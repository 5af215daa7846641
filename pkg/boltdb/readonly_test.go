package boltdb

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// writeTestDB makes a closed database file holding a few keys.
func writeTestDB(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.db")
	db, err := Open(path, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("b"))
		if err != nil {
			return err
		}
		for i := range 100 {
			if err := b.Put([]byte{byte(i)}, bytes.Repeat([]byte{byte(i)}, 100)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestOpenReadOnlyNeverWrites: a read-only open, the consistency check and a close leave the file's
// bytes and modification time as they were; writes fail; a missing file is not created.
func TestOpenReadOnlyNeverWrites(t *testing.T) {
	path := writeTestDB(t)
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(path, Options{ReadOnly: true, Check: true}, nil)
	if err != nil {
		t.Fatalf("Open read-only: %v", err)
	}
	if err := CheckConsistency(db); err != nil {
		t.Errorf("CheckConsistency: %v", err)
	}
	if err := db.Update(func(*bolt.Tx) error { return nil }); !errors.Is(err, bolterrors.ErrDatabaseReadOnly) {
		t.Errorf("Update on a read-only database: %v, want ErrDatabaseReadOnly", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("the file's bytes changed")
	}
	if info, err := os.Stat(path); err != nil || !info.ModTime().Equal(old) {
		t.Errorf("modification time %v (%v), want %v", info.ModTime(), err, old)
	}

	missing := filepath.Join(t.TempDir(), "missing.db")
	if _, err := Open(missing, Options{ReadOnly: true}, nil); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read-only Open of a missing file: %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read-only Open created the file: %v", err)
	}
}

// TestOpenReadOnlyLocked: bbolt's flock belongs to the open file description, so it excludes a
// second handle of the same process: a read-only open of a file a writer holds fails with ErrLocked
// within the timeout, and so does a writer's open of a file a read-only handle holds. (This is what
// lets the tests of gantry check and gantry backup hold the lock in-process.)
func TestOpenReadOnlyLocked(t *testing.T) {
	path := writeTestDB(t)
	const timeout = 100 * time.Millisecond
	writer, err := Open(path, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, Options{ReadOnly: true, Timeout: timeout}, nil); !errors.Is(err, ErrLocked) {
		t.Errorf("read-only Open of a file a writer holds: %v, want ErrLocked", err)
	}
	if err := writer.Close(); err != nil {
		t.Fatal(err)
	}
	reader, err := Open(path, Options{ReadOnly: true, Timeout: timeout}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	// Readers share the lock.
	second, err := Open(path, Options{ReadOnly: true, Timeout: timeout}, nil)
	if err != nil {
		t.Errorf("a second read-only Open: %v", err)
	} else {
		_ = second.Close()
	}
	if _, err := Open(path, Options{Timeout: timeout}, nil); !errors.Is(err, ErrLocked) {
		t.Errorf("writable Open of a file a reader holds: %v, want ErrLocked", err)
	}
}

// TestOpenReadOnlyRefusesDamage: the quick checks run on a read-only open too.
func TestOpenReadOnlyRefusesDamage(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(empty, Options{ReadOnly: true}, nil); !errors.Is(err, ErrDamaged) {
		t.Errorf("empty file: %v, want ErrDamaged", err)
	}
	truncated := writeTestDB(t)
	info, err := os.Stat(truncated)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(truncated, info.Size()/2); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(truncated, Options{ReadOnly: true}, nil); !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("truncated file: %v, want ErrDamaged saying truncated", err)
	}
}

// TestSnapshot: the copy is a whole database with the same data that passes every check; an existing
// file is never replaced; nothing is left behind.
func TestSnapshot(t *testing.T) {
	path := writeTestDB(t)
	db, err := Open(path, Options{ReadOnly: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	dir := t.TempDir()
	copyPath := filepath.Join(dir, "copy.db")
	if err := Snapshot(db, copyPath); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if info, err := os.Stat(copyPath); err != nil || info.Mode().Perm() != FileMode {
		t.Fatalf("copy: %v, mode %v; want %v", err, info.Mode().Perm(), os.FileMode(FileMode))
	}
	if err := CheckFile(copyPath); err != nil {
		t.Errorf("CheckFile of the copy: %v", err)
	}
	cp, err := Open(copyPath, Options{ReadOnly: true, Check: true}, nil)
	if err != nil {
		t.Fatalf("open the copy: %v", err)
	}
	err = cp.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("b"))
		if b == nil {
			return errors.New("bucket b missing")
		}
		for i := range 100 {
			if got := b.Get([]byte{byte(i)}); !bytes.Equal(got, bytes.Repeat([]byte{byte(i)}, 100)) {
				return errors.New("a value differs")
			}
		}
		return nil
	})
	_ = cp.Close()
	if err != nil {
		t.Errorf("the copy: %v", err)
	}

	before, _ := os.ReadFile(copyPath)
	if err := Snapshot(db, copyPath); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Snapshot over an existing file: %v, want fs.ErrExist", err)
	}
	if after, _ := os.ReadFile(copyPath); !bytes.Equal(before, after) {
		t.Error("a failed Snapshot changed the existing file")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("the folder holds %d entries, want only the copy (a temporary file left?)", len(entries))
	}
}

// writeTestDBWithFreelist writes a database as bbolt's defaults (and gantry before it stopped syncing
// the freelist) do: with a freelist page, and some pages on it.
func writeTestDBWithFreelist(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 { // each rewrite frees the pages of the one before
		err = db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			for k := range 100 {
				if err := b.Put([]byte{byte(k)}, bytes.Repeat([]byte{byte(i)}, 100)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestFreelistIsNotSynced: Open's commits write no freelist page (it is rebuilt when the file
// opens), and a file that has one, from an older gantry, opens, takes writes, keeps its data and
// stops writing a freelist.
func TestFreelistIsNotSynced(t *testing.T) {
	if m := metaOf(t, writeTestDB(t)); m.freelist != noFreelist {
		t.Errorf("a database written by Open has a freelist page (%d)", m.freelist)
	}

	path := writeTestDBWithFreelist(t)
	if m := metaOf(t, path); m.freelist == noFreelist {
		t.Fatal("the legacy file has no freelist page; the test would prove nothing")
	}
	for round := range 2 {
		db, err := Open(path, Options{Check: true}, nil)
		if err != nil {
			t.Fatalf("round %d: Open: %v", round, err)
		}
		err = db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("b"))
			if got := b.Get([]byte{7}); !bytes.Equal(got, bytes.Repeat([]byte{byte(19 + round)}, 100)) {
				t.Errorf("round %d: value = %x…, the last write was lost", round, got[:min(4, len(got))])
			}
			for k := range 100 {
				if err := b.Put([]byte{byte(k)}, bytes.Repeat([]byte{byte(20 + round)}, 100)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if err := CheckFile(path); err != nil {
			t.Fatalf("round %d: CheckFile: %v", round, err)
		}
		if m := metaOf(t, path); m.freelist != noFreelist {
			t.Errorf("round %d: still writes a freelist page (%d)", round, m.freelist)
		}
	}
}
