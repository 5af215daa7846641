package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gantry-dev/gantry/services/secrets/store"
)

func testCreateAndGet(t *testing.T, s store.Store) {
	bare := &store.CredentialRecord{ID: "bare", Revision: 1, Name: "bare", ModifiedDate: T0}
	empty := &store.CredentialRecord{
		ID: "empty", Revision: 1, Name: "empty", Metadata: map[string]string{}, Tags: []string{},
		Keys: []string{}, SealedPairs: []byte{}, WrappedKey: []byte{}, ModifiedDate: T0,
	}
	documented := NewCred("documented", "documented", 1)
	documented.Documentation = StrPtr("rotate monthly")
	documented.LastDecryptedDate = TimePtr(T0.Add(time.Nanosecond))
	tests := []struct {
		name string
		rec  *store.CredentialRecord
	}{
		{"all fields, nil documentation", NewCred("full", "full", 1)},
		{"documentation and last decrypted set", documented},
		{"zero values", bare},
		{"empty collections", empty},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			PutCred(t, s, tt.rec, 0)
			CheckCred(t, s, tt.rec.ID, 0, tt.rec)
			CheckCred(t, s, tt.rec.ID, 1, tt.rec)
			got, err := s.GetCredential(context.Background(), tt.rec.ID)
			if err != nil {
				t.Fatal(err)
			}
			if (got.Documentation == nil) != (tt.rec.Documentation == nil) {
				t.Errorf("Documentation = %s, want %s", showPtr(got.Documentation), showPtr(tt.rec.Documentation))
			}
		})
	}

	t.Run("service", func(t *testing.T) {
		PutCred(t, s, NewCred("c1", "c1", 1), 0)
		noAccount := NewService("no-account", 1)
		noAccount.Account = nil
		for _, rec := range []*store.ServiceRecord{NewService("svc", 1, "c1"), noAccount} {
			PutService(t, s, rec, 0)
			CheckService(t, s, rec.ID, 0, rec)
			CheckService(t, s, rec.ID, 1, rec)
		}
	})
}

func testSecondRevision(t *testing.T, s store.Store) {
	rev1 := NewCred("c1", "first", 1)
	PutCred(t, s, rev1, 0)
	rev2 := NextCred(rev1)
	rev2.Name = "renamed"
	rev2.Enabled = false
	rev2.Documentation = StrPtr("now documented")
	rev2.Tags = nil
	rev2.LastRotationDate = nil
	PutCred(t, s, rev2, 1)

	CheckCred(t, s, "c1", 0, rev2)
	CheckCred(t, s, "c1", 2, rev2)
	CheckCred(t, s, "c1", 1, rev1) // history is immutable

	svc1 := NewService("svc", 1)
	PutService(t, s, svc1, 0)
	svc2 := CloneService(svc1)
	svc2.Revision = 2
	svc2.Credentials = []string{"c1"}
	svc2.Enabled = false
	PutService(t, s, svc2, 1)
	CheckService(t, s, "svc", 0, svc2)
	CheckService(t, s, "svc", 2, svc2)
	CheckService(t, s, "svc", 1, svc1)
}

func testNotFound(t *testing.T, s store.Store) {
	ctx := context.Background()
	PutCred(t, s, NewCred("c1", "c1", 1), 0)
	PutService(t, s, NewService("svc", 1), 0)
	tests := []struct {
		name string
		call func() error
	}{
		{"GetCredential unknown id", func() error { _, err := s.GetCredential(ctx, "nope"); return err }},
		{"GetCredential empty id", func() error { _, err := s.GetCredential(ctx, ""); return err }},
		{"GetCredentialRevision revision 0", func() error { _, err := s.GetCredentialRevision(ctx, "c1", 0); return err }},
		{"GetCredentialRevision revision 99", func() error { _, err := s.GetCredentialRevision(ctx, "c1", 99); return err }},
		{"GetCredentialRevision negative revision", func() error { _, err := s.GetCredentialRevision(ctx, "c1", -1); return err }},
		{"GetCredentialRevision unknown id", func() error { _, err := s.GetCredentialRevision(ctx, "nope", 1); return err }},
		{"ListCredentialRevisions unknown id", func() error { _, _, err := s.ListCredentialRevisions(ctx, "nope", store.Page{}); return err }},
		{"SetLastDecrypted unknown id", func() error { return s.SetLastDecrypted(ctx, "nope", 1, T0) }},
		{"RewrapCredential unknown id", func() error { return s.RewrapCredential(ctx, "nope", 1, []byte("k"), []byte("k2")) }},
		{"RewrapCredential revision 99", func() error { return s.RewrapCredential(ctx, "c1", 99, []byte("k"), []byte("k2")) }},
		{"ReplaceKeyCheck none recorded", func() error { return s.ReplaceKeyCheck(ctx, []byte("k"), []byte("k2")) }},
		{"ArchiveCredential unknown id", func() error { return s.ArchiveCredential(ctx, "nope", 1, T0) }},
		{"GetArchivedCredential unknown id", func() error { _, err := s.GetArchivedCredential(ctx, "nope"); return err }},
		{"GetArchivedCredential live credential", func() error { _, err := s.GetArchivedCredential(ctx, "c1"); return err }},
		{"GetService unknown id", func() error { _, err := s.GetService(ctx, "nope"); return err }},
		{"GetService credential id", func() error { _, err := s.GetService(ctx, "c1"); return err }},
		{"GetServiceRevision revision 0", func() error { _, err := s.GetServiceRevision(ctx, "svc", 0); return err }},
		{"GetServiceRevision revision 99", func() error { _, err := s.GetServiceRevision(ctx, "svc", 99); return err }},
		{"GetServiceRevision unknown id", func() error { _, err := s.GetServiceRevision(ctx, "nope", 1); return err }},
		{"ListServiceRevisions unknown id", func() error { _, _, err := s.ListServiceRevisions(ctx, "nope", store.Page{}); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("error = %v, want ErrNotFound", err)
			}
		})
	}
}

func testCredentialRevisionConflict(t *testing.T, s store.Store) {
	ctx := context.Background()
	rev1 := NewCred("c1", "c1", 1)
	rev2 := NextCred(rev1)
	PutCred(t, s, rev1, 0)
	PutCred(t, s, rev2, 1)
	with := func(id string, revision int32) *store.CredentialRecord {
		return NewCred(id, "conflict-"+id, revision)
	}
	tests := []struct {
		name string
		rec  *store.CredentialRecord
		prev int32
	}{
		{"create an existing id", with("c1", 1), 0},
		{"stale prevRevision", with("c1", 2), 1},
		{"prevRevision ahead of the store", with("c1", 4), 3},
		{"same revision again", with("c1", 2), 2},
		{"skipping a revision", with("c1", 4), 2},
		{"going back a revision", with("c1", 1), 2},
		{"create with prevRevision 1", with("new", 2), 1},
		{"create skipping revision 1", with("new", 2), 0},
		{"create with revision 0", with("new", 0), 0},
		{"negative prevRevision", with("new", 0), -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.PutCredential(ctx, tt.rec, tt.prev); !errors.Is(err, store.ErrRevisionConflict) {
				t.Fatalf("PutCredential(%s rev %d, prev %d) error = %v, want ErrRevisionConflict", tt.rec.ID, tt.rec.Revision, tt.prev, err)
			}
			CheckCred(t, s, "c1", 0, rev2)
			CheckCred(t, s, "c1", 1, rev1)
			if _, err := s.GetCredentialRevision(ctx, "c1", 3); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("GetCredentialRevision(c1, 3) error = %v, want ErrNotFound", err)
			}
			if _, err := s.GetCredential(ctx, "new"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("GetCredential(new) error = %v, want ErrNotFound", err)
			}
		})
	}
}

func testServiceRevisionConflict(t *testing.T, s store.Store) {
	ctx := context.Background()
	rev1 := NewService("svc", 1)
	rev2 := NewService("svc", 2)
	PutService(t, s, rev1, 0)
	PutService(t, s, rev2, 1)
	tests := []struct {
		name string
		rec  *store.ServiceRecord
		prev int32
	}{
		{"create an existing id", NewService("svc", 1), 0},
		{"stale prevRevision", NewService("svc", 2), 1},
		{"prevRevision ahead of the store", NewService("svc", 4), 3},
		{"skipping a revision", NewService("svc", 4), 2},
		{"create with prevRevision 1", NewService("new", 2), 1},
		{"create skipping revision 1", NewService("new", 2), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.rec.ModifiedBy = "conflicting writer"
			if err := s.PutService(ctx, tt.rec, tt.prev); !errors.Is(err, store.ErrRevisionConflict) {
				t.Fatalf("PutService(%s rev %d, prev %d) error = %v, want ErrRevisionConflict", tt.rec.ID, tt.rec.Revision, tt.prev, err)
			}
			CheckService(t, s, "svc", 0, rev2)
			CheckService(t, s, "svc", 1, rev1)
			if _, err := s.GetService(ctx, "new"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("GetService(new) error = %v, want ErrNotFound", err)
			}
		})
	}
}

// testReplaceServiceRevision: an older revision is rewritten as history only (it may name an id no
// current credential has); the current one moves the current record and the credential→services
// index with it and must map current credentials; a stored revision other than prev is a conflict.
func testReplaceServiceRevision(t *testing.T, s store.Store) {
	ctx := context.Background()
	PutCred(t, s, NewCred("c1", "one", 1), 0)
	PutCred(t, s, NewCred("c2", "two", 1), 0)
	rev1, rev2 := NewService("svc", 1, "c1"), NewService("svc", 2, "c1")
	PutService(t, s, rev1, 0)
	PutService(t, s, rev2, 1)

	history := CloneService(rev1)
	history.Credentials = []string{"c1", "archived-elsewhere"}
	if err := s.ReplaceServiceRevision(ctx, CloneService(history), CloneService(rev1)); err != nil {
		t.Fatalf("ReplaceServiceRevision(history) error = %v", err)
	}
	CheckService(t, s, "svc", 1, history)
	CheckService(t, s, "svc", 0, rev2)
	if err := s.ReplaceServiceRevision(ctx, CloneService(history), CloneService(rev1)); !errors.Is(err, store.ErrRevisionConflict) {
		t.Fatalf("ReplaceServiceRevision with a stale prev error = %v, want ErrRevisionConflict", err)
	}

	unknown := CloneService(rev2)
	unknown.Credentials = []string{"c1", "nope"}
	var unknownErr *store.UnknownCredentialsError
	if err := s.ReplaceServiceRevision(ctx, unknown, CloneService(rev2)); !errors.As(err, &unknownErr) {
		t.Fatalf("ReplaceServiceRevision(current, unknown credential) error = %v, want *UnknownCredentialsError", err)
	}
	current := CloneService(rev2)
	current.Credentials = []string{"c2"}
	if err := s.ReplaceServiceRevision(ctx, CloneService(current), CloneService(rev2)); err != nil {
		t.Fatalf("ReplaceServiceRevision(current) error = %v", err)
	}
	CheckService(t, s, "svc", 0, current)
	CheckService(t, s, "svc", 2, current)
	for id, want := range map[string][]string{"c1": nil, "c2": {"svc"}} {
		if got, err := s.CredentialServices(ctx, id); err != nil || !slices.Equal(got, want) {
			t.Errorf("CredentialServices(%s) = %v, %v; want %v", id, got, err, want)
		}
	}
	if err := s.ReplaceServiceRevision(ctx, NewService("svc", 3), NewService("svc", 3)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ReplaceServiceRevision(no such revision) error = %v, want ErrNotFound", err)
	}
	if err := s.ReplaceServiceRevision(ctx, NewService("none", 1), NewService("none", 1)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ReplaceServiceRevision(no such service) error = %v, want ErrNotFound", err)
	}
}

