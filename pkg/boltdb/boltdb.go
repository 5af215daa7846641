// Package boltdb is gantry's plumbing for bbolt, the embedded key/value store every single-node
// service keeps its data in. It knows no service: it opens the file the way the architecture wants
// (mode 0600, a bounded wait for the file lock instead of a hang), keeps a schema version in a meta
// bucket so a binary never reads a layout it does not understand, and copies values out of
// transactions.
//
// Typical use by a service adapter:
//
//	db, err := boltdb.Open(path, opts, logger)
//	...
//	if err := boltdb.EnsureSchema(db, []byte("meta"), 1); err != nil { db.Close(); return err }
//
// bbolt values and keys are only valid while their transaction is open; anything kept after
// View/Update returns must go through Copy (or be decoded into fresh memory).
package boltdb

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"go.uber.org/zap"
)

// FileMode is the permission of a database file the package creates. An existing file keeps its mode.
const FileMode = 0o600

// DefaultTimeout is how long Open waits for the file lock when Options.Timeout is 0.
const DefaultTimeout = time.Second

// SchemaVersionKey is the key, inside the meta bucket given to EnsureSchema, that holds the schema
// version as a decimal number.
const SchemaVersionKey = "schema_version"

var (
	// ErrLocked is returned (wrapped, with the path) by Open when another process — or another Open in
	// this one — holds the database file and the lock timeout has passed.
	ErrLocked = errors.New("database file is locked by another process")
	// ErrNeedsMigration is returned (wrapped) by EnsureSchema for a file with an older schema version.
	ErrNeedsMigration = errors.New("needs migration")
	// ErrNewerSchema is returned (wrapped) by EnsureSchema for a file with a newer schema version.
	ErrNewerSchema = errors.New("written by a newer gantry")
)

// Options tune Open. The zero value is the production setting.
type Options struct {
	// Timeout bounds the wait for the file lock; 0 means DefaultTimeout. A file that stays locked makes
	// Open fail with ErrLocked instead of blocking.
	Timeout time.Duration
	// NoSync skips fsync after each commit. Only for tests: a crash can lose or corrupt data.
	NoSync bool
	// Check runs CheckConsistency after opening an existing file (it reads the whole file). The quick
	// checks of CheckFile always run.
	Check bool
	// ReadOnly opens an existing file for reading only, for offline tools (gantry check, gantry
	// backup): the file is opened O_RDONLY and never created or written (Update fails), and bbolt takes
	// a shared lock, so Open fails with ErrLocked while a gantry holds the file for writing, and a
	// gantry starting meanwhile waits for the lock (and gives up after its own timeout).
	ReadOnly bool
}

// Open opens (or creates, with FileMode) the bbolt database at path. The parent directory must exist:
// creating it, with the right owner and mode, is the caller's job. An existing file keeps its mode, but
// one that other users can access is reported on logger (at error level; nil means no logging).
// bbolt's internal logger stays off: it is chatty and puts keys into its messages, and every failure
// it reports is returned as an error anyway.
func Open(path string, opts Options, logger *zap.Logger) (*bolt.DB, error) {
	if path == "" {
		return nil, errors.New("boltdb: open: empty path")
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("boltdb: open %s: negative lock timeout %s", path, opts.Timeout)
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	info, statErr := os.Stat(path)
	existed := statErr == nil
	if opts.ReadOnly && !existed {
		return nil, fmt.Errorf("boltdb: open %s read-only: %w", path, statErr)
	}
	if existed && info.Size() == 0 {
		// bbolt would make a new database of it: an empty file is a lost one, not a new one.
		return nil, fmt.Errorf("boltdb: %s: %w: the file is empty (0 bytes); restore it from a backup, or delete it to start with an empty database", path, ErrDamaged)
	}
	db, err := openContained(path, &bolt.Options{
		Timeout: timeout, NoSync: opts.NoSync, ReadOnly: opts.ReadOnly,
		// The freelist is not written at each commit but rebuilt by a scan when the file opens, as
		// etcd's backend does: writing it cost a commit more pages to sync than the data itself once
		// the history had freed a few thousand pages (a lone writer's commit took twice as long), and
		// the hashmap freelist keeps allocation cheap when it grows. A file written with a freelist
		// (by an older gantry) opens the same way and stops writing one.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("boltdb: open %s: %w (gave up after %s)", path, ErrLocked, timeout)
	}
	if errors.Is(err, ErrDamaged) {
		return nil, err
	}
	if errors.Is(err, bolterrors.ErrInvalid) || errors.Is(err, bolterrors.ErrVersionMismatch) || errors.Is(err, bolterrors.ErrChecksum) {
		return nil, fmt.Errorf("boltdb: open %s: %w: %w", path, ErrDamaged, err)
	}
	if err != nil {
		return nil, fmt.Errorf("boltdb: open %s: %w", path, err)
	}
	if existed {
		// Checked under bbolt's file lock, so no other process is writing the meta pages meanwhile.
		err := CheckFile(path)
		if err == nil && opts.Check {
			err = CheckConsistency(db)
		}
		if err != nil {
			_ = db.Close()
			return nil, err
		}
	}
	if info, err := os.Stat(path); err == nil && info.Mode().Perm()&^FileMode != 0 {
		logger.Named("boltdb").Error("database file is accessible to other users; it should be mode 0600",
			zap.String("path", path), zap.Stringer("mode", info.Mode().Perm()))
	}
	return db, nil
}

// openContained is bolt.Open with its panics and memory faults turned into ErrDamaged: bbolt reads
// the freelist page while opening and panics when that page is not one (a damaged file). The quick
// checks of CheckFile, when they find something, say more precisely what is wrong. (The file handle
// bbolt had opened stays open, with its lock, until the process exits: the process is refusing to
// start anyway.)
func openContained(path string, opts *bolt.Options) (db *bolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			db = nil
			if checkErr := CheckFile(path); checkErr != nil {
				err = checkErr
				return
			}
			err = fmt.Errorf("boltdb: %s: %w: opening it fails: %v", path, ErrDamaged, r)
		}
	}()
	return bolt.Open(path, FileMode, opts)
}

