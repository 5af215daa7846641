package boltstore

import (
	"testing"

	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/storetest"
)

// TestConformance runs the Store conformance suite on the bbolt adapter; after each passing subtest
// the store's cleanup also checks that every bbolt index agrees with the records.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return newBoltTestStore(t) })
}
