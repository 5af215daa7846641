package secrets

import (
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/boltstore"
)

// The package's internal tests run the service over a real store: the bbolt adapter, which imports
// only the contract (package store), so this package's tests can import it.

// newTestStoreIn opens an empty bbolt store in dir, logging to logger, closed at cleanup (a second
// Close of a store a test closed itself is harmless).
func newTestStoreIn(t testing.TB, dir string, logger *zap.Logger) store.Store {
	t.Helper()
	s, err := boltstore.Open(filepath.Join(dir, "secrets.db"), boltdb.Options{NoSync: true}, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newTestStore opens an empty store in t.TempDir(), closed at cleanup.
func newTestStore(t testing.TB) store.Store {
	t.Helper()
	return newTestStoreIn(t, t.TempDir(), zap.NewNop())
}