// EnsureSchema checks the schema version stored under SchemaVersionKey in bucket. A database without
// that bucket and without any other bucket is new: the bucket is created and want written. An older
// version fails with ErrNeedsMigration, a newer one with ErrNewerSchema, a database that has buckets
// but no version with an error too (it was not written by this code). want must be at least 1.
func EnsureSchema(db *bolt.DB, bucket []byte, want int) error {
	if want < 1 {
		return fmt.Errorf("boltdb: schema version %d: must be at least 1", want)
	}
	return db.Update(func(tx *bolt.Tx) error {
		have, err := readVersion(tx, db.Path(), bucket)
		if err != nil {
			return err
		}
		switch {
		case have == 0:
			foreign := false
			err := tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
				if string(name) != string(bucket) {
					foreign = true
				}
				return nil
			})
			if err != nil {
				return err
			}
			if foreign {
				return fmt.Errorf("boltdb: %s: has data but no schema version in bucket %q; not a gantry database?", db.Path(), bucket)
			}
			return writeVersion(tx, bucket, want)
		case have < want:
			return fmt.Errorf("boltdb: %s: schema version %d %w to version %d", db.Path(), have, ErrNeedsMigration, want)
		case have > want:
			return fmt.Errorf("boltdb: %s: schema version %d was %w (this one supports version %d)", db.Path(), have, ErrNewerSchema, want)
		}
		return nil
	})
}

// ReadSchemaVersion returns the schema version stored in bucket, 0 when there is none.
func ReadSchemaVersion(db *bolt.DB, bucket []byte) (int, error) {
	var v int
	err := db.View(func(tx *bolt.Tx) error {
		var err error
		v, err = readVersion(tx, db.Path(), bucket)
		return err
	})
	return v, err
}

// WriteSchemaVersion stores version in bucket (creating it), for a migration that has finished
// rewriting the data. version must be at least 1.
func WriteSchemaVersion(db *bolt.DB, bucket []byte, version int) error {
	if version < 1 {
		return fmt.Errorf("boltdb: schema version %d: must be at least 1", version)
	}
	return db.Update(func(tx *bolt.Tx) error { return writeVersion(tx, bucket, version) })
}

func readVersion(tx *bolt.Tx, path string, bucket []byte) (int, error) {
	b := tx.Bucket(bucket)
	if b == nil {
		return 0, nil
	}
	raw := b.Get([]byte(SchemaVersionKey))
	if raw == nil {
		return 0, nil
	}
	v, err := strconv.Atoi(string(raw))
	if err != nil || v < 1 {
		return 0, fmt.Errorf("boltdb: %s: corrupt schema version %q in bucket %q", path, raw, bucket)
	}
	return v, nil
}

func writeVersion(tx *bolt.Tx, bucket []byte, version int) error {
	b, err := tx.CreateBucketIfNotExists(bucket)
	if err != nil {
		return fmt.Errorf("boltdb: create bucket %q: %w", bucket, err)
	}
	return b.Put([]byte(SchemaVersionKey), []byte(strconv.Itoa(version)))
}

// Copy returns a copy of b that stays valid after the transaction b came from has ended. nil stays
// nil; an empty non-nil slice stays empty and non-nil.
func Copy(b []byte) []byte {
	if b == nil {
		return nil
	}
	c := make([]byte, len(b))
	copy(c, b)
	return c
}
