package secrets_test

import (
	"testing"

	"github.com/gantry-dev/gantry/services/secrets"
	"github.com/gantry-dev/gantry/services/secrets/storetest"
)

// TestEtcdStoreConformance runs the Store conformance suite on the etcd adapter (the package's
// embedded etcd member, a fresh prefix per subtest); after each passing subtest the store's cleanup
// also checks that every etcd index agrees with the records.
func TestEtcdStoreConformance(t *testing.T) {
	storetest.Run(t, secrets.NewEtcdTestStore)
}