func testConcurrentWriters(t *testing.T, s store.Store) {
	const writers, attempts = 8, 20
	ctx := context.Background()
	PutCred(t, s, NewCred("c1", "shared", 1), 0)

	var successes, conflicts atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for range attempts {
				cur, err := s.GetCredential(ctx, "c1")
				if err != nil {
					errs <- fmt.Errorf("writer %d: GetCredential: %w", w, err)
					return
				}
				next := NextCred(cur)
				next.ModifiedBy = fmt.Sprintf("writer-%d", w)
				switch err := s.PutCredential(ctx, next, cur.Revision); {
				case err == nil:
					successes.Add(1)
				case errors.Is(err, store.ErrRevisionConflict):
					conflicts.Add(1) // reload and retry
				default:
					errs <- fmt.Errorf("writer %d: PutCredential: %w", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d successful writes, %d conflicts", successes.Load(), conflicts.Load())
	if successes.Load()+conflicts.Load() != writers*attempts {
		t.Errorf("successes + conflicts = %d, want %d", successes.Load()+conflicts.Load(), writers*attempts)
	}
	if successes.Load() == 0 {
		t.Fatal("no write succeeded")
	}

	want := 1 + successes.Load()
	cur, err := s.GetCredential(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if cur.Revision != want {
		t.Errorf("final revision = %d, want %d (1 + successful writes)", cur.Revision, want)
	}
	history, _, err := s.ListCredentialRevisions(ctx, "c1", store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	var got []int32
	for _, h := range history {
		got = append(got, h.Revision)
	}
	var wantRevs []int32
	for r := int32(1); r <= want; r++ {
		wantRevs = append(wantRevs, r)
	}
	if !slices.Equal(got, wantRevs) {
		t.Errorf("history revisions = %v, want 1..%d without gaps or duplicates", got, want)
	}
	last, err := s.GetCredentialRevision(ctx, "c1", want)
	if err != nil {
		t.Fatal(err)
	}
	if diff := DiffCred(last, cur); diff != "" {
		t.Errorf("history revision %d differs from the current record: %s", want, diff)
	}
}

func testNameUniqueness(t *testing.T, s store.Store) {
	ctx := context.Background()
	steps := []struct {
		name    string
		rec     *store.CredentialRecord
		prev    int32
		takenBy string // "" = success
	}{
		{"create alpha", NewCred("c1", "alpha", 1), 0, ""},
		{"another credential with the same name", NewCred("c2", "alpha", 1), 0, "c1"},
		{"the name in another case is another name", NewCred("c2", "Alpha", 1), 0, ""},
		{"keeping its own name", NewCred("c1", "alpha", 2), 1, ""},
		{"renaming into a taken name", NewCred("c1", "Alpha", 3), 2, "c2"},
		{"renaming frees the old name", NewCred("c1", "beta", 3), 2, ""},
		{"the freed name can be taken", NewCred("c3", "alpha", 1), 0, ""},
		{"the new name is taken", NewCred("c4", "beta", 1), 0, "c1"},
		{"the holder is the current one, not a former one", NewCred("c2", "alpha", 2), 1, "c3"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			before, beforeErr := s.GetCredential(ctx, st.rec.ID)
			err := s.PutCredential(ctx, CloneCred(st.rec), st.prev)
			if st.takenBy == "" {
				if err != nil {
					t.Fatalf("PutCredential(%s %q) error = %v, want nil", st.rec.ID, st.rec.Name, err)
				}
				CheckCred(t, s, st.rec.ID, 0, st.rec)
				return
			}
			var taken *store.NameTakenError
			if !errors.As(err, &taken) {
				t.Fatalf("PutCredential(%s %q) error = %v, want *NameTakenError", st.rec.ID, st.rec.Name, err)
			}
			if taken.ID != st.takenBy {
				t.Errorf("NameTakenError.ID = %q, want %q", taken.ID, st.takenBy)
			}
			after, afterErr := s.GetCredential(ctx, st.rec.ID)
			if beforeErr != nil {
				if !errors.Is(afterErr, store.ErrNotFound) {
					t.Errorf("after the refused create GetCredential(%s) error = %v, want ErrNotFound", st.rec.ID, afterErr)
				}
				return
			}
			if afterErr != nil {
				t.Fatal(afterErr)
			}
			if diff := DiffCred(after, before); diff != "" {
				t.Errorf("refused write changed the record: %s", diff)
			}
		})
	}
}

func testListCredentials(t *testing.T, s store.Store) {
	ctx := context.Background()
	// Case-insensitive order by name, then id: a@id-0, A@id-1, b, c.
	for _, c := range []struct{ id, name string }{
		{"id-3", "b"}, {"id-1", "A"}, {"id-4", "c"}, {"id-0", "a"},
	} {
		PutCred(t, s, NewCred(c.id, c.name, 1), 0)
	}
	// A later revision of id-3: the listing shows current records only.
	PutCred(t, s, NextCred(NewCred("id-3", "b", 1)), 1)
	want := []string{"id-0@1", "id-1@1", "id-3@2", "id-4@1"}

	list := func(p store.Page) ([]*store.CredentialRecord, string, error) { return s.ListCredentials(ctx, p) }
	for _, limit := range []int{0, 1, 2, 3, 4, 5} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			got, pages := walk(t, limit, list)
			if !slices.Equal(CredKeys(got), want) {
				t.Errorf("items = %v, want %v", CredKeys(got), want)
			}
			if wantPages := pageCount(len(want), limit); pages != wantPages {
				t.Errorf("pages = %d, want %d", pages, wantPages)
			}
			for _, rec := range got {
				CheckCred(t, s, rec.ID, 0, rec)
			}
		})
	}
	t.Run("names", func(t *testing.T) {
		got, _, err := s.ListCredentials(ctx, store.Page{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range got {
			names = append(names, r.Name)
		}
		if wantNames := []string{"a", "A", "b", "c"}; !slices.Equal(names, wantNames) {
			t.Errorf("names = %v, want %v", names, wantNames)
		}
	})
	t.Run("name prefix", func(t *testing.T) {
		PutCred(t, s, NewCred("id-5", "ab", 1), 0)
		PutCred(t, s, NewCred("id-6", "Abc", 1), 0)
		for _, limit := range []int{0, 1, 2, 3} {
			got, _ := walk(t, limit, func(p store.Page) ([]*store.CredentialRecord, string, error) {
				p.NamePrefix = "ab"
				return s.ListCredentials(ctx, p)
			})
			if want := []string{"id-5@1", "id-6@1"}; !slices.Equal(CredKeys(got), want) {
				t.Errorf("limit %d: prefix ab = %v, want %v", limit, CredKeys(got), want)
			}
		}
		if got, next, err := s.ListCredentials(ctx, store.Page{NamePrefix: "zz"}); err != nil || len(got) != 0 || next != "" {
			t.Errorf("prefix zz = %v, %q, %v; want nothing", CredKeys(got), next, err)
		}
	})
}

func testListAllCredentialRevisions(t *testing.T, s store.Store) {
	ctx := context.Background()
	b1 := NewCred("c1", "b", 1)
	d2 := NextCred(b1)
	d2.Name = "d" // revision 2 of c1 sorts under its own name
	PutCred(t, s, b1, 0)
	PutCred(t, s, d2, 1)
	PutCred(t, s, NewCred("c2", "A", 1), 0)
	PutCred(t, s, NewCred("c3", "c", 1), 0)
	c3r2 := NextCred(NewCred("c3", "c", 1))
	PutCred(t, s, c3r2, 1)
	want := []string{"c2@1", "c1@1", "c3@1", "c3@2", "c1@2"}

	list := func(p store.Page) ([]*store.CredentialRecord, string, error) {
		return s.ListAllCredentialRevisions(ctx, p)
	}
	for _, limit := range []int{0, 1, 2, 3, 5, 6} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			got, pages := walk(t, limit, list)
			if !slices.Equal(CredKeys(got), want) {
				t.Errorf("items = %v, want %v", CredKeys(got), want)
			}
			if wantPages := pageCount(len(want), limit); pages != wantPages {
				t.Errorf("pages = %d, want %d", pages, wantPages)
			}
		})
	}
	t.Run("records", func(t *testing.T) {
		got, _, err := s.ListAllCredentialRevisions(ctx, store.Page{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("got %d records, want %d", len(got), len(want))
		}
		for i, w := range []*store.CredentialRecord{nil, b1, nil, c3r2, d2} {
			if w == nil {
				continue
			}
			if diff := DiffCred(got[i], w); diff != "" {
				t.Errorf("item %d: %s", i, diff)
			}
		}
	})
}

func testListCredentialRevisions(t *testing.T, s store.Store) {
	ctx := context.Background()
	var revs []*store.CredentialRecord
	rec := NewCred("c1", "one", 1)
	for r := int32(1); r <= 5; r++ {
		PutCred(t, s, rec, r-1)
		revs = append(revs, rec)
		rec = NextCred(rec)
	}
	// Neighbours whose keys sort right before and after c1's.
	PutCred(t, s, NewCred("c", "c", 1), 0)
	PutCred(t, s, NewCred("c10", "c10", 1), 0)
	want := []string{"c1@1", "c1@2", "c1@3", "c1@4", "c1@5"}

	list := func(p store.Page) ([]*store.CredentialRecord, string, error) {
		return s.ListCredentialRevisions(ctx, "c1", p)
	}
	for _, limit := range []int{0, 1, 2, 5, 6} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			got, pages := walk(t, limit, list)
			if !slices.Equal(CredKeys(got), want) {
				t.Fatalf("items = %v, want %v", CredKeys(got), want)
			}
			if wantPages := pageCount(len(want), limit); pages != wantPages {
				t.Errorf("pages = %d, want %d", pages, wantPages)
			}
			for i := range got {
				if diff := DiffCred(got[i], revs[i]); diff != "" {
					t.Errorf("revision %d: %s", i+1, diff)
				}
			}
		})
	}
}

func testListServices(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, id := range []string{"svc-b", "SVC-a", "svc-c", "svc-A"} {
		PutService(t, s, NewService(id, 1), 0)
	}
	PutService(t, s, NewService("svc-b", 2), 1)
	// Lower-case id, then id: "SVC-a" < "svc-A" bytewise, both "svc-a" in lower case.
	want := []string{"SVC-a@1", "svc-A@1", "svc-b@2", "svc-c@1"}
	list := func(p store.Page) ([]*store.ServiceRecord, string, error) { return s.ListServices(ctx, p) }
	for _, limit := range []int{0, 1, 2, 3, 4, 5} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			got, pages := walk(t, limit, list)
			if !slices.Equal(ServiceKeys(got), want) {
				t.Errorf("items = %v, want %v", ServiceKeys(got), want)
			}
			if wantPages := pageCount(len(want), limit); pages != wantPages {
				t.Errorf("pages = %d, want %d", pages, wantPages)
			}
			for _, rec := range got {
				CheckService(t, s, rec.ID, 0, rec)
			}
		})
	}
}

