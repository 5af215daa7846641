package chaos

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kmsauth"
)

// loopbackConfig runs every role on loopback :0 ports with its data in dataDir.
func loopbackConfig(dataDir string) stack.Config {
	cfg := stack.DefaultConfig()
	cfg.DataDir = dataDir
	cfg.ShutdownTimeout = 2 * time.Second
	cfg.Secrets.Listen = "127.0.0.1:0"
	cfg.Chat.Listen = "127.0.0.1:0"
	cfg.Gateway.Listen = "127.0.0.1:0"
	cfg.Gateway.AdminListen = "127.0.0.1:0"
	cfg.Gateway.AdminGRPCListen = "127.0.0.1:0"
	cfg.Gateway.AccessLog = "off" // make soak runs -v: a line per request would bury its table
	cfg.AuditStdout = io.Discard  // the same for the audit trail's record per write
	// The crash and soak loads write as fast as they can as one user, to stress the store; the
	// per-principal write rate limit would turn most of their writes into 429s.
	cfg.Secrets.Limits.WriteRate = 0
	return cfg
}

// mintToken mints a kmsauth token for from with the keyring of dataDir, valid for 50 minutes (under
// the default AUTH_TOKEN_MAX_LIFETIME of an hour).
func mintToken(t testing.TB, dataDir, from, userType string) string {
	t.Helper()
	ring, err := kms.OpenKeyring(filepath.Join(dataDir, "keyring.json"), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	key := kms.AliasAuth
	if userType == "user" {
		key = kms.AliasUserAuth
	}
	tok, err := kmsauth.Generate(context.Background(), ring, key, kmsauth.Username{Version: 2, UserType: userType, From: from}, "gantry", 50*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
