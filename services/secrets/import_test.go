package secrets

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/credpair"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// TestImporterKeepsIDsRevisionsAndTheBarrier: an imported credential keeps the given id, revisions and
// dates; each revision's pairs open only as that revision (the barrier's v2 binding), a revision can
// only follow the one before (no gap, no overwrite), and the service reads it as any other.
func TestImporterKeepsIDsRevisionsAndTheBarrier(t *testing.T) {
	ctx := context.Background()
	st := newTestStore(t)
	ring := testKeyring(t)
	im := NewImporter(st, ring, kms.AliasMaster, 8, zap.NewNop())
	id := "0123456789abcdef0123456789abcdef"
	date := time.Date(2021, 5, 6, 7, 8, 9, 123456000, time.UTC)
	rec := func(rev int32) *store.CredentialRecord {
		return &store.CredentialRecord{ID: id, Revision: rev, Name: "db", Enabled: true, ModifiedDate: date.Add(time.Duration(rev) * time.Hour), ModifiedBy: "alice"}
	}
	if err := im.PutCredentialRevision(ctx, rec(2), credpair.Strings(map[string]string{"k": "v2"})); !errors.Is(err, store.ErrRevisionConflict) {
		t.Fatalf("revision 2 before 1: %v, want ErrRevisionConflict", err)
	}
	if err := im.PutCredentialRevision(ctx, rec(1), credpair.Strings(map[string]string{"k": "v1"})); err != nil {
		t.Fatal(err)
	}
	if err := im.PutCredentialRevision(ctx, rec(2), credpair.Strings(map[string]string{"k": "v2"})); err != nil {
		t.Fatal(err)
	}
	if err := im.PutCredentialRevision(ctx, rec(2), credpair.Strings(map[string]string{"k": "again"})); !errors.Is(err, store.ErrRevisionConflict) {
		t.Fatalf("revision 2 twice: %v, want ErrRevisionConflict", err)
	}
	if n, err := im.CurrentCredentialRevision(ctx, id); err != nil || n != 2 {
		t.Fatalf("current revision %d, %v", n, err)
	}
	got, pairs, err := im.CredentialRevision(ctx, id, 1)
	if err != nil || !maps.Equal(pairs, credpair.Strings(map[string]string{"k": "v1"})) || !got.ModifiedDate.Equal(date.Add(time.Hour)) || got.ModifiedBy != "alice" {
		t.Fatalf("revision 1 = %+v %v, %v", got, pairs, err)
	}
	// Revision 1's sealed pairs copied over revision 2 do not open: they are bound to revision 1.
	b := newBarrier(ring, kms.AliasMaster, 8)
	if _, err := b.open(ctx, id, 2, got.SealedPairs, got.WrappedKey); !errors.Is(err, errUndecryptable) {
		t.Fatalf("revision 1's blob opened as revision 2: %v", err)
	}
	for _, bad := range []*store.CredentialRecord{{ID: "", Revision: 1, Name: "x"}, {ID: "a", Revision: 0, Name: "x"}, {ID: "a", Revision: 1, Name: " "}} {
		if err := im.PutCredentialRevision(ctx, bad, credpair.Strings(map[string]string{})); err == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
	// Services: a mapping of an unknown credential is refused, blind ids are kept.
	if err := im.PutServiceRevision(ctx, &store.ServiceRecord{ID: "api", Revision: 1, Credentials: []string{"nope"}}); err == nil {
		t.Fatal("a mapping of an unknown credential was accepted")
	}
	if err := im.PutServiceRevision(ctx, &store.ServiceRecord{ID: "api", Revision: 1, Enabled: true, Credentials: []string{id}, BlindCredentials: []string{"blind1"}, ModifiedDate: date}); err != nil {
		t.Fatal(err)
	}
	svc, err := im.ServiceRevision(ctx, "api", 1)
	if err != nil || len(svc.BlindCredentials) != 1 || !svc.ModifiedDate.Equal(date) {
		t.Fatalf("service = %+v, %v", svc, err)
	}
}
