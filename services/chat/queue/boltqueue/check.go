package boltqueue

import (
	"fmt"
	"time"

	"github.com/gantry-dev/gantry/pkg/boltdb"
)

// CheckFile checks, read-only, the queue file at path the way Open would meet it, for the offline
// gantry check: the quick checks of the file, with consistency the whole-file consistency check, and a
// schema version this build serves. It never creates or writes the file, and fails with
// boltdb.ErrLocked (wrapped) while a gantry holds it. It returns what passed.
func CheckFile(path string, consistency bool, lockTimeout time.Duration) (string, error) {
	db, err := boltdb.Open(path, boltdb.Options{ReadOnly: true, Check: consistency, Timeout: lockTimeout}, nil)
	if err != nil {
		return "", err
	}
	defer db.Close()
	v, err := boltdb.ReadSchemaVersion(db, bucketMeta)
	switch {
	case err != nil:
		return "", err
	case v != schemaVersion:
		// EnsureSchema refuses any other version, a missing one included (a file with buckets).
		return "", fmt.Errorf("chat queue %s: schema version %d, this gantry serves version %d", path, v, schemaVersion)
	}
	if consistency {
		return fmt.Sprintf("schema version %d; every key and page read", v), nil
	}
	return fmt.Sprintf("schema version %d (consistency not checked: -no-consistency)", v), nil
}
