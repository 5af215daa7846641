package boltstore

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/boltdb"
)

// OpenReadOnly opens an existing store file for the offline tools (gantry check, gantry
// backup). Unlike Open it never creates, upgrades or writes the file (every write fails), and
// it does not check the schema version: SchemaVersion reports it. It fails with boltdb.ErrLocked
// (wrapped) while a gantry has the file open, and with boltdb.ErrDamaged for a file that fails the
// quick checks (or, with opts.Check, the consistency check).
func OpenReadOnly(path string, opts boltdb.Options, logger *zap.Logger) (*Store, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	opts.ReadOnly = true
	db, err := boltdb.Open(path, opts, logger)
	if err != nil {
		return nil, err
	}
	// Writes go through a batcher like any store's, where bbolt refuses them (ErrDatabaseReadOnly).
	return &Store{db: db, batcher: boltdb.NewBatcher(db), logger: logger}, nil
}

// CheckConsistency reads the whole file (see boltdb.CheckConsistency).
func (s *Store) CheckConsistency() error { return boltdb.CheckConsistency(s.db) }

// SchemaVersion returns the layout version of the file, and an error saying what to do when this
// build cannot serve it: a newer version, or a file without gantry's buckets. Versions 1 and 2 are
// fine: gantry upgrades them at its next start.
// A bbolt panic or memory fault on a damaged page is contained, as in every read of the store.
func (s *Store) SchemaVersion() (int, error) {
	if s.failed.Load() {
		return 0, errBoltFailed
	}
	v, err := func() (v int, err error) {
		defer s.contain(&err)
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		return boltdb.ReadSchemaVersion(s.db, boltMeta)
	}()
	switch {
	case err != nil:
		return 0, err
	case v == 0:
		return 0, fmt.Errorf("secrets: %s: no schema version: not a gantry store (wrong -data-dir?), or a store whose first start was cut short", s.db.Path())
	case v > boltSchemaVersion:
		return v, fmt.Errorf("secrets: %s: schema version %d was %w (this one supports version %d); use the newer gantry", s.db.Path(), v, boltdb.ErrNewerSchema, boltSchemaVersion)
	}
	return v, nil
}

// Snapshot writes a consistent copy of the store file to path, a new file (see boltdb.Snapshot).
func (s *Store) Snapshot(path string) error {
	if s.failed.Load() {
		return errBoltFailed
	}
	return boltdb.Snapshot(s.db, path)
}

// WriteBackup writes a consistent copy of the store file to w while the store goes on serving: one
// read transaction, bbolt's Tx.WriteTo, so the copy is the database as of the last commit before the
// call, with every write acknowledged before it. start is called first with the copy's length in
// bytes; an error from it or from w ends the copy (and the transaction). It returns the bytes
// written.
//
// The read transaction lasts as long as w takes: writers go on committing meanwhile, but one that
// has to grow the file's memory map waits for the transaction to end, so w must not stall (a slow
// network client is bounded by its caller's deadline).
func (s *Store) WriteBackup(start func(size int64) error, w io.Writer) (n int64, err error) {
	// A copy that cannot begin within the stall timeout is refused as a read is; once begun it runs
	// to its end, bounded by the caller's w.
	err = s.view(context.Background(), func(tx *bolt.Tx) error {
		if err := start(tx.Size()); err != nil {
			return err
		}
		var err error
		n, err = tx.WriteTo(w)
		return err
	})
	return n, err
}
