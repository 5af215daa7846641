package secrets

import (
	"testing"

	"go.uber.org/zap"
)

// The package's internal tests run the service over a real store, but cannot import an adapter
// (the adapters, packages store/boltstore and store/etcdstore, import this package: a cycle). The
// external test package, which can, hands its opener over here (teststore_test.go) when the test
// binary starts, before any test runs.

// openTestStore opens an empty store in dir, logging to logger; set by SetTestStoreOpener.
var openTestStore func(dir string, logger *zap.Logger) (Store, error)

// SetTestStoreOpener sets the opener of the store the internal tests use. It exists in test builds
// only, for the external test package.
func SetTestStoreOpener(open func(dir string, logger *zap.Logger) (Store, error)) {
	openTestStore = open
}

// newTestStoreIn opens an empty store in dir, closed at cleanup (a second Close of a store a test
// closed itself is harmless).
func newTestStoreIn(t testing.TB, dir string, logger *zap.Logger) Store {
	t.Helper()
	if openTestStore == nil {
		t.Fatal("no test store opener: SetTestStoreOpener was not called (teststore_test.go)")
	}
	s, err := openTestStore(dir, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newTestStore opens an empty store in t.TempDir(), closed at cleanup.
func newTestStore(t testing.TB) Store {
	t.Helper()
	return newTestStoreIn(t, t.TempDir(), zap.NewNop())
}