func testListServiceRevisions(t *testing.T, s store.Store) {
	ctx := context.Background()
	var revs []*store.ServiceRecord
	for r := int32(1); r <= 4; r++ {
		rec := NewService("svc", r)
		rec.ModifiedBy = fmt.Sprintf("writer %d", r)
		PutService(t, s, rec, r-1)
		revs = append(revs, rec)
	}
	PutService(t, s, NewService("svc0", 1), 0)
	want := []string{"svc@1", "svc@2", "svc@3", "svc@4"}
	list := func(p store.Page) ([]*store.ServiceRecord, string, error) {
		return s.ListServiceRevisions(ctx, "svc", p)
	}
	for _, limit := range []int{0, 1, 3, 4, 5} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			got, pages := walk(t, limit, list)
			if !slices.Equal(ServiceKeys(got), want) {
				t.Fatalf("items = %v, want %v", ServiceKeys(got), want)
			}
			if wantPages := pageCount(len(want), limit); pages != wantPages {
				t.Errorf("pages = %d, want %d", pages, wantPages)
			}
			for i := range got {
				if diff := DiffService(got[i], revs[i]); diff != "" {
					t.Errorf("revision %d: %s", i+1, diff)
				}
			}
		})
	}
}

func testListAllServiceRevisions(t *testing.T, s store.Store) {
	ctx := context.Background()
	PutService(t, s, NewService("b", 1), 0)
	PutService(t, s, NewService("b", 2), 1)
	PutService(t, s, NewService("A", 1), 0)
	PutService(t, s, NewService("c", 1), 0)
	PutService(t, s, NewService("c", 2), 1)
	PutService(t, s, NewService("c", 3), 2)
	want := []string{"A@1", "b@1", "b@2", "c@1", "c@2", "c@3"}
	list := func(p store.Page) ([]*store.ServiceRecord, string, error) {
		return s.ListAllServiceRevisions(ctx, p)
	}
	for _, limit := range []int{0, 1, 2, 4, 6, 7} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			got, pages := walk(t, limit, list)
			if !slices.Equal(ServiceKeys(got), want) {
				t.Errorf("items = %v, want %v", ServiceKeys(got), want)
			}
			if wantPages := pageCount(len(want), limit); pages != wantPages {
				t.Errorf("pages = %d, want %d", pages, wantPages)
			}
		})
	}
}

func testBadPageTokens(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, id := range []string{"c1", "c2"} {
		rec := NewCred(id, "name-"+id, 1)
		PutCred(t, s, rec, 0)
		PutCred(t, s, NextCred(rec), 1)
	}
	for _, id := range []string{"s1", "s2"} {
		PutService(t, s, NewService(id, 1), 0)
		PutService(t, s, NewService(id, 2), 1)
	}
	for _, id := range []string{"r1", "r2"} {
		PutChange(t, s, NewChangeRequest(id, 1), 0)
	}

	type listing struct {
		name string
		list func(store.Page) (int, string, error)
	}
	creds := func(f func(store.Page) ([]*store.CredentialRecord, string, error)) func(store.Page) (int, string, error) {
		return func(p store.Page) (int, string, error) { r, n, err := f(p); return len(r), n, err }
	}
	svcs := func(f func(store.Page) ([]*store.ServiceRecord, string, error)) func(store.Page) (int, string, error) {
		return func(p store.Page) (int, string, error) { r, n, err := f(p); return len(r), n, err }
	}
	listings := []listing{
		{"ListCredentials", creds(func(p store.Page) ([]*store.CredentialRecord, string, error) { return s.ListCredentials(ctx, p) })},
		{"ListCredentialRevisions(c1)", creds(func(p store.Page) ([]*store.CredentialRecord, string, error) {
			return s.ListCredentialRevisions(ctx, "c1", p)
		})},
		{"ListCredentialRevisions(c2)", creds(func(p store.Page) ([]*store.CredentialRecord, string, error) {
			return s.ListCredentialRevisions(ctx, "c2", p)
		})},
		{"ListAllCredentialRevisions", creds(func(p store.Page) ([]*store.CredentialRecord, string, error) {
			return s.ListAllCredentialRevisions(ctx, p)
		})},
		{"ListServices", svcs(func(p store.Page) ([]*store.ServiceRecord, string, error) { return s.ListServices(ctx, p) })},
		{"ListServiceRevisions(s1)", svcs(func(p store.Page) ([]*store.ServiceRecord, string, error) {
			return s.ListServiceRevisions(ctx, "s1", p)
		})},
		{"ListServiceRevisions(s2)", svcs(func(p store.Page) ([]*store.ServiceRecord, string, error) {
			return s.ListServiceRevisions(ctx, "s2", p)
		})},
		{"ListAllServiceRevisions", svcs(func(p store.Page) ([]*store.ServiceRecord, string, error) {
			return s.ListAllServiceRevisions(ctx, p)
		})},
		{"ListChangeRequests", func(p store.Page) (int, string, error) {
			r, n, err := s.ListChangeRequests(ctx, p)
			return len(r), n, err
		}},
	}
	// A real first-page token of every listing; each must work for its own listing.
	tokens := make(map[string]string)
	for _, l := range listings {
		n, next, err := l.list(store.Page{Limit: 1})
		if err != nil || n != 1 || next == "" {
			t.Fatalf("%s first page = %d items, token %q, %v; want 1 item and a token", l.name, n, next, err)
		}
		if n, _, err := l.list(store.Page{Limit: 1, Token: next}); err != nil || n != 1 {
			t.Fatalf("%s with its own token = %d items, %v; want 1 item", l.name, n, err)
		}
		tokens[l.name] = next
	}

	garbage := []string{"!!!", "not base64 at all", "AAAA", "x", "////", "%%", tokens["ListCredentials"] + "!", strings.Repeat("A", 100)}
	for _, l := range listings {
		for _, tok := range garbage {
			t.Run(fmt.Sprintf("%s with garbage %q", l.name, tok), func(t *testing.T) {
				if _, _, err := l.list(store.Page{Limit: 1, Token: tok}); !errors.Is(err, store.ErrBadPageToken) {
					t.Errorf("error = %v, want ErrBadPageToken", err)
				}
			})
		}
		for _, other := range listings {
			if other.name == l.name {
				continue
			}
			t.Run(fmt.Sprintf("%s with a token of %s", l.name, other.name), func(t *testing.T) {
				if _, _, err := l.list(store.Page{Limit: 1, Token: tokens[other.name]}); !errors.Is(err, store.ErrBadPageToken) {
					t.Errorf("error = %v, want ErrBadPageToken", err)
				}
			})
		}
	}
}

func testCredentialServices(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, id := range []string{"c1", "c2", "c3"} {
		PutCred(t, s, NewCred(id, id, 1), 0)
	}
	check := func(t *testing.T, want map[string][]string) {
		t.Helper()
		for id, w := range want {
			got, err := s.CredentialServices(ctx, id)
			if err != nil {
				t.Fatalf("CredentialServices(%s) error = %v", id, err)
			}
			if !slices.Equal(got, w) {
				t.Errorf("CredentialServices(%s) = %v, want %v", id, got, w)
			}
		}
	}
	check(t, map[string][]string{"c1": nil, "c2": nil, "c3": nil, "unknown": nil})

	steps := []struct {
		name string
		svc  *store.ServiceRecord
		prev int32
		want map[string][]string
	}{
		{"svc-b maps c1 and c2", NewService("svc-b", 1, "c2", "c1"), 0,
			map[string][]string{"c1": {"svc-b"}, "c2": {"svc-b"}, "c3": nil}},
		{"svc-a maps c1 (sorted result)", NewService("svc-a", 1, "c1"), 0,
			map[string][]string{"c1": {"svc-a", "svc-b"}, "c2": {"svc-b"}, "c3": nil}},
		{"svc-b moves to c3", NewService("svc-b", 2, "c3"), 1,
			map[string][]string{"c1": {"svc-a"}, "c2": nil, "c3": {"svc-b"}}},
		{"svc-a maps c1 twice", NewService("svc-a", 2, "c1", "c1"), 1,
			map[string][]string{"c1": {"svc-a"}, "c2": nil, "c3": {"svc-b"}}},
		{"svc-a maps nothing", NewService("svc-a", 3), 2,
			map[string][]string{"c1": nil, "c2": nil, "c3": {"svc-b"}}},
		{"svc-c1 (an id extending c1's) maps c1", NewService("svc-c1", 1, "c1"), 0,
			map[string][]string{"c1": {"svc-c1"}, "c2": nil, "c3": {"svc-b"}}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			PutService(t, s, st.svc, st.prev)
			check(t, st.want)
		})
	}
}

func testUnknownCredentials(t *testing.T, s store.Store) {
	ctx := context.Background()
	PutCred(t, s, NewCred("c1", "c1", 1), 0)
	PutCred(t, s, NewCred("c2", "c2", 1), 0)

	tests := []struct {
		name        string
		credentials []string
		want        []string
	}{
		{"one unknown", []string{"c1", "nope"}, []string{"nope"}},
		{"sorted and deduplicated", []string{"z-nope", "c1", "a-nope", "z-nope", "c2"}, []string{"a-nope", "z-nope"}},
		{"empty id", []string{""}, []string{""}},
	}
	for _, tt := range tests {
		t.Run("create/"+tt.name, func(t *testing.T) {
			err := s.PutService(ctx, NewService("svc", 1, tt.credentials...), 0)
			var unknown *store.UnknownCredentialsError
			if !errors.As(err, &unknown) {
				t.Fatalf("PutService error = %v, want *UnknownCredentialsError", err)
			}
			if !slices.Equal(unknown.IDs, tt.want) {
				t.Errorf("UnknownCredentialsError.IDs = %q, want %q", unknown.IDs, tt.want)
			}
			if _, err := s.GetService(ctx, "svc"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("GetService after the refused create: error = %v, want ErrNotFound", err)
			}
			if got, err := s.CredentialServices(ctx, "c1"); err != nil || len(got) != 0 {
				t.Errorf("CredentialServices(c1) = %v, %v; want none", got, err)
			}
		})
	}

	rev1 := NewService("svc", 1, "c1")
	PutService(t, s, rev1, 0)
	for _, tt := range tests {
		t.Run("update/"+tt.name, func(t *testing.T) {
			err := s.PutService(ctx, NewService("svc", 2, tt.credentials...), 1)
			var unknown *store.UnknownCredentialsError
			if !errors.As(err, &unknown) {
				t.Fatalf("PutService error = %v, want *UnknownCredentialsError", err)
			}
			if !slices.Equal(unknown.IDs, tt.want) {
				t.Errorf("UnknownCredentialsError.IDs = %q, want %q", unknown.IDs, tt.want)
			}
			CheckService(t, s, "svc", 0, rev1)
			if _, err := s.GetServiceRevision(ctx, "svc", 2); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("GetServiceRevision(svc, 2) error = %v, want ErrNotFound", err)
			}
			if got, err := s.CredentialServices(ctx, "c1"); err != nil || !slices.Equal(got, []string{"svc"}) {
				t.Errorf("CredentialServices(c1) = %v, %v; want [svc]", got, err)
			}
			if got, err := s.CredentialServices(ctx, "c2"); err != nil || len(got) != 0 {
				t.Errorf("CredentialServices(c2) = %v, %v; want none", got, err)
			}
		})
	}
}

