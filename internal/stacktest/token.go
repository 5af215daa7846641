package stacktest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kmsauth"
)

// Token mints a kmsauth token for from, of userType "user" or "service", with the local keyring of
// dataDir (the default local configuration), as `gantry token` does: version 2, to "gantry", signed
// with the user or the service authentication key, valid for lifetime.
func Token(t testing.TB, dataDir, from, userType string, lifetime time.Duration) string {
	t.Helper()
	ring, err := kms.OpenKeyring(filepath.Join(dataDir, "keyring.json"), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	key := kms.AliasAuth
	if userType == "user" {
		key = kms.AliasUserAuth
	}
	tok, err := kmsauth.Generate(context.Background(), ring, key, kmsauth.Username{Version: 2, UserType: userType, From: from}, "gantry", lifetime, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
