package boltdb

import (
	"fmt"
	"io"

	bolt "go.etcd.io/bbolt"

	"github.com/gantry-dev/gantry/pkg/secretfile"
)

// Snapshot writes a consistent copy of db to path, a new file (mode FileMode): bbolt's Tx.WriteTo
// inside one read transaction, so the copy is the database as of one commit even while db is being
// written, and it is a valid bbolt file of its own. The file appears whole or not at all
// (see secretfile.WriteNew), and an existing path is never replaced.
func Snapshot(db *bolt.DB, path string) error {
	err := secretfile.WriteNew(path, func(w io.Writer) error {
		return db.View(func(tx *bolt.Tx) error {
			_, err := tx.WriteTo(w)
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("boltdb: copy %s to %s: %w", db.Path(), path, err)
	}
	return nil
}