func testBlindCredentials(t *testing.T, s store.Store) {
	ctx := context.Background()
	rec := NewService("svc", 1)
	rec.BlindCredentials = []string{"blind-z", "blind-a", "blind-z", "Not Even An ID"}
	PutService(t, s, rec, 0)
	CheckService(t, s, "svc", 0, rec)
	CheckService(t, s, "svc", 1, rec)
	for _, id := range rec.BlindCredentials {
		if got, err := s.CredentialServices(ctx, id); err != nil || len(got) != 0 {
			t.Errorf("CredentialServices(%q) = %v, %v; blind credentials are not mapped", id, got, err)
		}
	}
}

func testArchive(t *testing.T, s store.Store) {
	ctx := context.Background()
	rev1 := NewCred("c1", "db-old", 1)
	rev2 := NextCred(rev1)
	rev2.Name = "db"
	PutCred(t, s, rev1, 0)
	PutCred(t, s, rev2, 1)
	PutCred(t, s, NewCred("c2", "other", 1), 0)
	PutService(t, s, NewService("svc", 1, "c1", "c2"), 0)
	at := T0.Add(48 * time.Hour)

	t.Run("refused", func(t *testing.T) {
		if err := s.ArchiveCredential(ctx, "c1", 2, at); !errors.Is(err, store.ErrStillMapped) {
			t.Errorf("ArchiveCredential while mapped: error = %v, want ErrStillMapped", err)
		}
		PutService(t, s, NewService("svc", 2, "c2"), 1)
		for _, prev := range []int32{0, 1, 3} {
			if err := s.ArchiveCredential(ctx, "c1", prev, at); !errors.Is(err, store.ErrRevisionConflict) {
				t.Errorf("ArchiveCredential(prev %d) error = %v, want ErrRevisionConflict", prev, err)
			}
		}
		CheckCred(t, s, "c1", 0, rev2)
		CheckCred(t, s, "c1", 1, rev1)
		if _, err := s.GetArchivedCredential(ctx, "c1"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetArchivedCredential before archiving: error = %v, want ErrNotFound", err)
		}
	})

	if err := s.ArchiveCredential(ctx, "c1", 2, at); err != nil {
		t.Fatalf("ArchiveCredential error = %v", err)
	}

	t.Run("gone from reads", func(t *testing.T) {
		tests := []struct {
			name string
			call func() error
		}{
			{"GetCredential", func() error { _, err := s.GetCredential(ctx, "c1"); return err }},
			{"GetCredentialRevision 1", func() error { _, err := s.GetCredentialRevision(ctx, "c1", 1); return err }},
			{"GetCredentialRevision 2", func() error { _, err := s.GetCredentialRevision(ctx, "c1", 2); return err }},
			{"ListCredentialRevisions", func() error { _, _, err := s.ListCredentialRevisions(ctx, "c1", store.Page{}); return err }},
			{"SetLastDecrypted", func() error { return s.SetLastDecrypted(ctx, "c1", 2, at) }},
			{"RewrapCredential", func() error { return s.RewrapCredential(ctx, "c1", 2, rev2.WrappedKey, []byte("rewrapped")) }},
			{"ArchiveCredential again", func() error { return s.ArchiveCredential(ctx, "c1", 2, at) }},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if err := tt.call(); !errors.Is(err, store.ErrNotFound) {
					t.Errorf("error = %v, want ErrNotFound", err)
				}
			})
		}
	})

	t.Run("gone from listings and indexes", func(t *testing.T) {
		list, _, err := s.ListCredentials(ctx, store.Page{})
		if err != nil || !slices.Equal(CredKeys(list), []string{"c2@1"}) {
			t.Errorf("ListCredentials = %v, %v; want [c2@1]", CredKeys(list), err)
		}
		all, _, err := s.ListAllCredentialRevisions(ctx, store.Page{})
		if err != nil || !slices.Equal(CredKeys(all), []string{"c2@1"}) {
			t.Errorf("ListAllCredentialRevisions = %v, %v; want [c2@1]", CredKeys(all), err)
		}
		if got, err := s.CredentialServices(ctx, "c1"); err != nil || len(got) != 0 {
			t.Errorf("CredentialServices(c1) = %v, %v; want none", got, err)
		}
		err = s.PutService(ctx, NewService("svc", 3, "c1"), 2)
		var unknown *store.UnknownCredentialsError
		if !errors.As(err, &unknown) || !slices.Equal(unknown.IDs, []string{"c1"}) {
			t.Errorf("PutService mapping the archived credential: error = %v, want UnknownCredentialsError [c1]", err)
		}
		if err := s.PutCredential(ctx, NextCred(rev2), 2); !errors.Is(err, store.ErrRevisionConflict) {
			t.Errorf("PutCredential(c1 rev 3, prev 2) error = %v, want ErrRevisionConflict", err)
		}
	})

	t.Run("name is free", func(t *testing.T) {
		for _, rec := range []*store.CredentialRecord{NewCred("c3", "db", 1), NewCred("c4", "db-old", 1)} {
			PutCred(t, s, rec, 0)
			CheckCred(t, s, rec.ID, 0, rec)
		}
	})

	t.Run("archived record", func(t *testing.T) {
		got, err := s.GetArchivedCredential(ctx, "c1")
		if err != nil {
			t.Fatalf("GetArchivedCredential error = %v", err)
		}
		if diff := DiffCred(got, rev2); diff != "" {
			t.Errorf("GetArchivedCredential: %s", diff)
		}
		if _, err := s.GetArchivedCredential(ctx, "c2"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetArchivedCredential(c2) error = %v, want ErrNotFound", err)
		}
	})

	t.Run("archived listing", func(t *testing.T) {
		later := at.Add(time.Hour)
		if err := s.ArchiveCredential(ctx, "c4", 1, later); err != nil {
			t.Fatalf("ArchiveCredential(c4) error = %v", err)
		}
		all, next, err := s.ListArchivedCredentials(ctx, store.Page{})
		if err != nil || next != "" || len(all) != 2 {
			t.Fatalf("ListArchivedCredentials = %d items, %q, %v; want c1 and c4, no next page", len(all), next, err)
		}
		if diff := DiffCred(all[0].Record, rev2); diff != "" || !all[0].ArchivedAt.Equal(at) {
			t.Errorf("first archived = %s archived at %v; want c1@2 at %v", diff, all[0].ArchivedAt, at)
		}
		if all[1].Record.ID != "c4" || !all[1].ArchivedAt.Equal(later) {
			t.Errorf("second archived = %s at %v; want c4 at %v", all[1].Record.ID, all[1].ArchivedAt, later)
		}
		var ids []string
		token := ""
		for range 3 {
			page, next, err := s.ListArchivedCredentials(ctx, store.Page{Limit: 1, Token: token})
			if err != nil {
				t.Fatalf("ListArchivedCredentials(limit 1) error = %v", err)
			}
			for _, a := range page {
				ids = append(ids, a.Record.ID)
			}
			if token = next; token == "" {
				break
			}
		}
		if !slices.Equal(ids, []string{"c1", "c4"}) || token != "" {
			t.Errorf("ListArchivedCredentials by pages of 1 = %v (last token %q), want [c1 c4]", ids, token)
		}
		_, other, err := s.ListCredentials(ctx, store.Page{Limit: 1})
		if err != nil || other == "" {
			t.Fatalf("ListCredentials(limit 1) = %q, %v; want a next page token", other, err)
		}
		if _, _, err := s.ListArchivedCredentials(ctx, store.Page{Token: other}); !errors.Is(err, store.ErrBadPageToken) {
			t.Errorf("ListArchivedCredentials with ListCredentials' token: error = %v, want ErrBadPageToken", err)
		}
	})
}

func testSetLastDecrypted(t *testing.T, s store.Store) {
	ctx := context.Background()
	rev1 := NewCred("c1", "c1", 1)
	rev2 := NextCred(rev1)
	PutCred(t, s, rev1, 0)
	PutCred(t, s, rev2, 1)
	t1 := T0.Add(time.Hour + 3*time.Nanosecond)
	t2 := T0.Add(2*time.Hour + 5*time.Nanosecond)

	wantCur := CloneCred(rev2)
	wantRev1 := CloneCred(rev1)
	steps := []struct {
		name     string
		revision int32
		at       time.Time
		apply    func()
	}{
		{"current revision", 2, t1, func() { wantCur.LastDecryptedDate = &t1 }},
		{"older revision leaves the current record alone", 1, t2, func() { wantRev1.LastDecryptedDate = &t2 }},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if err := s.SetLastDecrypted(ctx, "c1", st.revision, st.at); err != nil {
				t.Fatalf("SetLastDecrypted(c1, %d) error = %v", st.revision, err)
			}
			st.apply()
			CheckCred(t, s, "c1", 0, wantCur)
			CheckCred(t, s, "c1", 2, wantCur)
			CheckCred(t, s, "c1", 1, wantRev1)
			if _, err := s.GetCredentialRevision(ctx, "c1", 3); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("GetCredentialRevision(c1, 3) error = %v, want ErrNotFound: no revision is created", err)
			}
		})
	}
	t.Run("next revision still follows", func(t *testing.T) {
		rev3 := NextCred(wantCur)
		rev3.LastDecryptedDate = nil
		PutCred(t, s, rev3, 2)
		CheckCred(t, s, "c1", 0, rev3)
	})
}

