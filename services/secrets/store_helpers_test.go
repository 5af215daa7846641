package secrets

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

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

// A record fixture for the internal tests that write to a store directly (the key check). The
// conformance suite, package store/storetest, and the adapters' tests have their own.

// confT0 has nanoseconds and a non-UTC zone, so lossy time encodings show.
var confT0 = time.Date(2024, 3, 4, 5, 6, 7, 123456789, time.FixedZone("UTC+1", 3600))

func confTime(t time.Time) *time.Time { return &t }

// confCred returns a credential record with every field set except Documentation (nil) and
// LastDecryptedDate (nil).
func confCred(id, name string, revision int32) *store.CredentialRecord {
	return &store.CredentialRecord{
		ID:               id,
		Revision:         revision,
		Name:             name,
		Enabled:          true,
		Metadata:         map[string]string{"team": "infra", "rev": fmt.Sprint(revision)},
		Tags:             []string{"prod", "db"},
		Keys:             []string{"password", "user"},
		SealedPairs:      []byte{0x01, 0x00, 0xff, byte(revision)},
		WrappedKey:       []byte("wrapped-" + id),
		ModifiedDate:     confT0.Add(time.Duration(revision) * time.Minute),
		ModifiedBy:       "alice@example.com",
		LastRotationDate: confTime(confT0.Add(-time.Hour).UTC()),
	}
}
