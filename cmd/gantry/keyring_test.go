package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/kms"
)

// TestKeyringRotate: after a rotation, data keys wrapped before it still unwrap, and new ones use the
// new version.
func TestKeyringRotate(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	ring, err := kms.OpenKeyring(filepath.Join(dir, "keyring.json"), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ec := map[string]string{"id": "c1"}
	oldKey, oldWrapped, err := ring.GenerateDataKey(ctx, kms.AliasMaster, ec)
	if err != nil {
		t.Fatal(err)
	}
	// A copy of the keyring as it was before the rotation.
	before, err := os.ReadFile(filepath.Join(dir, "keyring.json"))
	if err != nil {
		t.Fatal(err)
	}
	oldDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(oldDir, "keyring.json"), before, 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := runKeyring([]string{"rotate", "--data-dir", dir}, &out, &errOut); code != 0 {
		t.Fatalf("rotate: %d %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), kms.AliasMaster+": now at version 2") {
		t.Errorf("output %q", out.String())
	}
	ring, err = kms.OpenKeyring(filepath.Join(dir, "keyring.json"), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := ring.Decrypt(ctx, oldWrapped, ec); err != nil || !bytes.Equal(got, oldKey) {
		t.Fatalf("a data key wrapped before the rotation no longer unwraps: %v", err)
	}
	_, newWrapped, err := ring.GenerateDataKey(ctx, kms.AliasMaster, ec)
	if err != nil {
		t.Fatal(err)
	}
	oldRing, err := kms.OpenKeyring(filepath.Join(oldDir, "keyring.json"), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := oldRing.Decrypt(ctx, newWrapped, ec); !errors.Is(err, kms.ErrKeyNotFound) {
		t.Errorf("the keyring before the rotation unwraps a new data key (%v): the new version is not in use", err)
	}
	if code := runKeyring([]string{"rotate", "--data-dir", filepath.Join(dir, "nope")}, &out, &errOut); code != 1 {
		t.Errorf("rotating a missing keyring: exit %d, want 1", code)
	}
	if code := runKeyring(nil, &out, &errOut); code != 2 {
		t.Errorf("no subcommand: exit %d, want 2", code)
	}
}

// TestKeyringCreate: the explicit way to make a keyring (what compose's keyring-init runs) creates it
// once with mode 0600, keeps it on a second run, and lets gantry token mint with it.
func TestKeyringCreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	var out, errOut bytes.Buffer
	if code := runKeyring([]string{"create", "--data-dir", dir}, &out, &errOut); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errOut.String())
	}
	path := filepath.Join(dir, "keyring.json")
	first, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o600 {
		t.Errorf("keyring mode %v", info.Mode().Perm())
	}
	if code := runKeyring([]string{"create", "--data-dir", dir}, &out, &errOut); code != 0 {
		t.Fatalf("second create: exit %d: %s", code, errOut.String())
	}
	if again, _ := os.ReadFile(path); !bytes.Equal(first, again) {
		t.Error("a second create changed the keyring")
	}
	out.Reset()
	if code := runToken([]string{"--from", "alice", "--user-type", "user", "--data-dir", dir}, &out, &errOut); code != 0 || strings.TrimSpace(out.String()) == "" {
		t.Errorf("token after create: exit %d, %q, %s", code, out.String(), errOut.String())
	}
}
