package secrets

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/stats"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// rewrapFixture is a service over a real store and a local keyring the test rotates, with credentials
// of several revisions each and the store's key-check value recorded.
type rewrapFixture struct {
	dir   string
	svc   *Service
	store store.Store
	ring  *kms.Keyring
	stats *stats.Store
	ids   []string
}

func newRewrapFixture(t *testing.T, credentials, revisions int) *rewrapFixture {
	t.Helper()
	ctx := WithPrincipal(context.Background(), AnonymousPrincipal)
	dir := t.TempDir()
	logger := logtest.New(t)
	ring, err := kms.OpenKeyring(filepath.Join(dir, "keyring.json"), logger)
	if err != nil {
		t.Fatal(err)
	}
	store := newTestStoreIn(t, dir, logger)
	cfg := DefaultConfig()
	cfg.Auth.UseAuth = false
	st := stats.New()
	svc, err := NewService(context.Background(), cfg, Deps{Store: store, KMS: ring, Logger: logger, Stats: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	if err := VerifyKeys(ctx, store, ring, cfg.KMSMasterKey); err != nil {
		t.Fatal(err)
	}
	f := &rewrapFixture{dir: dir, svc: svc, store: store, ring: ring, stats: st}
	for i := range credentials {
		name := fmt.Sprintf("cred-%02d", i)
		c, err := svc.CreateCredential(ctx, CredentialInput{Name: &name, Documentation: &name, Pairs: map[string]any{"v": "1"}})
		if err != nil {
			t.Fatal(err)
		}
		for r := 2; r <= revisions; r++ {
			if _, err := svc.UpdateCredential(ctx, c.Record.ID, CredentialInput{Pairs: map[string]any{"v": fmt.Sprint(r)}}); err != nil {
				t.Fatal(err)
			}
		}
		f.ids = append(f.ids, c.Record.ID)
	}
	return f
}

// pass runs a whole rewrap pass in batches of batch, summing the results.
func (f *rewrapFixture) pass(t *testing.T, batch int, dryRun bool) RewrapResult {
	t.Helper()
	total := RewrapResult{ByKeyVersion: map[string]int{}}
	token := ""
	for range 1000 {
		res, err := f.svc.Rewrap(context.Background(), RewrapOptions{PageToken: token, Limit: batch, DryRun: dryRun})
		if err != nil {
			t.Fatal(err)
		}
		total.Scanned += res.Scanned
		total.Rewrapped += res.Rewrapped
		total.Current += res.Current
		total.Changed += res.Changed
		total.Undecryptable += res.Undecryptable
		total.UndecryptableIDs = append(total.UndecryptableIDs, res.UndecryptableIDs...)
		for v, n := range res.ByKeyVersion {
			total.ByKeyVersion[v] += n
		}
		total.Active = res.Active
		if res.KeyCheck != "" {
			total.KeyCheck = res.KeyCheck
		}
		if token = res.NextPageToken; token == "" {
			return total
		}
	}
	t.Fatal("the pass did not end")
	return total
}

// openEveryRevision decrypts every revision of every credential with a cold key cache, as a fresh
// process would, and checks the pairs.
func (f *rewrapFixture) openEveryRevision(t *testing.T, revisions int) {
	t.Helper()
	ctx := context.Background()
	b := newBarrier(f.ring, f.svc.cfg.KMSMasterKey, 16)
	for _, id := range f.ids {
		for r := 1; r <= revisions; r++ {
			rec, err := f.store.GetCredentialRevision(ctx, id, int32(r))
			if err != nil {
				t.Fatal(err)
			}
			pairs, err := b.open(ctx, id, int32(r), rec.SealedPairs, rec.WrappedKey)
			if err != nil || pairs["v"].Text() != fmt.Sprint(r) {
				t.Fatalf("%s revision %d: %v, %v", id, r, pairs, err)
			}
		}
	}
}

func TestRewrapMovesEveryRevisionToTheActiveVersion(t *testing.T) {
	const creds, revs = 7, 3
	f := newRewrapFixture(t, creds, revs)
	ctx := context.Background()
	v1, err := f.ring.ActiveKeyVersion(ctx, kms.AliasMaster)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.pass(t, 4, false); got.Rewrapped != 0 || got.Current != creds*revs || got.KeyCheck != "current" {
		t.Fatalf("a pass before any rotation: %+v", got)
	}
	if _, err := f.ring.RotateKey(ctx, kms.AliasMaster); err != nil {
		t.Fatal(err)
	}
	v2, _ := f.ring.ActiveKeyVersion(ctx, kms.AliasMaster)
	before, err := f.store.GetCredentialRevision(ctx, f.ids[0], 1)
	if err != nil {
		t.Fatal(err)
	}

	dry := f.pass(t, 4, true)
	if dry.Rewrapped != creds*revs || dry.Current != 0 || dry.KeyCheck != "rewrapped" || dry.Active != v2.String() {
		t.Fatalf("dry run: %+v", dry)
	}
	if after, _ := f.store.GetCredentialRevision(ctx, f.ids[0], 1); string(after.WrappedKey) != string(before.WrappedKey) {
		t.Fatal("a dry run changed a wrapped key")
	}
	if counts, err := f.svc.ScanSealed(ctx); err != nil || counts[v1.String()] != creds*revs {
		t.Fatalf("ScanSealed before the rewrap = %v, %v", counts, err)
	}
	if g := f.stats.Gauge(statSealedNotActive).Value(); g != creds*revs {
		t.Fatalf("%s = %d, want %d", statSealedNotActive, g, creds*revs)
	}

	got := f.pass(t, 4, false)
	if got.Rewrapped != creds*revs || got.Changed != 0 || got.Undecryptable != 0 || got.KeyCheck != "rewrapped" || got.ByKeyVersion[v2.String()] != creds*revs {
		t.Fatalf("rewrap pass: %+v", got)
	}
	after, err := f.store.GetCredentialRevision(ctx, f.ids[0], 1)
	if err != nil {
		t.Fatal(err)
	}
	if string(after.SealedPairs) != string(before.SealedPairs) || after.ModifiedDate != before.ModifiedDate || after.Name != before.Name {
		t.Fatal("the rewrap changed more than the wrapped key")
	}
	if revisions, _, err := f.store.ListCredentialRevisions(ctx, f.ids[0], store.Page{}); err != nil || len(revisions) != revs {
		t.Fatalf("revisions after the rewrap: %d, %v; want %d (none created)", len(revisions), err, revs)
	}
	if again := f.pass(t, 1000, false); again.Rewrapped != 0 || again.Current != creds*revs || again.KeyCheck != "current" {
		t.Fatalf("a second pass: %+v", again)
	}

	// Now version 1 can go: every revision, and the key check, still open.
	if err := f.ring.RetireKeyVersion(ctx, kms.AliasMaster, int(v1.Version)); err != nil {
		t.Fatal(err)
	}
	if err := f.ring.DestroyKeyVersion(ctx, kms.AliasMaster, int(v1.Version)); err != nil {
		t.Fatal(err)
	}
	f.openEveryRevision(t, revs)
	if err := VerifyKeys(ctx, f.store, f.ring, f.svc.cfg.KMSMasterKey); err != nil {
		t.Fatalf("the store's keys after retiring version 1: %v", err)
	}
	if _, err := f.svc.ScanSealed(ctx); err != nil {
		t.Fatal(err)
	}
	if g := f.stats.Gauge(statSealedNotActive).Value(); g != 0 {
		t.Fatalf("%s = %d after the rewrap, want 0", statSealedNotActive, g)
	}
	if g := f.stats.Gauge(sealedStatName(v1.String())).Value(); g != 0 {
		t.Fatalf("the retired version's gauge kept %d", g)
	}
	if g := f.stats.Gauge(sealedStatName(v2.String())).Value(); g != creds*revs {
		t.Fatalf("the active version's gauge = %d, want %d", g, creds*revs)
	}
}

// A revision whose data key no key of the keyring opens (wrapped under a version the keyring does not
// hold) is counted and named, never fatal to the pass, and left as it is.
func TestRewrapReportsUndecryptableRevisions(t *testing.T) {
	f := newRewrapFixture(t, 3, 2)
	ctx := context.Background()
	rec, err := f.store.GetCredentialRevision(ctx, f.ids[1], 1)
	if err != nil {
		t.Fatal(err)
	}
	// The header names version 9 of the master key, which the keyring never had.
	damaged := append([]byte(nil), rec.WrappedKey...)
	hdr := 4 + 1 + int(damaged[4])
	damaged[hdr-1] = 9
	if err := f.store.RewrapCredential(ctx, f.ids[1], 1, rec.WrappedKey, damaged); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ring.RotateKey(ctx, kms.AliasMaster); err != nil {
		t.Fatal(err)
	}
	f.svc.barrier.keys = newKeyCache(16) // a fresh process: nothing cached
	got := f.pass(t, 2, false)
	want := f.ids[1] + " revision 1"
	if got.Undecryptable != 1 || len(got.UndecryptableIDs) != 1 || got.UndecryptableIDs[0] != want || got.Rewrapped != 5 {
		t.Fatalf("pass over a damaged revision: %+v; want 1 undecryptable (%s), 5 rewrapped", got, want)
	}
	if after, _ := f.store.GetCredentialRevision(ctx, f.ids[1], 1); string(after.WrappedKey) != string(damaged) {
		t.Fatal("the undecryptable revision was changed")
	}
}

// Retiring the version that wraps the key-check value before a rewrap makes the pass fail at once: the
// next start would refuse the store, which is what the operator must hear about.
func TestRewrapFailsWhenTheKeyCheckDoesNotOpen(t *testing.T) {
	f := newRewrapFixture(t, 1, 1)
	ctx := context.Background()
	if _, err := f.ring.RotateKey(ctx, kms.AliasMaster); err != nil {
		t.Fatal(err)
	}
	if err := f.ring.RetireKeyVersion(ctx, kms.AliasMaster, 1); err != nil {
		t.Fatal(err)
	}
	if err := f.ring.DestroyKeyVersion(ctx, kms.AliasMaster, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Rewrap(ctx, RewrapOptions{}); err == nil || !strings.Contains(err.Error(), "key-check value") {
		t.Fatalf("a pass whose key-check value no longer opens: %v", err)
	}
}

func TestRewrapRefusesBadOptions(t *testing.T) {
	f := newRewrapFixture(t, 1, 1)
	for _, opts := range []RewrapOptions{{Limit: -1}, {Limit: MaxRewrapBatch + 1}, {PageToken: "not-a-token"}} {
		if _, err := f.svc.Rewrap(context.Background(), opts); !isInvalid(err) {
			t.Errorf("Rewrap(%+v) = %v, want bad input", opts, err)
		}
	}
}

func isInvalid(err error) bool {
	_, ok := err.(*invalidError)
	return ok
}

// ReloadKeys takes a keyring changed on disk by another process, and refuses one that would no longer
// open the store's key-check value.
func TestReloadKeys(t *testing.T) {
	f := newRewrapFixture(t, 1, 1)
	ctx := context.Background()
	path := filepath.Join(f.dir, "keyring.json")
	other, err := kms.LoadKeyring(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.StageKey(ctx, kms.AliasMaster); err != nil {
		t.Fatal(err)
	}
	if changed, err := f.svc.ReloadKeys(ctx); err != nil || !changed {
		t.Fatalf("ReloadKeys after a staged version = %v, %v", changed, err)
	}
	if err := other.ActivateKey(ctx, kms.AliasMaster, 0); err != nil {
		t.Fatal(err)
	}
	if err := other.RetireKeyVersion(ctx, kms.AliasMaster, 1); err != nil {
		t.Fatal(err)
	}
	if err := other.DestroyKeyVersion(ctx, kms.AliasMaster, 1); err != nil {
		t.Fatal(err)
	}
	changed, err := f.svc.ReloadKeys(ctx)
	if changed || err == nil || !strings.Contains(err.Error(), "key-check value") {
		t.Fatalf("ReloadKeys of a keyring that lost the key-check value's version = %v, %v", changed, err)
	}
	if active, _ := f.ring.ActiveKeyVersion(ctx, kms.AliasMaster); active.Version != 1 {
		t.Fatalf("the refused keyring was taken: active version %d", active.Version)
	}
}
