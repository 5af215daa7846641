package chaos

import (
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/internal/stacktest"
)

// loopbackConfig is stacktest.Config with its data in dataDir.
func loopbackConfig(t testing.TB, dataDir string) stack.Config {
	t.Helper()
	cfg := stacktest.Config(t)
	cfg.DataDir = dataDir
	// The crash and soak loads write as fast as they can as one user, to stress the store; the
	// per-principal write rate limit would turn most of their writes into 429s.
	cfg.Secrets.Limits.WriteRate = 0
	return cfg
}

// mintToken mints a kmsauth token for from with the keyring of dataDir, valid for 50 minutes (under
// the default AUTH_TOKEN_MAX_LIFETIME of an hour).
func mintToken(t testing.TB, dataDir, from, userType string) string {
	t.Helper()
	return stacktest.Token(t, dataDir, from, userType, 50*time.Minute)
}
