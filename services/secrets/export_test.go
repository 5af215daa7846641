package secrets

import "testing"

// Exports for the external test package secrets_test only (they exist in test builds, not in the
// package's API). The conformance suite is package storetest, which imports this package, so only
// the external test package can run it; these give it the adapters' test constructors, which keep
// checking the adapters' internals: at cleanup, after each conformance subtest that passed, every
// bbolt or etcd index is verified against the records (boltCheckIndexes, etcdCheckIndexes).

// NewBoltTestStore is newBoltTestStore: an empty bbolt store in t.TempDir(), indexes checked and
// store closed at cleanup.
func NewBoltTestStore(t *testing.T) Store { return newBoltTestStore(t) }

// NewEtcdTestStore is newEtcdTestStore with default options: an empty store on a fresh prefix of the
// package's shared embedded etcd member, indexes checked and store closed at cleanup.
func NewEtcdTestStore(t *testing.T) Store { return newEtcdTestStore(t, nil) }
