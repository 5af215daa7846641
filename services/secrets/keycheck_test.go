package secrets

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/storetest"
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
func putWrappedCred(t *testing.T, s store.Store, ring *kms.Keyring, id string) {
	t.Helper()
	_, wrapped, err := ring.GenerateDataKey(context.Background(), kms.AliasMaster, encryptionContext(id))
	if err != nil {
		t.Fatal(err)
	}
	rec := storetest.NewCred(id, id, 1)
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
	s := newTestStore(t)

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
	if _, err := s.KeyCheck(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("CheckKeys wrote a key-check value: %v", err)
	}
	if err := VerifyKeys(ctx, s, other, kms.AliasMaster); !errors.Is(err, ErrKeysDoNotMatch) {
		t.Errorf("VerifyKeys with another keyring: %v, want ErrKeysDoNotMatch", err)
	}
	if _, err := s.KeyCheck(ctx); !errors.Is(err, store.ErrNotFound) {
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
