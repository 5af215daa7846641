package secrets

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/pkg/kms"
)

func newTestKeyring(t *testing.T) *kms.Keyring {
	t.Helper()
	ring, err := kms.OpenKeyring(filepath.Join(t.TempDir(), "keyring.json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return ring
}

// putWrappedCred stores a credential whose data key is wrapped under ring, as the service does.
func putWrappedCred(t *testing.T, s Store, ring *kms.Keyring, id string) {
	t.Helper()
	_, wrapped, err := ring.GenerateDataKey(context.Background(), kms.AliasMaster, encryptionContext(id))
	if err != nil {
		t.Fatal(err)
	}
	rec := confCred(id, id, 1)
	rec.WrappedKey = wrapped
	if err := s.PutCredential(context.Background(), rec, 0); err != nil {
		t.Fatal(err)
	}
}

// TestCheckKeys: CheckKeys proves the keys on what the store holds and never writes; VerifyKeys
// records the key-check value CheckKeys then uses; another keyring is ErrKeysDoNotMatch either way.
func TestCheckKeys(t *testing.T) {
	ctx := context.Background()
	ring, other := newTestKeyring(t), newTestKeyring(t)
	s := newBoltTestStore(t)

	if proof, err := CheckKeys(ctx, s, ring); err != nil || proof != ProofNothing {
		t.Errorf("empty store: %q, %v; want %q", proof, err, ProofNothing)
	}
	putWrappedCred(t, s, ring, "c1")
	if proof, err := CheckKeys(ctx, s, ring); err != nil || proof != ProofCredential {
		t.Errorf("store without a key-check value: %q, %v; want %q", proof, err, ProofCredential)
	}
	if _, err := CheckKeys(ctx, s, other); !errors.Is(err, ErrKeysDoNotMatch) {
		t.Errorf("another keyring, credential: %v, want ErrKeysDoNotMatch", err)
	}
	if _, err := s.KeyCheck(ctx); !errors.Is(err, ErrNotFound) {
		t.Fatalf("CheckKeys wrote a key-check value: %v", err)
	}
	if err := VerifyKeys(ctx, s, other, kms.AliasMaster); !errors.Is(err, ErrKeysDoNotMatch) {
		t.Errorf("VerifyKeys with another keyring: %v, want ErrKeysDoNotMatch", err)
	}
	if _, err := s.KeyCheck(ctx); !errors.Is(err, ErrNotFound) {
		t.Fatalf("VerifyKeys with the wrong keys recorded a key-check value: %v", err)
	}
	if err := VerifyKeys(ctx, s, ring, kms.AliasMaster); err != nil {
		t.Fatalf("VerifyKeys: %v", err)
	}
	if proof, err := CheckKeys(ctx, s, ring); err != nil || proof != ProofKeyCheck {
		t.Errorf("after VerifyKeys: %q, %v; want %q", proof, err, ProofKeyCheck)
	}
	if _, err := CheckKeys(ctx, s, other); !errors.Is(err, ErrKeysDoNotMatch) {
		t.Errorf("another keyring, key-check value: %v, want ErrKeysDoNotMatch", err)
	}
}

// TestOpenBoltStoreReadOnly: the offline open reads what a store wrote, reports its schema version,
// refuses writes, never creates a file, and is locked out while the store is open for writing.
func TestOpenBoltStoreReadOnly(t *testing.T) {
	ctx := context.Background()
	ring := newTestKeyring(t)
	path := filepath.Join(t.TempDir(), "secrets.db")
	s, err := OpenBoltStore(path, boltdb.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	putWrappedCred(t, s, ring, "c1")
	if _, err := OpenBoltStoreReadOnly(path, boltdb.Options{Timeout: 50 * time.Millisecond}, nil); !errors.Is(err, boltdb.ErrLocked) {
		t.Errorf("read-only open of a store in use: %v, want boltdb.ErrLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	ro, err := OpenBoltStoreReadOnly(path, boltdb.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if v, err := ro.SchemaVersion(); err != nil || v != boltSchemaVersion {
		t.Errorf("SchemaVersion = %d, %v; want %d", v, err, boltSchemaVersion)
	}
	if err := ro.CheckConsistency(); err != nil {
		t.Errorf("CheckConsistency: %v", err)
	}
	if rec, err := ro.GetCredential(ctx, "c1"); err != nil || rec.ID != "c1" {
		t.Errorf("GetCredential: %v, %v", rec, err)
	}
	if _, err := ro.InitKeyCheck(ctx, []byte("x")); err == nil {
		t.Error("a write through the read-only store succeeded")
	}
	missing := filepath.Join(t.TempDir(), "secrets.db")
	if _, err := OpenBoltStoreReadOnly(missing, boltdb.Options{}, nil); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the read-only open created the file: %v", err)
	}
}
