package secrets

import "testing"

// Exports for the external test package secrets_test only (they exist in test builds, not in the
// package's API). The conformance suite is package storetest, which imports this package, so only
// the external test package can run it; these give it the bbolt adapter's test constructor, which keeps
// checking the adapter's internals: at cleanup, after each conformance subtest that passed, every
// bbolt index is verified against the records (boltCheckIndexes).

// NewBoltTestStore is newBoltTestStore: an empty bbolt store in t.TempDir(), indexes checked and
// store closed at cleanup.
func NewBoltTestStore(t *testing.T) Store { return newBoltTestStore(t) }
