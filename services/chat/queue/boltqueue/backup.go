package boltqueue

import (
	"io"

	bolt "go.etcd.io/bbolt"
)

// WriteBackup writes a consistent copy of the queue file to w while the queue goes on serving: one
// read transaction, bbolt's Tx.WriteTo, so the copy is the queue as of the last commit before the
// call, its dead letters included (the copy gantry backup takes of a running gantry, whose queue file
// is locked). start is called first with the copy's length in bytes; an error from it or from w ends
// the copy. It returns the bytes written.
func (q *Queue) WriteBackup(start func(size int64) error, w io.Writer) (n int64, err error) {
	err = q.db.View(func(tx *bolt.Tx) error {
		if err := start(tx.Size()); err != nil {
			return err
		}
		var err error
		n, err = tx.WriteTo(w)
		return err
	})
	return n, err
}