func testRecordsAreCopies(t *testing.T, s store.Store) {
	ctx := context.Background()
	orig := NewCred("c1", "c1", 1)
	orig.Documentation = StrPtr("doc")
	PutCred(t, s, orig, 0)
	svc := NewService("svc", 1, "c1")
	svc.BlindCredentials = []string{"blind"}
	PutService(t, s, svc, 0)

	mutateCred := func(r *store.CredentialRecord) {
		r.Metadata["team"] = "mutated"
		r.Metadata["extra"] = "mutated"
		r.Tags[0] = "mutated"
		r.Keys[0] = "mutated"
		r.SealedPairs[0] ^= 0xff
		r.WrappedKey[0] ^= 0xff
		*r.Documentation = "mutated"
		*r.LastRotationDate = r.LastRotationDate.Add(time.Hour)
		r.Name = "mutated"
	}
	mutateService := func(r *store.ServiceRecord) {
		r.Credentials[0] = "mutated"
		r.BlindCredentials[0] = "mutated"
		*r.Account = "mutated"
	}

	t.Run("input record", func(t *testing.T) {
		in := CloneCred(NewCred("c2", "c2", 1))
		in.Documentation = StrPtr("doc")
		want := CloneCred(in)
		if err := s.PutCredential(ctx, in, 0); err != nil {
			t.Fatal(err)
		}
		mutateCred(in)
		CheckCred(t, s, "c2", 0, want)

		svcIn := NewService("svc2", 1, "c2")
		svcIn.BlindCredentials = []string{"blind"}
		svcWant := CloneService(svcIn)
		if err := s.PutService(ctx, svcIn, 0); err != nil {
			t.Fatal(err)
		}
		mutateService(svcIn)
		CheckService(t, s, "svc2", 0, svcWant)
	})

	credReads := []struct {
		name string
		get  func() (*store.CredentialRecord, error)
	}{
		{"GetCredential", func() (*store.CredentialRecord, error) { return s.GetCredential(ctx, "c1") }},
		{"GetCredentialRevision", func() (*store.CredentialRecord, error) { return s.GetCredentialRevision(ctx, "c1", 1) }},
		{"ListCredentials", func() (*store.CredentialRecord, error) {
			return firstOf(s.ListCredentials(ctx, store.Page{Limit: 1}))
		}},
		{"ListCredentialRevisions", func() (*store.CredentialRecord, error) {
			return firstOf(s.ListCredentialRevisions(ctx, "c1", store.Page{}))
		}},
		{"ListAllCredentialRevisions", func() (*store.CredentialRecord, error) {
			return firstOf(s.ListAllCredentialRevisions(ctx, store.Page{Limit: 1}))
		}},
	}
	for _, rd := range credReads {
		t.Run(rd.name, func(t *testing.T) {
			got, err := rd.get()
			if err != nil {
				t.Fatal(err)
			}
			if diff := DiffCred(got, orig); diff != "" {
				t.Fatalf("before mutating: %s", diff)
			}
			mutateCred(got)
			CheckCred(t, s, "c1", 0, orig)
			CheckCred(t, s, "c1", 1, orig)
		})
	}

	svcReads := []struct {
		name string
		get  func() (*store.ServiceRecord, error)
	}{
		{"GetService", func() (*store.ServiceRecord, error) { return s.GetService(ctx, "svc") }},
		{"GetServiceRevision", func() (*store.ServiceRecord, error) { return s.GetServiceRevision(ctx, "svc", 1) }},
		{"ListServices", func() (*store.ServiceRecord, error) { return firstOf(s.ListServices(ctx, store.Page{Limit: 1})) }},
		{"ListServiceRevisions", func() (*store.ServiceRecord, error) {
			return firstOf(s.ListServiceRevisions(ctx, "svc", store.Page{}))
		}},
		{"ListAllServiceRevisions", func() (*store.ServiceRecord, error) {
			return firstOf(s.ListAllServiceRevisions(ctx, store.Page{Limit: 1}))
		}},
	}
	for _, rd := range svcReads {
		t.Run(rd.name, func(t *testing.T) {
			got, err := rd.get()
			if err != nil {
				t.Fatal(err)
			}
			if diff := DiffService(got, svc); diff != "" {
				t.Fatalf("before mutating: %s", diff)
			}
			mutateService(got)
			CheckService(t, s, "svc", 0, svc)
			CheckService(t, s, "svc", 1, svc)
		})
	}

	// Written decided at version 1, so that every field (DecidedAt too) has something to mutate.
	decided := func(id string) *store.ChangeRequestRecord {
		rec := NextChangeRequest(NewChangeRequest(id, 1))
		rec.Version = 1
		return rec
	}
	change := decided("r1")
	PutChange(t, s, change, 0)
	mutateChange := func(r *store.ChangeRequestRecord) {
		r.Approvals[0].By = "mutated"
		r.Approvals = append(r.Approvals, store.ChangeApproval{By: "mutated"})
		r.Change[0] ^= 0xff
		r.Summary[0] ^= 0xff
		r.SealedPairs[0] ^= 0xff
		r.WrappedKey[0] ^= 0xff
		*r.DecidedAt = r.DecidedAt.Add(time.Hour)
		r.Status = "mutated"
	}
	t.Run("input change request", func(t *testing.T) {
		in := decided("r2")
		want := CloneChangeRequest(in)
		if err := s.PutChangeRequest(ctx, in, 0); err != nil {
			t.Fatal(err)
		}
		mutateChange(in)
		CheckChange(t, s, "r2", want)
	})
	changeReads := []struct {
		name string
		get  func() (*store.ChangeRequestRecord, error)
	}{
		{"GetChangeRequest", func() (*store.ChangeRequestRecord, error) { return s.GetChangeRequest(ctx, "r1") }},
		{"ListChangeRequests", func() (*store.ChangeRequestRecord, error) {
			return firstOf(s.ListChangeRequests(ctx, store.Page{Limit: 1}))
		}},
	}
	for _, rd := range changeReads {
		t.Run(rd.name, func(t *testing.T) {
			got, err := rd.get()
			if err != nil {
				t.Fatal(err)
			}
			if diff := DiffChangeRequest(got, change); diff != "" {
				t.Fatalf("before mutating: %s", diff)
			}
			mutateChange(got)
			CheckChange(t, s, "r1", change)
		})
	}

	t.Run("CredentialServices", func(t *testing.T) {
		got, err := s.CredentialServices(ctx, "c1")
		if err != nil || len(got) != 1 {
			t.Fatalf("CredentialServices(c1) = %v, %v", got, err)
		}
		got[0] = "mutated"
		if again, err := s.CredentialServices(ctx, "c1"); err != nil || !slices.Equal(again, []string{"svc"}) {
			t.Errorf("CredentialServices(c1) after mutating = %v, %v; want [svc]", again, err)
		}
	})
}

func testCancelledContext(t *testing.T, s store.Store) {
	PutCred(t, s, NewCred("c1", "c1", 1), 0)
	PutService(t, s, NewService("svc", 1), 0)
	PutChange(t, s, NewChangeRequest("r1", 1), 0)
	if _, err := s.InitKeyCheck(context.Background(), []byte("check")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		call func() error
	}{
		{"GetCredential", func() error { _, err := s.GetCredential(ctx, "c1"); return err }},
		{"GetCredentialRevision", func() error { _, err := s.GetCredentialRevision(ctx, "c1", 1); return err }},
		{"GetCredentials", func() error { _, err := s.GetCredentials(ctx, []string{"c1"}); return err }},
		{"ListCredentials", func() error { _, _, err := s.ListCredentials(ctx, store.Page{}); return err }},
		{"ListCredentialRevisions", func() error { _, _, err := s.ListCredentialRevisions(ctx, "c1", store.Page{}); return err }},
		{"ListAllCredentialRevisions", func() error { _, _, err := s.ListAllCredentialRevisions(ctx, store.Page{}); return err }},
		{"PutCredential", func() error { return s.PutCredential(ctx, NewCred("c2", "c2", 1), 0) }},
		{"SetLastDecrypted", func() error { return s.SetLastDecrypted(ctx, "c1", 1, T0) }},
		{"RewrapCredential", func() error { return s.RewrapCredential(ctx, "c1", 1, []byte("wrapped-c1"), []byte("rewrapped")) }},
		{"ReplaceKeyCheck", func() error { return s.ReplaceKeyCheck(ctx, []byte("check"), []byte("replaced")) }},
		{"CredentialServices", func() error { _, err := s.CredentialServices(ctx, "c1"); return err }},
		{"ArchiveCredential", func() error { return s.ArchiveCredential(ctx, "c1", 1, T0) }},
		{"GetArchivedCredential", func() error { _, err := s.GetArchivedCredential(ctx, "c1"); return err }},
		{"ListArchivedCredentials", func() error { _, _, err := s.ListArchivedCredentials(ctx, store.Page{}); return err }},
		{"GetService", func() error { _, err := s.GetService(ctx, "svc"); return err }},
		{"GetServiceRevision", func() error { _, err := s.GetServiceRevision(ctx, "svc", 1); return err }},
		{"ListServices", func() error { _, _, err := s.ListServices(ctx, store.Page{}); return err }},
		{"ListServiceRevisions", func() error { _, _, err := s.ListServiceRevisions(ctx, "svc", store.Page{}); return err }},
		{"ListAllServiceRevisions", func() error { _, _, err := s.ListAllServiceRevisions(ctx, store.Page{}); return err }},
		{"PutService", func() error { return s.PutService(ctx, NewService("svc2", 1), 0) }},
		{"Grants", func() error { _, err := s.Grants(ctx, "svc"); return err }},
		{"PutGrants", func() error { return s.PutGrants(ctx, "svc2", store.GrantsRecord{Encrypt: true}) }},
		{"ClaimLoginNonce", func() error { _, err := s.ClaimLoginNonce(ctx, "nonce", time.Now().Add(time.Minute)); return err }},
		{"LoginNonceClaimed", func() error { _, err := s.LoginNonceClaimed(ctx, "nonce"); return err }},
		{"GetChangeRequest", func() error { _, err := s.GetChangeRequest(ctx, "r1"); return err }},
		{"PutChangeRequest new", func() error { return s.PutChangeRequest(ctx, NewChangeRequest("r2", 1), 0) }},
		{"PutChangeRequest update", func() error { return s.PutChangeRequest(ctx, NextChangeRequest(NewChangeRequest("r1", 1)), 1) }},
		{"ListChangeRequests", func() error { _, _, err := s.ListChangeRequests(ctx, store.Page{}); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, context.Canceled) {
				t.Errorf("error = %v, want context.Canceled", err)
			}
		})
	}
	t.Run("nothing written", func(t *testing.T) {
		bg := context.Background()
		if _, err := s.GetCredential(bg, "c2"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetCredential(c2) error = %v, want ErrNotFound", err)
		}
		if _, err := s.GetService(bg, "svc2"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetService(svc2) error = %v, want ErrNotFound", err)
		}
		if _, err := s.Grants(bg, "svc2"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Grants(svc2) error = %v, want ErrNotFound", err)
		}
		if claimed, err := s.ClaimLoginNonce(bg, "nonce", time.Now().Add(time.Minute)); err != nil || !claimed {
			t.Errorf("ClaimLoginNonce(nonce) = %v, %v; want the first claim", claimed, err)
		}
		got, err := s.GetCredential(bg, "c1")
		if err != nil || got.LastDecryptedDate != nil || string(got.WrappedKey) != "wrapped-c1" {
			t.Errorf("GetCredential(c1) = %v, %v; want it untouched", got, err)
		}
		if check, err := s.KeyCheck(bg); err != nil || string(check) != "check" {
			t.Errorf("KeyCheck = %q, %v; want the value recorded before, check", check, err)
		}
		if _, err := s.GetChangeRequest(bg, "r2"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetChangeRequest(r2) error = %v, want ErrNotFound", err)
		}
		CheckChange(t, s, "r1", NewChangeRequest("r1", 1))
	})
}

// firstOf returns the first item of a listing call's results, failing on an error or an empty page.
func firstOf[T any](items []T, _ string, err error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	if len(items) == 0 {
		return zero, errors.New("empty listing")
	}
	return items[0], nil
}

