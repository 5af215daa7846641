package secrets_test

import (
	"path/filepath"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/services/secrets"
	"github.com/gantry-dev/gantry/services/secrets/store/boltstore"
)

// The internal tests of package secrets (the service over a real store) run on the bbolt adapter,
// which only this external test package can import; see SetTestStoreOpener.
func init() {
	secrets.SetTestStoreOpener(func(dir string, logger *zap.Logger) (secrets.Store, error) {
		return boltstore.Open(filepath.Join(dir, "secrets.db"), boltdb.Options{NoSync: true}, logger)
	})
}
