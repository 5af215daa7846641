package secrets_test

import (
	"testing"

	"github.com/gantry-dev/gantry/services/secrets"
	"github.com/gantry-dev/gantry/services/secrets/storetest"
)

// TestBoltStoreConformance runs the Store conformance suite on the bbolt adapter; after each passing
// subtest the store's cleanup also checks that every bbolt index agrees with the records.
func TestBoltStoreConformance(t *testing.T) {
	storetest.Run(t, secrets.NewBoltTestStore)
}