// testGrants: a grants record is a point record per service id: a miss is ErrNotFound, a put replaces
// the record whole (times survive exactly), ids do not leak into each other (nor into ids sharing a
// prefix), and no service record is needed.
func testGrants(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, id := range []string{"api", "", "a\x00b", "nope"} {
		if got, err := s.Grants(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Grants(%q) on an empty store = %+v, %v; want ErrNotFound", id, got, err)
		}
	}
	partial := store.GrantsRecord{Encrypt: true, Created: T0}
	if err := s.PutGrants(ctx, "api", partial); err != nil {
		t.Fatalf("PutGrants(api) error = %v", err)
	}
	check := func(id string, want store.GrantsRecord) {
		t.Helper()
		got, err := s.Grants(ctx, id)
		if err != nil {
			t.Fatalf("Grants(%q) error = %v", id, err)
		}
		if diff := cmp.Diff(want, got); diff != "" { // Created: compared with time.Time.Equal
			t.Errorf("Grants(%q) mismatch (-want +got):\n%s", id, diff)
		}
	}
	check("api", partial)
	full := store.GrantsRecord{Encrypt: true, Decrypt: true, Created: T0.Add(time.Second)}
	if err := s.PutGrants(ctx, "api", full); err != nil {
		t.Fatalf("PutGrants(api) again error = %v", err)
	}
	check("api", full)
	if err := s.PutGrants(ctx, "api-2", store.GrantsRecord{Decrypt: true, Created: T0}); err != nil {
		t.Fatalf("PutGrants(api-2) error = %v", err)
	}
	check("api", full)
	check("api-2", store.GrantsRecord{Decrypt: true, Created: T0})
	for _, id := range []string{"ap", "API", "api-"} {
		if _, err := s.Grants(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Grants(%q) error = %v, want ErrNotFound", id, err)
		}
	}
	for _, id := range []string{"", "a\x00b"} {
		if err := s.PutGrants(ctx, id, full); err == nil {
			t.Errorf("PutGrants(%q) error = nil, want an error", id)
		}
	}
	// Grants are not service records: listings and service reads do not see them.
	if svcs, _, err := s.ListServices(ctx, store.Page{}); err != nil || len(svcs) != 0 {
		t.Errorf("ListServices() = %d services, %v; want none", len(svcs), err)
	}
	if _, err := s.GetService(ctx, "api"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetService(api) error = %v, want ErrNotFound", err)
	}
}

// GetCredentials reads the current records of the ids that have one, in the order asked, and leaves
// out the others without failing.
func testGetCredentials(t *testing.T, s store.Store) {
	ctx := context.Background()
	PutCred(t, s, NewCred("c1", "c1", 1), 0)
	PutCred(t, s, NewCred("c2", "c2", 1), 0)
	PutCred(t, s, NextCred(NewCred("c2", "c2", 1)), 1)
	got, err := s.GetCredentials(ctx, []string{"c2", "missing", "c1", "bad/../id\x00"})
	if err != nil {
		t.Fatalf("GetCredentials() error = %v", err)
	}
	if len(got) != 2 || got[0].ID != "c2" || got[0].Revision != 2 || got[1].ID != "c1" || got[1].Revision != 1 {
		t.Fatalf("GetCredentials() = %v, want c2@2 then c1@1", got)
	}
	if got, err := s.GetCredentials(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("GetCredentials(nil) = %v, %v; want none", got, err)
	}
	// Many ids, past any per-request batch of the adapter.
	var ids []string
	for i := range 250 {
		id := fmt.Sprintf("many-%03d", i)
		ids = append(ids, id)
		PutCred(t, s, NewCred(id, id, 1), 0)
	}
	got, err = s.GetCredentials(ctx, ids)
	if err != nil || len(got) != len(ids) || got[249].ID != "many-249" {
		t.Fatalf("GetCredentials(250 ids) = %d records, %v", len(got), err)
	}
}

func testKeyCheck(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.KeyCheck(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("KeyCheck of a new store: error = %v, want ErrNotFound", err)
	}
	held, err := s.InitKeyCheck(ctx, []byte("first"))
	if err != nil || string(held) != "first" {
		t.Fatalf("InitKeyCheck(first) = %q, %v; want first", held, err)
	}
	// Once recorded the value never changes: a second initialisation gets the first value back.
	held, err = s.InitKeyCheck(ctx, []byte("second"))
	if err != nil || string(held) != "first" {
		t.Fatalf("InitKeyCheck(second) = %q, %v; want the recorded first", held, err)
	}
	got, err := s.KeyCheck(ctx)
	if err != nil || string(got) != "first" {
		t.Fatalf("KeyCheck = %q, %v; want first", got, err)
	}
	got[0] = 'X'
	if again, _ := s.KeyCheck(ctx); string(again) != "first" {
		t.Errorf("KeyCheck returned the store's own memory: modifying it changed the value to %q", again)
	}
	if _, err := s.InitKeyCheck(ctx, nil); err == nil {
		t.Error("InitKeyCheck(empty) succeeded")
	}
}

func testHasData(t *testing.T, s store.Store) {
	ctx := context.Background()
	check := func(want bool, when string) {
		t.Helper()
		got, err := s.HasData(ctx)
		if err != nil || got != want {
			t.Fatalf("HasData %s = %v, %v; want %v", when, got, err, want)
		}
	}
	check(false, "of a new store")
	if _, err := s.InitKeyCheck(ctx, []byte("k")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutGrants(ctx, "svc", store.GrantsRecord{Encrypt: true}); err != nil {
		t.Fatal(err)
	}
	PutChange(t, s, NewChangeRequest("r1", 1), 0)
	check(false, "with only a key check, grants and a change request")
	PutService(t, s, NewService("svc", 1), 0)
	check(true, "with a service")
	PutCred(t, s, NewCred("c1", "c1", 1), 0)
	if err := s.ArchiveCredential(ctx, "c1", 1, T0); err != nil {
		t.Fatal(err)
	}
	check(true, "with an archived credential")
}

func testProbe(t *testing.T, s store.Store) {
	if err := s.Probe(context.Background()); err != nil {
		t.Fatalf("Probe of a healthy store = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Probe(ctx); err == nil {
		t.Error("Probe with a cancelled context succeeded")
	}
}

// testClaimLoginNonce: a login link's nonce is claimed once, whatever asks second (here the same store;
// replicas share the store, so they see the same answer), concurrent claims have one winner, nonces do
// not leak into each other, and login nonces are no data.
func testClaimLoginNonce(t *testing.T, s store.Store) {
	ctx := context.Background()
	expires := time.Now().Add(5 * time.Minute)
	claim := func(nonce string, want bool) {
		t.Helper()
		claimed, err := s.ClaimLoginNonce(ctx, nonce, expires)
		if err != nil || claimed != want {
			t.Fatalf("ClaimLoginNonce(%q) = %v, %v; want %v", nonce, claimed, err, want)
		}
	}
	claimed := func(nonce string, want bool) {
		t.Helper()
		got, err := s.LoginNonceClaimed(ctx, nonce)
		if err != nil || got != want {
			t.Fatalf("LoginNonceClaimed(%q) = %v, %v; want %v", nonce, got, err, want)
		}
	}
	claimed("n-1", false)
	claim("n-1", true)
	claimed("n-1", true)
	claimed("n-", false) // a prefix of a claimed nonce is another nonce
	claim("n-1", false)  // second use refused
	// A record past its expiry is gone for LoginNonceClaimed even before anything sweeps it.
	if ok, err := s.ClaimLoginNonce(ctx, "past", time.Now().Add(-time.Second)); err != nil || !ok {
		t.Fatalf("ClaimLoginNonce(past) = %v, %v; want the first claim", ok, err)
	}
	claimed("past", false)
	claim("n-1", false)
	claim("n-2", true)
	claim("n-", true) // a prefix of another nonce is another nonce
	claim("N-1", true)
	claim("n-2", false)
	for _, bad := range []string{"", "a\x00b"} {
		if _, err := s.ClaimLoginNonce(ctx, bad, expires); err == nil {
			t.Errorf("ClaimLoginNonce(%q) error = nil, want an error", bad)
		}
		if _, err := s.LoginNonceClaimed(ctx, bad); err == nil {
			t.Errorf("LoginNonceClaimed(%q) error = nil, want an error", bad)
		}
	}
	if has, err := s.HasData(ctx); err != nil || has {
		t.Errorf("HasData with only login nonces = %v, %v; want false", has, err)
	}

	t.Run("concurrent", func(t *testing.T) {
		var wins atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				claimed, err := s.ClaimLoginNonce(ctx, "race", expires)
				if err != nil {
					t.Errorf("ClaimLoginNonce(race) error = %v", err)
				}
				if claimed {
					wins.Add(1)
				}
			}()
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Errorf("%d of 8 concurrent claims of one nonce won, want exactly 1", wins.Load())
		}
	})
}

