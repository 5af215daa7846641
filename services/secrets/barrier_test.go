package secrets

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"maps"
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/credpair"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// barrierTestService is a Service over a real store (the bbolt adapter, see store_helpers_test.go) and a
// local keyring, with authentication off (the anonymous principal may do everything under the
// default ACL).
func barrierTestService(t *testing.T) (*Service, store.Store) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Auth.UseAuth = false
	return keyringTestService(t, cfg, logtest.New(t))
}

// keyringTestService is a Service with cfg over a real store and a local keyring, logging to logger.
func keyringTestService(t *testing.T, cfg Config, logger *zap.Logger) (*Service, store.Store) {
	t.Helper()
	return keyringTestServiceOver(t, cfg, logger, func(s store.Store) store.Store { return s })
}

// keyringTestServiceOver is keyringTestService with the store the service uses wrapped by wrap; it
// returns the store unwrapped.
func keyringTestServiceOver(t *testing.T, cfg Config, logger *zap.Logger, wrap func(store.Store) store.Store) (*Service, store.Store) {
	t.Helper()
	dir := t.TempDir()
	keyring, err := kms.OpenKeyring(filepath.Join(dir, "keyring.json"), logger)
	if err != nil {
		t.Fatal(err)
	}
	store := newTestStoreIn(t, dir, logger)
	svc, err := NewService(context.Background(), cfg, Deps{Store: wrap(store), KMS: keyring, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return svc, store
}

// rolledBackStore serves the current record of one credential with the sealed pairs and wrapped key
// of another revision, as a write to the store's file (or etcd keys) would; zero: no change.
type rolledBackStore struct {
	store.Store
	id                 string
	sealed, wrappedKey []byte
}

func (s *rolledBackStore) tamper(rec *store.CredentialRecord) {
	if s.id != "" && rec != nil && rec.ID == s.id {
		rec.SealedPairs, rec.WrappedKey = s.sealed, s.wrappedKey
	}
}

func (s *rolledBackStore) GetCredential(ctx context.Context, id string) (*store.CredentialRecord, error) {
	rec, err := s.Store.GetCredential(ctx, id)
	s.tamper(rec)
	return rec, err
}

func (s *rolledBackStore) GetCredentials(ctx context.Context, ids []string) ([]*store.CredentialRecord, error) {
	recs, err := s.Store.GetCredentials(ctx, ids)
	for _, rec := range recs {
		s.tamper(rec)
	}
	return recs, err
}

// TestOldRevisionCopiedOverCurrentDoesNotDecrypt is the rollback a database-level attacker would try:
// the sealed pairs and wrapped key of revision 1 copied over the current record (revision 2). The
// blob must not open as revision 2, so the read fails as undecryptable instead of serving the old
// secret.
func TestOldRevisionCopiedOverCurrentDoesNotDecrypt(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Auth.UseAuth = false
	rolled := &rolledBackStore{}
	svc, store := keyringTestServiceOver(t, cfg, logtest.New(t), func(s store.Store) store.Store { rolled.Store = s; return rolled })
	ctx := WithPrincipal(context.Background(), AnonymousPrincipal)
	name, doc := "db", "the database"
	created, err := svc.CreateCredential(ctx, CredentialInput{Name: &name, Documentation: &doc, Pairs: map[string]any{"password": "old"}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.Record.ID
	if _, err := svc.UpdateCredential(ctx, id, CredentialInput{Pairs: map[string]any{"password": "new"}}); err != nil {
		t.Fatal(err)
	}

	// Serve the current record with revision 1's ciphertext, as a write to the store would.
	old, err := store.GetCredentialRevision(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if cur, err := store.GetCredential(ctx, id); err != nil || cur.Revision != 2 {
		t.Fatalf("current record: %v, %v; want revision 2", cur, err)
	}
	rolled.sealed, rolled.wrappedKey, rolled.id = old.SealedPairs, old.WrappedKey, id
	svc.barrier.keys = newKeyCache(svc.cfg.DataKeyCacheSize) // a fresh process: no cached data keys

	got, err := svc.GetCredential(ctx, id, false)
	if !errors.Is(err, errUndecryptable) {
		var pairs any
		if got != nil {
			pairs = got.Pairs
		}
		t.Fatalf("GetCredential after rollback of the ciphertext: pairs %v, error %v; want %v", pairs, err, errUndecryptable)
	}
}

// sealV1 seals pairs as builds before format v2 did (format byte 0x01, AAD binding the id only), so
// the test can check that data written by them still opens.
func sealV1(t *testing.T, b *barrier, credentialID string, pairs map[string]string) (sealed, wrappedKey []byte) {
	t.Helper()
	dataKey, wrapped, err := b.kms.GenerateDataKey(context.Background(), b.masterKey, encryptionContext(credentialID))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := json.Marshal(pairs)
	if err != nil {
		t.Fatal(err)
	}
	aead, err := newAEAD(dataKey)
	if err != nil {
		t.Fatal(err)
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		t.Fatal(err)
	}
	out := append([]byte{sealedFormatV1}, nonce...)
	return aead.Seal(out, nonce, plain, []byte("gantry/credential_pairs/v1/"+credentialID)), wrapped
}

func TestBarrierFormats(t *testing.T) {
	ctx := context.Background()
	keyring, err := kms.OpenKeyring(filepath.Join(t.TempDir(), "keyring.json"), logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	b := newBarrier(keyring, kms.AliasMaster, 8)
	pairs := map[string]string{"password": "hunter2"}

	t.Run("v1 blob still opens, at any revision", func(t *testing.T) {
		sealed, wrapped := sealV1(t, b, "cred1", pairs)
		for _, revision := range []int32{1, 7} {
			got, err := b.open(ctx, "cred1", revision, sealed, wrapped)
			if err != nil || !maps.Equal(got, credpair.Strings(pairs)) {
				t.Errorf("open v1 blob as revision %d = %v, %v; want %v", revision, got, err, pairs)
			}
		}
		if _, err := b.open(ctx, "cred2", 1, sealed, wrapped); !errors.Is(err, errUndecryptable) {
			t.Errorf("v1 blob opened for another credential: error %v, want %v", err, errUndecryptable)
		}
	})

	t.Run("values keep their JSON type; records of strings read as strings", func(t *testing.T) {
		port, _ := credpair.Num("5432")
		typed := credpair.Map{"password": credpair.Str("hunter2"), "port": port, "port_text": credpair.Str("5432"),
			"debug": credpair.Boolean(true), "maybe": credpair.NullValue()}
		sealed, wrapped, err := b.seal(ctx, "cred1", 2, typed)
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.open(ctx, "cred1", 2, sealed, wrapped)
		if err != nil || !maps.Equal(got, typed) {
			t.Fatalf("typed pairs read back as %v, %v", got, err)
		}
		if got["port"] == got["port_text"] {
			t.Error("5432 and \"5432\" compare equal")
		}
		legacy, legacyKey := sealV1(t, b, "cred1", map[string]string{"port": "5432", "debug": "true"})
		if got, err := b.open(ctx, "cred1", 1, legacy, legacyKey); err != nil || got["port"] != credpair.Str("5432") || got["debug"] != credpair.Str("true") {
			t.Errorf("a record of strings reads as %v, %v; want the strings it holds", got, err)
		}
	})

	t.Run("v2 blob opens only as its revision", func(t *testing.T) {
		sealed, wrapped, err := b.seal(ctx, "cred1", 3, credpair.Strings(pairs))
		if err != nil {
			t.Fatal(err)
		}
		if sealed[0] != sealedFormatV2 {
			t.Fatalf("new blob has format %#x, want %#x", sealed[0], sealedFormatV2)
		}
		if got, err := b.open(ctx, "cred1", 3, sealed, wrapped); err != nil || !maps.Equal(got, credpair.Strings(pairs)) {
			t.Errorf("open as revision 3 = %v, %v; want %v", got, err, pairs)
		}
		for _, revision := range []int32{1, 2, 4, 30, -3} {
			if got, err := b.open(ctx, "cred1", revision, sealed, wrapped); !errors.Is(err, errUndecryptable) {
				t.Errorf("open a revision 3 blob as revision %d = %v, %v; want %v", revision, got, err, errUndecryptable)
			}
		}
		if _, err := b.open(ctx, "cred2", 3, sealed, wrapped); !errors.Is(err, errUndecryptable) {
			t.Errorf("v2 blob opened for another credential: error %v, want %v", err, errUndecryptable)
		}
		// Relabelled as v1 (whose AAD lacks the revision), the blob must not open either.
		downgraded := append([]byte{sealedFormatV1}, sealed[1:]...)
		if _, err := b.open(ctx, "cred1", 3, downgraded, wrapped); !errors.Is(err, errUndecryptable) {
			t.Errorf("v2 blob relabelled v1 opened: error %v, want %v", err, errUndecryptable)
		}
	})
}

// TestRevisionBoundPairsThroughHistory runs the readers of old revisions over a credential whose
// revision 1 is a v1 blob (an existing database) and later revisions v2: get, update, revert (which
// seals the old pairs again for the new revision), diff and the revision listing all work.
func TestRevisionBoundPairsThroughHistory(t *testing.T) {
	svc, st := barrierTestService(t)
	ctx := WithPrincipal(context.Background(), AnonymousPrincipal)
	id := "0123456789abcdef0123456789abcdef"
	sealed, wrapped := sealV1(t, svc.barrier, id, map[string]string{"password": "one"})
	doc := "legacy"
	err := st.PutCredential(ctx, &store.CredentialRecord{ID: id, Revision: 1, Name: "legacy", Enabled: true, Documentation: &doc,
		Keys: []string{"password"}, SealedPairs: sealed, WrappedKey: wrapped, ModifiedDate: svc.now(), ModifiedBy: "someone"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantPairs := func(what string, want string) {
		t.Helper()
		got, err := svc.GetCredential(ctx, id, false)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got.Pairs["password"] != credpair.Str(want) {
			t.Errorf("%s: pairs %v, want password=%s", what, got.Pairs, want)
		}
	}
	wantPairs("legacy v1 record", "one")
	if _, err := svc.UpdateCredential(ctx, id, CredentialInput{Pairs: map[string]any{"password": "two"}}); err != nil {
		t.Fatal(err)
	}
	wantPairs("after update", "two")
	reverted, err := svc.RevertCredential(ctx, id, 1, 0, ChangeIntent{})
	if err != nil {
		t.Fatal(err)
	}
	if reverted.Record.Revision != 3 {
		t.Errorf("revert wrote revision %d, want 3", reverted.Record.Revision)
	}
	wantPairs("after revert to revision 1", "one")
	cur, err := st.GetCredential(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if cur.SealedPairs[0] != sealedFormatV2 {
		t.Errorf("reverted revision has format %#x, want %#x (sealed again)", cur.SealedPairs[0], sealedFormatV2)
	}
	for _, pair := range [][2]int32{{1, 2}, {2, 3}, {1, 3}} {
		d, err := svc.DiffCredential(ctx, id, pair[0], pair[1])
		if err != nil {
			t.Fatalf("diff %d..%d: %v", pair[0], pair[1], err)
		}
		changed := d.Pairs != nil
		if want := pair != [2]int32{1, 3}; changed != want {
			t.Errorf("diff %d..%d: pairs changed %v, want %v", pair[0], pair[1], changed, want)
		}
	}
	revisions, _, err := svc.ListCredentialRevisions(ctx, id, nil, "")
	if err != nil || len(revisions) != 3 {
		t.Fatalf("revisions = %d, %v; want 3", len(revisions), err)
	}
	if _, err := svc.RevertCredential(ctx, id, 2, 0, ChangeIntent{}); err != nil {
		t.Fatalf("revert to the v2 revision 2: %v", err)
	}
	wantPairs("after revert to revision 2", "two")
}
