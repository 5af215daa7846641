package kms_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
)

// copyKeyring copies a keyring file as an operator distributes it to another replica.
func copyKeyring(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	tmp := to + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, to); err != nil {
		t.Fatal(err)
	}
}

// The fleet procedure: stage a version on one keyring, distribute it (the other replica reloads and
// decrypts the new version before anyone encrypts with it), activate, distribute, retire the old.
func TestKeyringStageActivateRetireAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	ec := map[string]string{"id": "c1"}
	adminPath := filepath.Join(t.TempDir(), "keyring.json")
	admin, err := kms.OpenKeyring(adminPath, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	replicaPath := filepath.Join(t.TempDir(), "keyring.json")
	copyKeyring(t, adminPath, replicaPath)
	replica, err := kms.OpenKeyring(replicaPath, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	v1blob, err := replica.Encrypt(ctx, kms.AliasMaster, []byte("one"), ec)
	if err != nil {
		t.Fatal(err)
	}

	v, err := admin.StageKey(ctx, kms.AliasMaster)
	if err != nil || v != 2 {
		t.Fatalf("StageKey = %d, %v; want 2", v, err)
	}
	active, err := admin.ActiveKeyVersion(ctx, kms.AliasMaster)
	if err != nil || active.Version != 1 {
		t.Fatalf("after staging, active = %v, %v; want version 1", active, err)
	}
	if blob, _ := admin.Encrypt(ctx, kms.AliasMaster, []byte("x"), ec); blobVersion(t, blob) != 1 {
		t.Fatalf("a staged version encrypted: version %d", blobVersion(t, blob))
	}
	// Reopening keeps the staged state (it is in the file, not only in memory).
	reopened, err := kms.LoadKeyring(adminPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := reopened.ActiveKeyVersion(ctx, kms.AliasMaster); a.Version != 1 {
		t.Fatalf("reopened staged keyring encrypts with version %d, want 1", a.Version)
	}

	copyKeyring(t, adminPath, replicaPath)
	if changed, err := replica.Reload(nil); err != nil || !changed {
		t.Fatalf("Reload = %v, %v; want changed", changed, err)
	}
	if changed, err := replica.Reload(nil); err != nil || changed {
		t.Fatalf("second Reload = %v, %v; want unchanged", changed, err)
	}

	if err := admin.ActivateKey(ctx, kms.AliasMaster, 0); err != nil {
		t.Fatal(err)
	}
	v2blob, err := admin.Encrypt(ctx, kms.AliasMaster, []byte("two"), ec)
	if err != nil || blobVersion(t, v2blob) != 2 {
		t.Fatalf("after ActivateKey: %v, version %d", err, blobVersion(t, v2blob))
	}
	// The replica has not been given the activated file yet, but it decrypts version 2 already.
	if got, _, err := replica.Decrypt(ctx, v2blob, ec); err != nil || string(got) != "two" {
		t.Fatalf("staged replica decrypts the new version: %q, %v", got, err)
	}
	if err := admin.RetireKeyVersion(ctx, kms.AliasMaster, 2); err == nil || !strings.Contains(err.Error(), "active version") {
		t.Fatalf("retiring the active version: %v", err)
	}
	if err := admin.RetireKeyVersion(ctx, kms.AliasMaster, 1); err != nil {
		t.Fatal(err)
	}
	if err := admin.RetireKeyVersion(ctx, kms.AliasMaster, 1); err == nil {
		t.Fatal("retired version 1 twice")
	}
	if err := admin.ActivateKey(ctx, kms.AliasMaster, 1); err == nil || !strings.Contains(err.Error(), "retired") {
		t.Fatalf("activating a retired version: %v", err)
	}
	// Retired: still decrypts, never encrypts; a wrong retire is taken back without loss.
	if got, _, err := admin.Decrypt(ctx, v1blob, ec); err != nil || string(got) != "one" {
		t.Fatalf("a retired version no longer decrypts: %q, %v", got, err)
	}
	if err := admin.RestoreKeyVersion(ctx, kms.AliasMaster, 1); err != nil {
		t.Fatal(err)
	}
	if err := admin.RestoreKeyVersion(ctx, kms.AliasMaster, 1); err == nil {
		t.Fatal("restored version 1 twice")
	}
	if err := admin.DestroyKeyVersion(ctx, kms.AliasMaster, 1); err == nil || !strings.Contains(err.Error(), "retire it first") {
		t.Fatalf("destroying a version that is not retired: %v", err)
	}
	if err := admin.RetireKeyVersion(ctx, kms.AliasMaster, 1); err != nil {
		t.Fatal(err)
	}
	if err := admin.DestroyKeyVersion(ctx, kms.AliasMaster, 1); err != nil {
		t.Fatal(err)
	}
	copyKeyring(t, adminPath, replicaPath)
	if _, err := replica.Reload(nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := replica.Decrypt(ctx, v1blob, ec); !errors.Is(err, kms.ErrKeyNotFound) {
		t.Fatalf("a destroyed version still decrypts: %v", err)
	}
	if kv, err := replica.CiphertextKeyVersion(v1blob); err != nil || kv.Version != 1 {
		t.Fatalf("CiphertextKeyVersion of a retired version's blob = %v, %v", kv, err)
	}
	for _, ks := range replica.Keys() {
		if len(ks.Aliases) == 1 && ks.Aliases[0] == kms.AliasMaster && (ks.Active != 2 || len(ks.Versions) != 1 || ks.Versions[0] != 2) {
			t.Fatalf("master key after retiring = %+v", ks)
		}
	}
}

// A reload never drops the keys in use: a damaged file or a different keyring is refused whole.
func TestKeyringReloadRefusesWhatWouldLoseKeys(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keyring.json")
	k, err := kms.OpenKeyring(path, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	blob, err := k.Encrypt(ctx, kms.AliasMaster, []byte("kept"), nil)
	if err != nil {
		t.Fatal(err)
	}
	otherPath := filepath.Join(t.TempDir(), "keyring.json")
	if _, err := kms.OpenKeyring(otherPath, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		write func()
		want  string
	}{
		{"not JSON", func() { _ = os.WriteFile(path, []byte("{"), 0o600) }, "not valid JSON"},
		{"open to others", func() { copyKeyring(t, otherPath, path); _ = os.Chmod(path, 0o644) }, "mode"},
		{"another keyring", func() { copyKeyring(t, otherPath, path) }, "no longer holds key"},
		{"missing", func() { _ = os.Remove(path) }, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.write()
			changed, err := k.Reload(nil)
			if err == nil || changed || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Reload = %v, %v; want an error containing %q", changed, err, tc.want)
			}
			if got, _, err := k.Decrypt(ctx, blob, nil); err != nil || string(got) != "kept" {
				t.Fatalf("after a refused reload: %q, %v", got, err)
			}
		})
	}
}

func TestKeyringActivateUnknownVersion(t *testing.T) {
	ctx := context.Background()
	k, err := kms.OpenKeyring(filepath.Join(t.TempDir(), "keyring.json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []int{-1, 2, 7} {
		if err := k.ActivateKey(ctx, kms.AliasMaster, v); err == nil {
			t.Errorf("ActivateKey(%d) accepted", v)
		}
	}
	if err := k.RetireKeyVersion(ctx, kms.AliasMaster, 0); err == nil {
		t.Error("RetireKeyVersion(0) accepted")
	}
	if _, err := k.CiphertextKeyVersion([]byte("GKR1")); !errors.Is(err, kms.ErrInvalidCiphertext) {
		t.Errorf("CiphertextKeyVersion of a truncated blob: %v", err)
	}
}

// A reload whose check fails (gantry: the store's key-check value does not open) keeps the keys in use.
func TestKeyringReloadCheckRefuses(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keyring.json")
	k, err := kms.OpenKeyring(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	blob, err := k.Encrypt(ctx, kms.AliasMaster, []byte("v1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := kms.LoadKeyring(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RotateKey(ctx, kms.AliasMaster); err != nil {
		t.Fatal(err)
	}
	if err := admin.RetireKeyVersion(ctx, kms.AliasMaster, 1); err != nil {
		t.Fatal(err)
	}
	if err := admin.DestroyKeyVersion(ctx, kms.AliasMaster, 1); err != nil {
		t.Fatal(err)
	}
	check := func(p kms.Provider) error {
		_, _, err := p.Decrypt(ctx, blob, nil)
		return err
	}
	if changed, err := k.Reload(check); changed || !errors.Is(err, kms.ErrKeyNotFound) {
		t.Fatalf("Reload with a failing check = %v, %v", changed, err)
	}
	if _, _, err := k.Decrypt(ctx, blob, nil); err != nil {
		t.Fatalf("the keys in use were replaced: %v", err)
	}
}