// testRewrapCredential: a rewrap replaces the wrapped data key of one history revision, and of the
// current record when it is that revision, compare-and-set on the stored key; nothing else changes
// (LastDecryptedDate included), no revision is created, and the numbering of later writes is intact.
func testRewrapCredential(t *testing.T, s store.Store) {
	ctx := context.Background()
	rev1 := NewCred("c1", "c1", 1)
	rev1.WrappedKey = []byte("key-v1-r1")
	rev1.Documentation = StrPtr("doc")
	rev2 := NextCred(rev1)
	rev2.WrappedKey = []byte("key-v1-r2")
	PutCred(t, s, rev1, 0)
	PutCred(t, s, rev2, 1)
	other := NewCred("c2", "c2", 1)
	other.WrappedKey = []byte("key-v1-r2") // the same bytes under another id: never touched
	PutCred(t, s, other, 0)
	stamp := T0.Add(time.Hour + 9*time.Nanosecond)
	if err := s.SetLastDecrypted(ctx, "c1", 2, stamp); err != nil {
		t.Fatal(err)
	}
	wantCur := CloneCred(rev2)
	wantCur.LastDecryptedDate = &stamp
	wantRev1 := CloneCred(rev1)

	checkAll := func(t *testing.T) {
		t.Helper()
		CheckCred(t, s, "c1", 0, wantCur)
		CheckCred(t, s, "c1", 2, wantCur)
		CheckCred(t, s, "c1", 1, wantRev1)
		CheckCred(t, s, "c2", 0, other)
		CheckCred(t, s, "c2", 1, other)
		revs, _, err := s.ListCredentialRevisions(ctx, "c1", store.Page{})
		if err != nil || !slices.Equal(CredKeys(revs), []string{"c1@1", "c1@2"}) {
			t.Errorf("ListCredentialRevisions(c1) = %v, %v; want [c1@1 c1@2]: a rewrap creates no revision", CredKeys(revs), err)
		}
		if _, err := s.GetCredentialRevision(ctx, "c1", 3); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetCredentialRevision(c1, 3) error = %v, want ErrNotFound: a rewrap creates no revision", err)
		}
	}

	t.Run("current revision: history and current record", func(t *testing.T) {
		newKey := []byte("key-v2-r2")
		if err := s.RewrapCredential(ctx, "c1", 2, []byte("key-v1-r2"), newKey); err != nil {
			t.Fatalf("RewrapCredential(c1, 2) error = %v", err)
		}
		newKey[0] = 'X' // the store keeps its own copy
		wantCur.WrappedKey = []byte("key-v2-r2")
		checkAll(t)
	})
	t.Run("older revision leaves the current record alone", func(t *testing.T) {
		if err := s.RewrapCredential(ctx, "c1", 1, []byte("key-v1-r1"), []byte("key-v2-r1")); err != nil {
			t.Fatalf("RewrapCredential(c1, 1) error = %v", err)
		}
		wantRev1.WrappedKey = []byte("key-v2-r1")
		checkAll(t)
	})
	t.Run("stale or wrong old key is a conflict and changes nothing", func(t *testing.T) {
		for _, tt := range []struct {
			revision int32
			old      string
		}{
			{2, "key-v1-r2"}, // already rewrapped: the value a slower replica read
			{1, "key-v1-r1"},
			{2, "key-v2-r1"}, // another revision's key
			{1, "key-v2-r"},  // a prefix of the stored key
			{1, "key-v2-r1x"},
		} {
			err := s.RewrapCredential(ctx, "c1", tt.revision, []byte(tt.old), []byte("key-v3"))
			if !errors.Is(err, store.ErrRevisionConflict) {
				t.Errorf("RewrapCredential(c1, %d, old %q) error = %v, want ErrRevisionConflict", tt.revision, tt.old, err)
			}
		}
		checkAll(t)
	})
	t.Run("not found changes nothing", func(t *testing.T) {
		for _, tt := range []struct {
			id       string
			revision int32
		}{
			{"nope", 1}, {"", 1}, {"c1\x00", 1}, {"c", 1}, {"c1", 0}, {"c1", 3}, {"c1", -1},
		} {
			err := s.RewrapCredential(ctx, tt.id, tt.revision, []byte("key-v2-r1"), []byte("key-v3"))
			if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("RewrapCredential(%q, %d) error = %v, want ErrNotFound", tt.id, tt.revision, err)
			}
		}
		checkAll(t)
	})
	t.Run("empty keys are refused", func(t *testing.T) {
		for _, tt := range []struct {
			name     string
			old, new []byte
		}{
			{"nil new key", []byte("key-v2-r2"), nil},
			{"empty new key", []byte("key-v2-r2"), []byte{}},
			{"nil old key", nil, []byte("key-v3")},
			{"empty old key", []byte{}, []byte("key-v3")},
		} {
			err := s.RewrapCredential(ctx, "c1", 2, tt.old, tt.new)
			if err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrRevisionConflict) {
				t.Errorf("%s: RewrapCredential error = %v, want an error other than ErrNotFound and ErrRevisionConflict", tt.name, err)
			}
		}
		checkAll(t)
	})
	t.Run("records read after a rewrap are copies", func(t *testing.T) {
		got, err := s.GetCredential(ctx, "c1")
		if err != nil {
			t.Fatal(err)
		}
		got.WrappedKey[0] ^= 0xff
		hist, err := s.GetCredentialRevision(ctx, "c1", 2)
		if err != nil {
			t.Fatal(err)
		}
		hist.WrappedKey[0] ^= 0xff
		checkAll(t)
	})
	t.Run("current revision of the same key bytes is another revision", func(t *testing.T) {
		// Revision 3 keeps revision 2's data key (as a write that changes no pair may): rewrapping
		// revision 2 changes revision 2 only, and revision 3 is rewrapped on its own.
		rev3 := NextCred(wantCur)
		rev3.LastDecryptedDate = nil
		PutCred(t, s, rev3, 2)
		if err := s.RewrapCredential(ctx, "c1", 2, []byte("key-v2-r2"), []byte("key-v3-r2")); err != nil {
			t.Fatalf("RewrapCredential(c1, 2) error = %v", err)
		}
		wantRev2 := CloneCred(wantCur)
		wantRev2.WrappedKey = []byte("key-v3-r2")
		CheckCred(t, s, "c1", 0, rev3)
		CheckCred(t, s, "c1", 3, rev3)
		CheckCred(t, s, "c1", 2, wantRev2)
		CheckCred(t, s, "c1", 1, wantRev1)
		if err := s.RewrapCredential(ctx, "c1", 3, []byte("key-v2-r2"), []byte("key-v3-r3")); err != nil {
			t.Fatalf("RewrapCredential(c1, 3) error = %v", err)
		}
		rev3.WrappedKey = []byte("key-v3-r3")
		CheckCred(t, s, "c1", 0, rev3)
		CheckCred(t, s, "c1", 3, rev3)
		CheckCred(t, s, "c1", 2, wantRev2)
		t.Run("next revision still follows", func(t *testing.T) {
			rev4 := NextCred(rev3)
			PutCred(t, s, rev4, 3)
			CheckCred(t, s, "c1", 0, rev4)
			CheckCred(t, s, "c1", 3, rev3)
		})
	})
	t.Run("archived credential", func(t *testing.T) {
		arch := NewCred("c3", "c3", 1)
		PutCred(t, s, arch, 0)
		if err := s.ArchiveCredential(ctx, "c3", 1, T0); err != nil {
			t.Fatal(err)
		}
		if err := s.RewrapCredential(ctx, "c3", 1, arch.WrappedKey, []byte("key-v2")); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("RewrapCredential of an archived credential: error = %v, want ErrNotFound", err)
		}
		got, err := s.GetArchivedCredential(ctx, "c3")
		if err != nil {
			t.Fatal(err)
		}
		if diff := DiffCred(got, arch); diff != "" {
			t.Errorf("GetArchivedCredential(c3) after a refused rewrap: %s", diff)
		}
	})
}

