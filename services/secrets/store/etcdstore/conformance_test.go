package etcdstore

import (
	"testing"

	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/storetest"
)

// TestConformance runs the Store conformance suite on the etcd adapter (the package's embedded etcd
// member, a fresh prefix per subtest); after each passing subtest the store's cleanup also checks
// that every etcd index agrees with the records.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return newEtcdTestStore(t, nil) })
}