// testConcurrentRewrap: replicas rewrapping one record at once with the same old key and different
// new keys: exactly one succeeds, every other one gets ErrRevisionConflict, and the stored key is the
// winner's in the history and the current record.
func testConcurrentRewrap(t *testing.T, s store.Store) {
	const rewrappers = 8
	ctx := context.Background()
	rec := NewCred("c1", "c1", 1)
	PutCred(t, s, rec, 0)

	start := make(chan struct{})
	results := make([]error, rewrappers)
	var wg sync.WaitGroup
	for i := range rewrappers {
		wg.Go(func() {
			<-start
			results[i] = s.RewrapCredential(ctx, "c1", 1, rec.WrappedKey, fmt.Appendf(nil, "key-of-%d", i))
		})
	}
	close(start)
	wg.Wait()

	winner := -1
	for i, err := range results {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("rewrappers %d and %d both succeeded", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, store.ErrRevisionConflict):
			t.Errorf("rewrapper %d: error = %v, want nil or ErrRevisionConflict", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no rewrap of %d succeeded: %v", rewrappers, results)
	}
	want := CloneCred(rec)
	want.WrappedKey = fmt.Appendf(nil, "key-of-%d", winner)
	CheckCred(t, s, "c1", 0, want)
	CheckCred(t, s, "c1", 1, want)
}

// testRewrapKeepsConcurrentStamps: SetLastDecrypted and RewrapCredential of one record at once never
// undo each other, whatever the order: afterwards the record holds the new key and the last stamp.
func testRewrapKeepsConcurrentStamps(t *testing.T, s store.Store) {
	// Fewer stamps than the etcd store's write attempts, so a rewrap cannot lose every one of them.
	const stamps = 4
	ctx := context.Background()
	rec := NewCred("c1", "c1", 1)
	PutCred(t, s, rec, 0)

	start := make(chan struct{})
	var wg sync.WaitGroup
	var stampErr, rewrapErr error
	last := T0
	wg.Go(func() {
		<-start
		for i := range stamps {
			at := T0.Add(time.Duration(i+1) * time.Minute)
			if stampErr = s.SetLastDecrypted(ctx, "c1", 1, at); stampErr != nil {
				return
			}
			last = at
		}
	})
	wg.Go(func() {
		<-start
		rewrapErr = s.RewrapCredential(ctx, "c1", 1, rec.WrappedKey, []byte("key-v2"))
	})
	close(start)
	wg.Wait()
	if stampErr != nil || rewrapErr != nil {
		t.Fatalf("SetLastDecrypted error = %v, RewrapCredential error = %v; want both nil", stampErr, rewrapErr)
	}
	want := CloneCred(rec)
	want.WrappedKey = []byte("key-v2")
	want.LastDecryptedDate = &last
	CheckCred(t, s, "c1", 0, want)
	CheckCred(t, s, "c1", 1, want)
}

// testReplaceKeyCheck: the key-check value is replaced only over the exact value the caller read.
func testReplaceKeyCheck(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.ReplaceKeyCheck(ctx, []byte("first"), []byte("second")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ReplaceKeyCheck with none recorded: error = %v, want ErrNotFound", err)
	}
	if _, err := s.KeyCheck(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("KeyCheck after a refused replace: error = %v, want ErrNotFound (nothing recorded)", err)
	}
	if _, err := s.InitKeyCheck(ctx, []byte("first")); err != nil {
		t.Fatal(err)
	}
	check := func(want string) {
		t.Helper()
		if got, err := s.KeyCheck(ctx); err != nil || string(got) != want {
			t.Fatalf("KeyCheck = %q, %v; want %q", got, err, want)
		}
	}
	for _, prev := range []string{"second", "firs", "first\x00", "FIRST"} {
		if err := s.ReplaceKeyCheck(ctx, []byte(prev), []byte("second")); !errors.Is(err, store.ErrRevisionConflict) {
			t.Errorf("ReplaceKeyCheck(prev %q) error = %v, want ErrRevisionConflict", prev, err)
		}
	}
	check("first")
	for _, tt := range []struct {
		name       string
		prev, next []byte
	}{
		{"nil next", []byte("first"), nil},
		{"empty next", []byte("first"), []byte{}},
		{"nil prev", nil, []byte("second")},
		{"empty prev", []byte{}, []byte("second")},
	} {
		err := s.ReplaceKeyCheck(ctx, tt.prev, tt.next)
		if err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrRevisionConflict) {
			t.Errorf("%s: ReplaceKeyCheck error = %v, want an error other than ErrNotFound and ErrRevisionConflict", tt.name, err)
		}
	}
	check("first")
	next := []byte("second")
	if err := s.ReplaceKeyCheck(ctx, []byte("first"), next); err != nil {
		t.Fatalf("ReplaceKeyCheck(first → second) error = %v", err)
	}
	next[0] = 'X' // the store keeps its own copy
	check("second")
	if err := s.ReplaceKeyCheck(ctx, []byte("first"), []byte("third")); !errors.Is(err, store.ErrRevisionConflict) {
		t.Errorf("ReplaceKeyCheck with the replaced value: error = %v, want ErrRevisionConflict", err)
	}
	check("second")
	// InitKeyCheck still keeps what is recorded.
	if held, err := s.InitKeyCheck(ctx, []byte("other")); err != nil || string(held) != "second" {
		t.Errorf("InitKeyCheck after a replace = %q, %v; want second", held, err)
	}
	if has, err := s.HasData(ctx); err != nil || has {
		t.Errorf("HasData with only a key check = %v, %v; want false", has, err)
	}

	t.Run("concurrent", func(t *testing.T) {
		const replacers = 8
		start := make(chan struct{})
		results := make([]error, replacers)
		var wg sync.WaitGroup
		for i := range replacers {
			wg.Go(func() {
				<-start
				results[i] = s.ReplaceKeyCheck(ctx, []byte("second"), fmt.Appendf(nil, "check-of-%d", i))
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range results {
			switch {
			case err == nil && winner >= 0:
				t.Errorf("replacers %d and %d both succeeded", winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, store.ErrRevisionConflict):
				t.Errorf("replacer %d: error = %v, want nil or ErrRevisionConflict", i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("no replace of %d succeeded: %v", replacers, results)
		}
		check(fmt.Sprintf("check-of-%d", winner))
	})
}

// testChangeRequests: a change request round-trips whole (every field, the approvals in order,
// DecidedAt nil or set, times as instants and in UTC); puts are compare-and-set on Version (a second
// create, a stale or future prevVersion, a Version other than prevVersion+1 are ErrRevisionConflict
// and change nothing); ids that cannot be keys are refused; change requests are no credentials,
// services or data.
func testChangeRequests(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, id := range []string{"r1", "", "a\x00b"} {
		if got, err := s.GetChangeRequest(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetChangeRequest(%q) on an empty store = %+v, %v; want ErrNotFound", id, got, err)
		}
	}
	if list, next, err := s.ListChangeRequests(ctx, store.Page{}); err != nil || len(list) != 0 || next != "" {
		t.Errorf("ListChangeRequests on an empty store = %v, %q, %v; want nothing", ChangeKeys(list), next, err)
	}

	v1 := NewChangeRequest("r1", 1)
	PutChange(t, s, v1, 0)
	CheckChange(t, s, "r1", v1)
	v2 := NextChangeRequest(v1)

	t.Run("undecided", func(t *testing.T) {
		got, err := s.GetChangeRequest(ctx, "r1")
		if err != nil {
			t.Fatal(err)
		}
		if got.DecidedAt != nil {
			t.Errorf("DecidedAt = %s, want nil (never set)", showPtr(got.DecidedAt))
		}
	})
	t.Run("create twice", func(t *testing.T) {
		again := NewChangeRequest("r1", 1)
		again.Reason = "another request with the same id"
		if err := s.PutChangeRequest(ctx, again, 0); !errors.Is(err, store.ErrRevisionConflict) {
			t.Errorf("second create error = %v, want ErrRevisionConflict", err)
		}
		CheckChange(t, s, "r1", v1)
	})

	PutChange(t, s, v2, 1)
	CheckChange(t, s, "r1", v2)
	t.Run("times in UTC", func(t *testing.T) {
		got, err := s.GetChangeRequest(ctx, "r1")
		if err != nil {
			t.Fatal(err)
		}
		if got.DecidedAt == nil {
			t.Fatal("DecidedAt = nil, want it set")
		}
		times := map[string]time.Time{"Created": got.Created, "Expires": got.Expires, "DecidedAt": *got.DecidedAt}
		for i, a := range got.Approvals {
			times[fmt.Sprintf("Approvals[%d].At", i)] = a.At
		}
		for name, at := range times {
			if at.Location() != time.UTC {
				t.Errorf("%s = %s, want it in UTC", name, at)
			}
		}
	})

	withVersion := func(id string, version int32) *store.ChangeRequestRecord {
		rec := NextChangeRequest(NewChangeRequest(id, 1))
		rec.Version = version
		rec.Reason = "conflicting"
		return rec
	}
	for _, tt := range []struct {
		name string
		rec  *store.ChangeRequestRecord
		prev int32
	}{
		{"stale prevVersion", withVersion("r1", 2), 1},
		{"prevVersion ahead", withVersion("r1", 4), 3},
		{"Version skips one", withVersion("r1", 4), 2},
		{"Version repeats prevVersion", withVersion("r1", 2), 2},
		{"Version 0", withVersion("r1", 0), 2},
		{"negative prevVersion", withVersion("r1", 0), -1},
		{"create of another id at version 2", withVersion("r2", 2), 0},
		{"create at version 0", withVersion("r3", 0), 0},
		{"update of an unknown id", withVersion("r4", 2), 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.PutChangeRequest(ctx, tt.rec, tt.prev); !errors.Is(err, store.ErrRevisionConflict) {
				t.Errorf("PutChangeRequest(%s version %d, prev %d) error = %v, want ErrRevisionConflict", tt.rec.ID, tt.rec.Version, tt.prev, err)
			}
		})
	}
	CheckChange(t, s, "r1", v2)
	for _, id := range []string{"r2", "r3", "r4"} {
		if _, err := s.GetChangeRequest(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetChangeRequest(%s) after a refused write: error = %v, want ErrNotFound", id, err)
		}
	}
	v3 := NextChangeRequest(v2)
	v3.Status, v3.NoticedStatus = store.ChangeApplied, store.ChangeApplied
	PutChange(t, s, v3, 2)
	CheckChange(t, s, "r1", v3)

	t.Run("zero values", func(t *testing.T) {
		bare := &store.ChangeRequestRecord{ID: "bare", Version: 1}
		PutChange(t, s, bare, 0)
		CheckChange(t, s, "bare", bare)
		got, err := s.GetChangeRequest(ctx, "bare")
		if err != nil {
			t.Fatal(err)
		}
		if got.DecidedAt != nil || !got.Created.IsZero() || !got.Expires.IsZero() || len(got.Approvals) != 0 {
			t.Errorf("GetChangeRequest(bare) = %+v, want zero times, nil DecidedAt and no approvals", got)
		}
	})
	t.Run("empty collections", func(t *testing.T) {
		empty := &store.ChangeRequestRecord{ID: "empty", Version: 1, Approvals: []store.ChangeApproval{}, Change: []byte{}, Summary: []byte{},
			SealedPairs: []byte{}, WrappedKey: []byte{}, DecidedAt: TimePtr(T0)}
		PutChange(t, s, empty, 0)
		CheckChange(t, s, "empty", empty)
	})
	t.Run("ids that cannot be keys", func(t *testing.T) {
		for _, id := range []string{"", "a\x00b"} {
			if err := s.PutChangeRequest(ctx, NewChangeRequest(id, 1), 0); err == nil {
				t.Errorf("PutChangeRequest(%q) error = nil, want an error", id)
			}
		}
		if err := s.PutChangeRequest(ctx, nil, 0); err == nil {
			t.Error("PutChangeRequest(nil) error = nil, want an error")
		}
		list, _, err := s.ListChangeRequests(ctx, store.Page{})
		if err != nil {
			t.Fatal(err)
		}
		if got := ChangeKeys(list); !slices.Equal(got, []string{"bare@1", "empty@1", "r1@3"}) {
			t.Errorf("ListChangeRequests = %v, want [bare@1 empty@1 r1@3]", got)
		}
	})
	// Change requests are not credentials or services, nor data: HasData ignores them.
	t.Run("not data", func(t *testing.T) {
		if has, err := s.HasData(ctx); err != nil || has {
			t.Errorf("HasData with only change requests = %v, %v; want false", has, err)
		}
		if creds, _, err := s.ListCredentials(ctx, store.Page{}); err != nil || len(creds) != 0 {
			t.Errorf("ListCredentials = %v, %v; want none", CredKeys(creds), err)
		}
		if svcs, _, err := s.ListServices(ctx, store.Page{}); err != nil || len(svcs) != 0 {
			t.Errorf("ListServices = %v, %v; want none", ServiceKeys(svcs), err)
		}
		if _, err := s.GetCredential(ctx, "r1"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetCredential(r1) error = %v, want ErrNotFound", err)
		}
	})
}

// testListChangeRequests: change requests list by id (byte order), whatever order they were created
// in and whatever their version, each whole, paged like every listing; a token the listing did not
// issue is ErrBadPageToken.
func testListChangeRequests(t *testing.T, s store.Store) {
	ctx := context.Background()
	ids := []string{"01JB", "01JA", "01JA0", "01J", "01Ja", "01JB-2", "01JC", "z"}
	want := map[string]*store.ChangeRequestRecord{}
	for i, id := range ids {
		rec := NewChangeRequest(id, 1)
		PutChange(t, s, rec, 0)
		if i%3 == 0 {
			rec = NextChangeRequest(rec)
			PutChange(t, s, rec, 1)
		}
		want[id] = rec
	}
	sorted := slices.Sorted(slices.Values(ids))
	for limit := 0; limit <= len(ids)+1; limit++ {
		got, pages := walk(t, limit, func(p store.Page) ([]*store.ChangeRequestRecord, string, error) {
			return s.ListChangeRequests(ctx, p)
		})
		var gotIDs []string
		for _, r := range got {
			gotIDs = append(gotIDs, r.ID)
			if diff := DiffChangeRequest(r, want[r.ID]); diff != "" {
				t.Errorf("limit %d: %s: %s", limit, r.ID, diff)
			}
		}
		if !slices.Equal(gotIDs, sorted) {
			t.Errorf("limit %d: ids = %v, want %v", limit, gotIDs, sorted)
		}
		if wantPages := pageCount(len(ids), limit); pages != wantPages {
			t.Errorf("limit %d: %d pages, want %d", limit, pages, wantPages)
		}
	}
	_, next, err := s.ListChangeRequests(ctx, store.Page{Limit: 2})
	if err != nil || next == "" {
		t.Fatalf("first page: token %q, %v", next, err)
	}
	// Tokens of the other listings are refused too (testBadPageTokens).
	for _, tok := range []string{"garbage", "!!!", next + "!", strings.Repeat("A", 100)} {
		if _, _, err := s.ListChangeRequests(ctx, store.Page{Limit: 2, Token: tok}); !errors.Is(err, store.ErrBadPageToken) {
			t.Errorf("token %q: error = %v, want ErrBadPageToken", tok, err)
		}
	}
}

// testConcurrentChangeRequestWriters: of approvers deciding one request at once (each writing the
// successor of the version they all read), exactly one wins; the others get ErrRevisionConflict, and
// the stored request is the winner's.
func testConcurrentChangeRequestWriters(t *testing.T, s store.Store) {
	const writers = 8
	ctx := context.Background()
	v1 := NewChangeRequest("r1", 1)
	PutChange(t, s, v1, 0)
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, writers)
	recs := make([]*store.ChangeRequestRecord, writers)
	for w := range writers {
		recs[w] = NextChangeRequest(v1)
		recs[w].DecidedBy = fmt.Sprintf("user:approver-%d@example.com", w)
		wg.Go(func() {
			<-start
			errs[w] = s.PutChangeRequest(ctx, CloneChangeRequest(recs[w]), 1)
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for w, err := range errs {
		switch {
		case err == nil && winner < 0:
			winner = w
		case err == nil:
			t.Errorf("writers %d and %d both wrote version 2", winner, w)
		case !errors.Is(err, store.ErrRevisionConflict):
			t.Errorf("writer %d: error = %v, want nil or ErrRevisionConflict", w, err)
		}
	}
	if winner < 0 {
		t.Fatal("no writer won")
	}
	CheckChange(t, s, "r1", recs[winner])
}
