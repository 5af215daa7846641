package secrets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testStoreConformance is the behaviour every Store adapter must have; each adapter's test calls it.
// newStore must return an empty, open store and arrange (t.Cleanup) for it to be closed; it is called
// once per subtest. Records are compared with confDiffCred / confDiffService, which treat nil and empty
// slices and maps as equal (adapters may return either) and compare times with Equal.
func testStoreConformance(t *testing.T, newStore func(t *testing.T) Store) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, s Store)
	}{
		{"CreateAndGet", confCreateAndGet},
		{"GetCredentials", confGetCredentials},
		{"SecondRevisionKeepsHistory", confSecondRevision},
		{"NotFound", confNotFound},
		{"CredentialRevisionConflict", confCredentialRevisionConflict},
		{"ServiceRevisionConflict", confServiceRevisionConflict},
		{"ConcurrentWriters", confConcurrentWriters},
		{"NameUniqueness", confNameUniqueness},
		{"ListCredentials", confListCredentials},
		{"ListAllCredentialRevisions", confListAllCredentialRevisions},
		{"ListCredentialRevisions", confListCredentialRevisions},
		{"ListServices", confListServices},
		{"ListServiceRevisions", confListServiceRevisions},
		{"ListAllServiceRevisions", confListAllServiceRevisions},
		{"BadPageTokens", confBadPageTokens},
		{"CredentialServices", confCredentialServices},
		{"UnknownCredentials", confUnknownCredentials},
		{"BlindCredentials", confBlindCredentials},
		{"Archive", confArchive},
		{"SetLastDecrypted", confSetLastDecrypted},
		{"RecordsAreCopies", confRecordsAreCopies},
		{"CancelledContext", confCancelledContext},
		{"Grants", confGrants},
		{"KeyCheck", confKeyCheck},
		{"HasData", confHasData},
		{"Probe", confProbe},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.run(t, newStore(t))
		})
	}
}

// confT0 has nanoseconds and a non-UTC zone, so lossy time encodings show.
var confT0 = time.Date(2024, 3, 4, 5, 6, 7, 123456789, time.FixedZone("UTC+1", 3600))

func confStr(s string) *string { return &s }

func confTime(t time.Time) *time.Time { return &t }

// confCred returns a credential record with every field set except Documentation (nil) and
// LastDecryptedDate (nil).
func confCred(id, name string, revision int32) *CredentialRecord {
	return &CredentialRecord{
		ID:               id,
		Revision:         revision,
		Name:             name,
		Enabled:          true,
		Metadata:         map[string]string{"team": "infra", "rev": fmt.Sprint(revision)},
		Tags:             []string{"prod", "db"},
		Keys:             []string{"password", "user"},
		SealedPairs:      []byte{0x01, 0x00, 0xff, byte(revision)},
		WrappedKey:       []byte("wrapped-" + id),
		ModifiedDate:     confT0.Add(time.Duration(revision) * time.Minute),
		ModifiedBy:       "alice@example.com",
		LastRotationDate: confTime(confT0.Add(-time.Hour).UTC()),
	}
}

// confNextCred returns the successor revision of rec with some fields changed.
func confNextCred(rec *CredentialRecord) *CredentialRecord {
	next := confCloneCred(rec)
	next.Revision++
	next.Metadata["rev"] = fmt.Sprint(next.Revision)
	next.SealedPairs = append(next.SealedPairs, byte(next.Revision))
	next.ModifiedDate = rec.ModifiedDate.Add(time.Second + 7)
	next.ModifiedBy = "bob@example.com"
	return next
}

func confCloneCred(rec *CredentialRecord) *CredentialRecord {
	c := *rec
	if rec.Documentation != nil {
		c.Documentation = confStr(*rec.Documentation)
	}
	c.Metadata = maps.Clone(rec.Metadata)
	c.Tags = slices.Clone(rec.Tags)
	c.Keys = slices.Clone(rec.Keys)
	c.SealedPairs = bytes.Clone(rec.SealedPairs)
	c.WrappedKey = bytes.Clone(rec.WrappedKey)
	if rec.LastRotationDate != nil {
		c.LastRotationDate = confTime(*rec.LastRotationDate)
	}
	if rec.LastDecryptedDate != nil {
		c.LastDecryptedDate = confTime(*rec.LastDecryptedDate)
	}
	return &c
}

func confService(id string, revision int32, credentials ...string) *ServiceRecord {
	return &ServiceRecord{
		ID:           id,
		Revision:     revision,
		Enabled:      true,
		Account:      confStr("prod-account"),
		Credentials:  credentials,
		ModifiedDate: confT0.Add(time.Duration(revision) * time.Hour),
		ModifiedBy:   "carol@example.com",
	}
}

func confCloneService(rec *ServiceRecord) *ServiceRecord {
	c := *rec
	if rec.Account != nil {
		c.Account = confStr(*rec.Account)
	}
	c.Credentials = slices.Clone(rec.Credentials)
	c.BlindCredentials = slices.Clone(rec.BlindCredentials)
	return &c
}

// confDiffCred describes how got differs from want, "" when equal. nil and empty slices and maps are
// equal; times are compared with Equal; pointers by nil-ness and pointee.
func confDiffCred(got, want *CredentialRecord) string {
	if got == nil || want == nil {
		if got == want {
			return ""
		}
		return fmt.Sprintf("record = %v, want %v", got, want)
	}
	var d []string
	add := func(field string, g, w any) { d = append(d, fmt.Sprintf("%s = %v, want %v", field, g, w)) }
	if got.ID != want.ID {
		add("ID", got.ID, want.ID)
	}
	if got.Revision != want.Revision {
		add("Revision", got.Revision, want.Revision)
	}
	if got.Name != want.Name {
		add("Name", got.Name, want.Name)
	}
	if got.Enabled != want.Enabled {
		add("Enabled", got.Enabled, want.Enabled)
	}
	if !confEqualPtr(got.Documentation, want.Documentation, func(a, b string) bool { return a == b }) {
		add("Documentation", confShowPtr(got.Documentation), confShowPtr(want.Documentation))
	}
	if !maps.Equal(got.Metadata, want.Metadata) {
		add("Metadata", got.Metadata, want.Metadata)
	}
	if !slices.Equal(got.Tags, want.Tags) {
		add("Tags", got.Tags, want.Tags)
	}
	if !slices.Equal(got.Keys, want.Keys) {
		add("Keys", got.Keys, want.Keys)
	}
	if !bytes.Equal(got.SealedPairs, want.SealedPairs) {
		add("SealedPairs", got.SealedPairs, want.SealedPairs)
	}
	if !bytes.Equal(got.WrappedKey, want.WrappedKey) {
		add("WrappedKey", got.WrappedKey, want.WrappedKey)
	}
	if !got.ModifiedDate.Equal(want.ModifiedDate) {
		add("ModifiedDate", got.ModifiedDate, want.ModifiedDate)
	}
	if got.ModifiedBy != want.ModifiedBy {
		add("ModifiedBy", got.ModifiedBy, want.ModifiedBy)
	}
	if !confEqualPtr(got.LastRotationDate, want.LastRotationDate, time.Time.Equal) {
		add("LastRotationDate", confShowPtr(got.LastRotationDate), confShowPtr(want.LastRotationDate))
	}
	if !confEqualPtr(got.LastDecryptedDate, want.LastDecryptedDate, time.Time.Equal) {
		add("LastDecryptedDate", confShowPtr(got.LastDecryptedDate), confShowPtr(want.LastDecryptedDate))
	}
	return strings.Join(d, "; ")
}

// confDiffService is confDiffCred for services.
func confDiffService(got, want *ServiceRecord) string {
	if got == nil || want == nil {
		if got == want {
			return ""
		}
		return fmt.Sprintf("record = %v, want %v", got, want)
	}
	var d []string
	add := func(field string, g, w any) { d = append(d, fmt.Sprintf("%s = %v, want %v", field, g, w)) }
	if got.ID != want.ID {
		add("ID", got.ID, want.ID)
	}
	if got.Revision != want.Revision {
		add("Revision", got.Revision, want.Revision)
	}
	if got.Enabled != want.Enabled {
		add("Enabled", got.Enabled, want.Enabled)
	}
	if !confEqualPtr(got.Account, want.Account, func(a, b string) bool { return a == b }) {
		add("Account", confShowPtr(got.Account), confShowPtr(want.Account))
	}
	if !slices.Equal(got.Credentials, want.Credentials) {
		add("Credentials", got.Credentials, want.Credentials)
	}
	if !slices.Equal(got.BlindCredentials, want.BlindCredentials) {
		add("BlindCredentials", got.BlindCredentials, want.BlindCredentials)
	}
	if !got.ModifiedDate.Equal(want.ModifiedDate) {
		add("ModifiedDate", got.ModifiedDate, want.ModifiedDate)
	}
	if got.ModifiedBy != want.ModifiedBy {
		add("ModifiedBy", got.ModifiedBy, want.ModifiedBy)
	}
	return strings.Join(d, "; ")
}

func confEqualPtr[T any](a, b *T, eq func(T, T) bool) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return eq(*a, *b)
}

func confShowPtr[T any](p *T) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprintf("&%v", *p)
}

func confPutCred(t *testing.T, s Store, rec *CredentialRecord, prev int32) {
	t.Helper()
	if err := s.PutCredential(context.Background(), confCloneCred(rec), prev); err != nil {
		t.Fatalf("PutCredential(%s rev %d, prev %d) error = %v", rec.ID, rec.Revision, prev, err)
	}
}

func confPutService(t *testing.T, s Store, rec *ServiceRecord, prev int32) {
	t.Helper()
	if err := s.PutService(context.Background(), confCloneService(rec), prev); err != nil {
		t.Fatalf("PutService(%s rev %d, prev %d) error = %v", rec.ID, rec.Revision, prev, err)
	}
}

// confCheckCred fails unless GetCredential (revision 0) or GetCredentialRevision returns want.
func confCheckCred(t *testing.T, s Store, id string, revision int32, want *CredentialRecord) {
	t.Helper()
	var got *CredentialRecord
	var err error
	what := fmt.Sprintf("GetCredentialRevision(%s, %d)", id, revision)
	if revision == 0 {
		what = fmt.Sprintf("GetCredential(%s)", id)
		got, err = s.GetCredential(context.Background(), id)
	} else {
		got, err = s.GetCredentialRevision(context.Background(), id, revision)
	}
	if err != nil {
		t.Fatalf("%s error = %v", what, err)
	}
	if diff := confDiffCred(got, want); diff != "" {
		t.Errorf("%s: %s", what, diff)
	}
}

func confCheckService(t *testing.T, s Store, id string, revision int32, want *ServiceRecord) {
	t.Helper()
	var got *ServiceRecord
	var err error
	what := fmt.Sprintf("GetServiceRevision(%s, %d)", id, revision)
	if revision == 0 {
		what = fmt.Sprintf("GetService(%s)", id)
		got, err = s.GetService(context.Background(), id)
	} else {
		got, err = s.GetServiceRevision(context.Background(), id, revision)
	}
	if err != nil {
		t.Fatalf("%s error = %v", what, err)
	}
	if diff := confDiffService(got, want); diff != "" {
		t.Errorf("%s: %s", what, diff)
	}
}

// confWalk pages through a listing with limit and returns every item and the number of pages. It
// checks that non-final pages are full, that no page exceeds the limit and that it ends.
func confWalk[T any](t *testing.T, limit int, list func(Page) ([]T, string, error)) ([]T, int) {
	t.Helper()
	var all []T
	token := ""
	for pages := 1; ; pages++ {
		if pages > 1000 {
			t.Fatalf("limit %d: still paging after 1000 pages", limit)
		}
		items, next, err := list(Page{Limit: limit, Token: token})
		if err != nil {
			t.Fatalf("limit %d, page %d: error = %v", limit, pages, err)
		}
		if limit > 0 && len(items) > limit {
			t.Fatalf("limit %d, page %d: got %d items", limit, pages, len(items))
		}
		all = append(all, items...)
		if next == "" {
			return all, pages
		}
		if limit > 0 && len(items) != limit {
			t.Fatalf("limit %d, page %d: got %d items and next token %q; only the last page may be short", limit, pages, len(items), next)
		}
		if limit == 0 {
			t.Fatalf("limit 0: got next token %q, want \"\"", next)
		}
		token = next
	}
}

// confCredKeys renders records as "id@revision" for order comparisons.
func confCredKeys(recs []*CredentialRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprintf("%s@%d", r.ID, r.Revision)
	}
	return out
}

func confServiceKeys(recs []*ServiceRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprintf("%s@%d", r.ID, r.Revision)
	}
	return out
}

// confPages returns how many pages a listing of n items has with limit (limit 0: one page).
func confPages(n, limit int) int {
	if limit == 0 || n == 0 {
		return 1
	}
	return (n + limit - 1) / limit
}

func confCreateAndGet(t *testing.T, s Store) {
	bare := &CredentialRecord{ID: "bare", Revision: 1, Name: "bare", ModifiedDate: confT0}
	empty := &CredentialRecord{
		ID: "empty", Revision: 1, Name: "empty", Metadata: map[string]string{}, Tags: []string{},
		Keys: []string{}, SealedPairs: []byte{}, WrappedKey: []byte{}, ModifiedDate: confT0,
	}
	documented := confCred("documented", "documented", 1)
	documented.Documentation = confStr("rotate monthly")
	documented.LastDecryptedDate = confTime(confT0.Add(time.Nanosecond))
	tests := []struct {
		name string
		rec  *CredentialRecord
	}{
		{"all fields, nil documentation", confCred("full", "full", 1)},
		{"documentation and last decrypted set", documented},
		{"zero values", bare},
		{"empty collections", empty},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			confPutCred(t, s, tt.rec, 0)
			confCheckCred(t, s, tt.rec.ID, 0, tt.rec)
			confCheckCred(t, s, tt.rec.ID, 1, tt.rec)
			got, err := s.GetCredential(context.Background(), tt.rec.ID)
			if err != nil {
				t.Fatal(err)
			}
			if (got.Documentation == nil) != (tt.rec.Documentation == nil) {
				t.Errorf("Documentation = %s, want %s", confShowPtr(got.Documentation), confShowPtr(tt.rec.Documentation))
			}
		})
	}

	t.Run("service", func(t *testing.T) {
		confPutCred(t, s, confCred("c1", "c1", 1), 0)
		noAccount := confService("no-account", 1)
		noAccount.Account = nil
		for _, rec := range []*ServiceRecord{confService("svc", 1, "c1"), noAccount} {
			confPutService(t, s, rec, 0)
			confCheckService(t, s, rec.ID, 0, rec)
			confCheckService(t, s, rec.ID, 1, rec)
		}
	})
}

func confSecondRevision(t *testing.T, s Store) {
	rev1 := confCred("c1", "first", 1)
	confPutCred(t, s, rev1, 0)
	rev2 := confNextCred(rev1)
	rev2.Name = "renamed"
	rev2.Enabled = false
	rev2.Documentation = confStr("now documented")
	rev2.Tags = nil
	rev2.LastRotationDate = nil
	confPutCred(t, s, rev2, 1)

	confCheckCred(t, s, "c1", 0, rev2)
	confCheckCred(t, s, "c1", 2, rev2)
	confCheckCred(t, s, "c1", 1, rev1) // history is immutable

	svc1 := confService("svc", 1)
	confPutService(t, s, svc1, 0)
	svc2 := confCloneService(svc1)
	svc2.Revision = 2
	svc2.Credentials = []string{"c1"}
	svc2.Enabled = false
	confPutService(t, s, svc2, 1)
	confCheckService(t, s, "svc", 0, svc2)
	confCheckService(t, s, "svc", 2, svc2)
	confCheckService(t, s, "svc", 1, svc1)
}

func confNotFound(t *testing.T, s Store) {
	ctx := context.Background()
	confPutCred(t, s, confCred("c1", "c1", 1), 0)
	confPutService(t, s, confService("svc", 1), 0)
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
		{"ListCredentialRevisions unknown id", func() error { _, _, err := s.ListCredentialRevisions(ctx, "nope", Page{}); return err }},
		{"SetLastDecrypted unknown id", func() error { return s.SetLastDecrypted(ctx, "nope", 1, confT0) }},
		{"ArchiveCredential unknown id", func() error { return s.ArchiveCredential(ctx, "nope", 1, confT0) }},
		{"GetArchivedCredential unknown id", func() error { _, err := s.GetArchivedCredential(ctx, "nope"); return err }},
		{"GetArchivedCredential live credential", func() error { _, err := s.GetArchivedCredential(ctx, "c1"); return err }},
		{"GetService unknown id", func() error { _, err := s.GetService(ctx, "nope"); return err }},
		{"GetService credential id", func() error { _, err := s.GetService(ctx, "c1"); return err }},
		{"GetServiceRevision revision 0", func() error { _, err := s.GetServiceRevision(ctx, "svc", 0); return err }},
		{"GetServiceRevision revision 99", func() error { _, err := s.GetServiceRevision(ctx, "svc", 99); return err }},
		{"GetServiceRevision unknown id", func() error { _, err := s.GetServiceRevision(ctx, "nope", 1); return err }},
		{"ListServiceRevisions unknown id", func() error { _, _, err := s.ListServiceRevisions(ctx, "nope", Page{}); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, ErrNotFound) {
				t.Errorf("error = %v, want ErrNotFound", err)
			}
		})
	}
}

func confCredentialRevisionConflict(t *testing.T, s Store) {
	ctx := context.Background()
	rev1 := confCred("c1", "c1", 1)
	rev2 := confNextCred(rev1)
	confPutCred(t, s, rev1, 0)
	confPutCred(t, s, rev2, 1)
	with := func(id string, revision int32) *CredentialRecord { return confCred(id, "conflict-"+id, revision) }
	tests := []struct {
		name string
		rec  *CredentialRecord
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
			if err := s.PutCredential(ctx, tt.rec, tt.prev); !errors.Is(err, ErrRevisionConflict) {
				t.Fatalf("PutCredential(%s rev %d, prev %d) error = %v, want ErrRevisionConflict", tt.rec.ID, tt.rec.Revision, tt.prev, err)
			}
			confCheckCred(t, s, "c1", 0, rev2)
			confCheckCred(t, s, "c1", 1, rev1)
			if _, err := s.GetCredentialRevision(ctx, "c1", 3); !errors.Is(err, ErrNotFound) {
				t.Errorf("GetCredentialRevision(c1, 3) error = %v, want ErrNotFound", err)
			}
			if _, err := s.GetCredential(ctx, "new"); !errors.Is(err, ErrNotFound) {
				t.Errorf("GetCredential(new) error = %v, want ErrNotFound", err)
			}
		})
	}
}

func confServiceRevisionConflict(t *testing.T, s Store) {
	ctx := context.Background()
	rev1 := confService("svc", 1)
	rev2 := confService("svc", 2)
	confPutService(t, s, rev1, 0)
	confPutService(t, s, rev2, 1)
	tests := []struct {
		name string
		rec  *ServiceRecord
		prev int32
	}{
		{"create an existing id", confService("svc", 1), 0},
		{"stale prevRevision", confService("svc", 2), 1},
		{"prevRevision ahead of the store", confService("svc", 4), 3},
		{"skipping a revision", confService("svc", 4), 2},
		{"create with prevRevision 1", confService("new", 2), 1},
		{"create skipping revision 1", confService("new", 2), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.rec.ModifiedBy = "conflicting writer"
			if err := s.PutService(ctx, tt.rec, tt.prev); !errors.Is(err, ErrRevisionConflict) {
				t.Fatalf("PutService(%s rev %d, prev %d) error = %v, want ErrRevisionConflict", tt.rec.ID, tt.rec.Revision, tt.prev, err)
			}
			confCheckService(t, s, "svc", 0, rev2)
			confCheckService(t, s, "svc", 1, rev1)
			if _, err := s.GetService(ctx, "new"); !errors.Is(err, ErrNotFound) {
				t.Errorf("GetService(new) error = %v, want ErrNotFound", err)
			}
		})
	}
}

func confConcurrentWriters(t *testing.T, s Store) {
	const writers, attempts = 8, 20
	ctx := context.Background()
	confPutCred(t, s, confCred("c1", "shared", 1), 0)

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
				next := confNextCred(cur)
				next.ModifiedBy = fmt.Sprintf("writer-%d", w)
				switch err := s.PutCredential(ctx, next, cur.Revision); {
				case err == nil:
					successes.Add(1)
				case errors.Is(err, ErrRevisionConflict):
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
	history, _, err := s.ListCredentialRevisions(ctx, "c1", Page{})
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
	if diff := confDiffCred(last, cur); diff != "" {
		t.Errorf("history revision %d differs from the current record: %s", want, diff)
	}
}

func confNameUniqueness(t *testing.T, s Store) {
	ctx := context.Background()
	steps := []struct {
		name    string
		rec     *CredentialRecord
		prev    int32
		takenBy string // "" = success
	}{
		{"create alpha", confCred("c1", "alpha", 1), 0, ""},
		{"another credential with the same name", confCred("c2", "alpha", 1), 0, "c1"},
		{"the name in another case is another name", confCred("c2", "Alpha", 1), 0, ""},
		{"keeping its own name", confCred("c1", "alpha", 2), 1, ""},
		{"renaming into a taken name", confCred("c1", "Alpha", 3), 2, "c2"},
		{"renaming frees the old name", confCred("c1", "beta", 3), 2, ""},
		{"the freed name can be taken", confCred("c3", "alpha", 1), 0, ""},
		{"the new name is taken", confCred("c4", "beta", 1), 0, "c1"},
		{"the holder is the current one, not a former one", confCred("c2", "alpha", 2), 1, "c3"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			before, beforeErr := s.GetCredential(ctx, st.rec.ID)
			err := s.PutCredential(ctx, confCloneCred(st.rec), st.prev)
			if st.takenBy == "" {
				if err != nil {
					t.Fatalf("PutCredential(%s %q) error = %v, want nil", st.rec.ID, st.rec.Name, err)
				}
				confCheckCred(t, s, st.rec.ID, 0, st.rec)
				return
			}
			var taken *NameTakenError
			if !errors.As(err, &taken) {
				t.Fatalf("PutCredential(%s %q) error = %v, want *NameTakenError", st.rec.ID, st.rec.Name, err)
			}
			if taken.ID != st.takenBy {
				t.Errorf("NameTakenError.ID = %q, want %q", taken.ID, st.takenBy)
			}
			after, afterErr := s.GetCredential(ctx, st.rec.ID)
			if beforeErr != nil {
				if !errors.Is(afterErr, ErrNotFound) {
					t.Errorf("after the refused create GetCredential(%s) error = %v, want ErrNotFound", st.rec.ID, afterErr)
				}
				return
			}
			if afterErr != nil {
				t.Fatal(afterErr)
			}
			if diff := confDiffCred(after, before); diff != "" {
				t.Errorf("refused write changed the record: %s", diff)
			}
		})
	}
}

func confListCredentials(t *testing.T, s Store) {
	ctx := context.Background()
	// Case-insensitive order by name, then id: a@id-0, A@id-1, b, c.
	for _, c := range []struct{ id, name string }{
		{"id-3", "b"}, {"id-1", "A"}, {"id-4", "c"}, {"id-0", "a"},
	} {
		confPutCred(t, s, confCred(c.id, c.name, 1), 0)
	}
	// A later revision of id-3: the listing shows current records only.
	confPutCred(t, s, confNextCred(confCred("id-3", "b", 1)), 1)
	want := []string{"id-0@1", "id-1@1", "id-3@2", "id-4@1"}

	list := func(p Page) ([]*CredentialRecord, string, error) { return s.ListCredentials(ctx, p) }
	for _, limit := range []int{0, 1, 2, 3, 4, 5} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			got, pages := confWalk(t, limit, list)
			if !slices.Equal(confCredKeys(got), want) {
				t.Errorf("items = %v, want %v", confCredKeys(got), want)
			}
			if wantPages := confPages(len(want), limit); pages != wantPages {
				t.Errorf("pages = %d, want %d", pages, wantPages)
			}
			for _, rec := range got {
				confCheckCred(t, s, rec.ID, 0, rec)
			}
		})
	}
	t.Run("names", func(t *testing.T) {
		got, _, err := s.ListCredentials(ctx, Page{})
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
}

func confListAllCredentialRevisions(t *testing.T, s Store) {
	ctx := context.Background()
	b1 := confCred("c1", "b", 1)
	d2 := confNextCred(b1)
	d2.Name = "d" // revision 2 of c1 sorts under its own name
	confPutCred(t, s, b1, 0)
	confPutCred(t, s, d2, 1)
	confPutCred(t, s, confCred("c2", "A", 1), 0)
	confPutCred(t, s, confCred("c3", "c", 1), 0)
	c3r2 := confNextCred(confCred("c3", "c", 1))
	confPutCred(t, s, c3r2, 1)
	want := []string{"c2@1", "c1@1", "c3@1", "c3@2", "c1@2"}

	list := func(p Page) ([]*CredentialRecord, string, error) { return s.ListAllCredentialRevisions(ctx, p) }
	for _, limit := range []int{0, 1, 2, 3, 5, 6} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			got, pages := confWalk(t, limit, list)
			if !slices.Equal(confCredKeys(got), want) {
				t.Errorf("items = %v, want %v", confCredKeys(got), want)
			}
			if wantPages := confPages(len(want), limit); pages != wantPages {
				t.Errorf("pages = %d, want %d", pages, wantPages)
			}
		})
	}
	t.Run("records", func(t *testing.T) {
		got, _, err := s.ListAllCredentialRevisions(ctx, Page{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("got %d records, want %d", len(got), len(want))
		}
		for i, w := range []*CredentialRecord{nil, b1, nil, c3r2, d2} {
			if w == nil {
				continue
			}
			if diff := confDiffCred(got[i], w); diff != "" {
				t.Errorf("item %d: %s", i, diff)
			}
		}
	})
}

func confListCredentialRevisions(t *testing.T, s Store) {
	ctx := context.Background()
	var revs []*CredentialRecord
	rec := confCred("c1", "one", 1)
	for r := int32(1); r <= 5; r++ {
		confPutCred(t, s, rec, r-1)
		revs = append(revs, rec)
		rec = confNextCred(rec)
	}
	// Neighbours whose keys sort right before and after c1's.
	confPutCred(t, s, confCred("c", "c", 1), 0)
	confPutCred(t, s, confCred("c10", "c10", 1), 0)
	want := []string{"c1@1", "c1@2", "c1@3", "c1@4", "c1@5"}

	list := func(p Page) ([]*CredentialRecord, string, error) { return s.ListCredentialRevisions(ctx, "c1", p) }
	for _, limit := range []int{0, 1, 2, 5, 6} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			got, pages := confWalk(t, limit, list)
			if !slices.Equal(confCredKeys(got), want) {
				t.Fatalf("items = %v, want %v", confCredKeys(got), want)
			}
			if wantPages := confPages(len(want), limit); pages != wantPages {
				t.Errorf("pages = %d, want %d", pages, wantPages)
			}
			for i := range got {
				if diff := confDiffCred(got[i], revs[i]); diff != "" {
					t.Errorf("revision %d: %s", i+1, diff)
				}
			}
		})
	}
}

func confListServices(t *testing.T, s Store) {
	ctx := context.Background()
	for _, id := range []string{"svc-b", "SVC-a", "svc-c", "svc-A"} {
		confPutService(t, s, confService(id, 1), 0)
	}
	confPutService(t, s, confService("svc-b", 2), 1)
	// Lower-case id, then id: "SVC-a" < "svc-A" bytewise, both "svc-a" in lower case.
	want := []string{"SVC-a@1", "svc-A@1", "svc-b@2", "svc-c@1"}
	list := func(p Page) ([]*ServiceRecord, string, error) { return s.ListServices(ctx, p) }
	for _, limit := range []int{0, 1, 2, 3, 4, 5} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			got, pages := confWalk(t, limit, list)
			if !slices.Equal(confServiceKeys(got), want) {
				t.Errorf("items = %v, want %v", confServiceKeys(got), want)
			}
			if wantPages := confPages(len(want), limit); pages != wantPages {
				t.Errorf("pages = %d, want %d", pages, wantPages)
			}
			for _, rec := range got {
				confCheckService(t, s, rec.ID, 0, rec)
			}
		})
	}
}

func confListServiceRevisions(t *testing.T, s Store) {
	ctx := context.Background()
	var revs []*ServiceRecord
	for r := int32(1); r <= 4; r++ {
		rec := confService("svc", r)
		rec.ModifiedBy = fmt.Sprintf("writer %d", r)
		confPutService(t, s, rec, r-1)
		revs = append(revs, rec)
	}
	confPutService(t, s, confService("svc0", 1), 0)
	want := []string{"svc@1", "svc@2", "svc@3", "svc@4"}
	list := func(p Page) ([]*ServiceRecord, string, error) { return s.ListServiceRevisions(ctx, "svc", p) }
	for _, limit := range []int{0, 1, 3, 4, 5} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			got, pages := confWalk(t, limit, list)
			if !slices.Equal(confServiceKeys(got), want) {
				t.Fatalf("items = %v, want %v", confServiceKeys(got), want)
			}
			if wantPages := confPages(len(want), limit); pages != wantPages {
				t.Errorf("pages = %d, want %d", pages, wantPages)
			}
			for i := range got {
				if diff := confDiffService(got[i], revs[i]); diff != "" {
					t.Errorf("revision %d: %s", i+1, diff)
				}
			}
		})
	}
}

func confListAllServiceRevisions(t *testing.T, s Store) {
	ctx := context.Background()
	confPutService(t, s, confService("b", 1), 0)
	confPutService(t, s, confService("b", 2), 1)
	confPutService(t, s, confService("A", 1), 0)
	confPutService(t, s, confService("c", 1), 0)
	confPutService(t, s, confService("c", 2), 1)
	confPutService(t, s, confService("c", 3), 2)
	want := []string{"A@1", "b@1", "b@2", "c@1", "c@2", "c@3"}
	list := func(p Page) ([]*ServiceRecord, string, error) { return s.ListAllServiceRevisions(ctx, p) }
	for _, limit := range []int{0, 1, 2, 4, 6, 7} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			got, pages := confWalk(t, limit, list)
			if !slices.Equal(confServiceKeys(got), want) {
				t.Errorf("items = %v, want %v", confServiceKeys(got), want)
			}
			if wantPages := confPages(len(want), limit); pages != wantPages {
				t.Errorf("pages = %d, want %d", pages, wantPages)
			}
		})
	}
}

func confBadPageTokens(t *testing.T, s Store) {
	ctx := context.Background()
	for _, id := range []string{"c1", "c2"} {
		rec := confCred(id, "name-"+id, 1)
		confPutCred(t, s, rec, 0)
		confPutCred(t, s, confNextCred(rec), 1)
	}
	for _, id := range []string{"s1", "s2"} {
		confPutService(t, s, confService(id, 1), 0)
		confPutService(t, s, confService(id, 2), 1)
	}

	type listing struct {
		name string
		list func(Page) (int, string, error)
	}
	creds := func(f func(Page) ([]*CredentialRecord, string, error)) func(Page) (int, string, error) {
		return func(p Page) (int, string, error) { r, n, err := f(p); return len(r), n, err }
	}
	svcs := func(f func(Page) ([]*ServiceRecord, string, error)) func(Page) (int, string, error) {
		return func(p Page) (int, string, error) { r, n, err := f(p); return len(r), n, err }
	}
	listings := []listing{
		{"ListCredentials", creds(func(p Page) ([]*CredentialRecord, string, error) { return s.ListCredentials(ctx, p) })},
		{"ListCredentialRevisions(c1)", creds(func(p Page) ([]*CredentialRecord, string, error) { return s.ListCredentialRevisions(ctx, "c1", p) })},
		{"ListCredentialRevisions(c2)", creds(func(p Page) ([]*CredentialRecord, string, error) { return s.ListCredentialRevisions(ctx, "c2", p) })},
		{"ListAllCredentialRevisions", creds(func(p Page) ([]*CredentialRecord, string, error) { return s.ListAllCredentialRevisions(ctx, p) })},
		{"ListServices", svcs(func(p Page) ([]*ServiceRecord, string, error) { return s.ListServices(ctx, p) })},
		{"ListServiceRevisions(s1)", svcs(func(p Page) ([]*ServiceRecord, string, error) { return s.ListServiceRevisions(ctx, "s1", p) })},
		{"ListServiceRevisions(s2)", svcs(func(p Page) ([]*ServiceRecord, string, error) { return s.ListServiceRevisions(ctx, "s2", p) })},
		{"ListAllServiceRevisions", svcs(func(p Page) ([]*ServiceRecord, string, error) { return s.ListAllServiceRevisions(ctx, p) })},
	}
	// A real first-page token of every listing; each must work for its own listing.
	tokens := make(map[string]string)
	for _, l := range listings {
		n, next, err := l.list(Page{Limit: 1})
		if err != nil || n != 1 || next == "" {
			t.Fatalf("%s first page = %d items, token %q, %v; want 1 item and a token", l.name, n, next, err)
		}
		if n, _, err := l.list(Page{Limit: 1, Token: next}); err != nil || n != 1 {
			t.Fatalf("%s with its own token = %d items, %v; want 1 item", l.name, n, err)
		}
		tokens[l.name] = next
	}

	garbage := []string{"!!!", "not base64 at all", "AAAA", "x", "////", "%%", tokens["ListCredentials"] + "!", strings.Repeat("A", 100)}
	for _, l := range listings {
		for _, tok := range garbage {
			t.Run(fmt.Sprintf("%s with garbage %q", l.name, tok), func(t *testing.T) {
				if _, _, err := l.list(Page{Limit: 1, Token: tok}); !errors.Is(err, ErrBadPageToken) {
					t.Errorf("error = %v, want ErrBadPageToken", err)
				}
			})
		}
		for _, other := range listings {
			if other.name == l.name {
				continue
			}
			t.Run(fmt.Sprintf("%s with a token of %s", l.name, other.name), func(t *testing.T) {
				if _, _, err := l.list(Page{Limit: 1, Token: tokens[other.name]}); !errors.Is(err, ErrBadPageToken) {
					t.Errorf("error = %v, want ErrBadPageToken", err)
				}
			})
		}
	}
}

func confCredentialServices(t *testing.T, s Store) {
	ctx := context.Background()
	for _, id := range []string{"c1", "c2", "c3"} {
		confPutCred(t, s, confCred(id, id, 1), 0)
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
		svc  *ServiceRecord
		prev int32
		want map[string][]string
	}{
		{"svc-b maps c1 and c2", confService("svc-b", 1, "c2", "c1"), 0,
			map[string][]string{"c1": {"svc-b"}, "c2": {"svc-b"}, "c3": nil}},
		{"svc-a maps c1 (sorted result)", confService("svc-a", 1, "c1"), 0,
			map[string][]string{"c1": {"svc-a", "svc-b"}, "c2": {"svc-b"}, "c3": nil}},
		{"svc-b moves to c3", confService("svc-b", 2, "c3"), 1,
			map[string][]string{"c1": {"svc-a"}, "c2": nil, "c3": {"svc-b"}}},
		{"svc-a maps c1 twice", confService("svc-a", 2, "c1", "c1"), 1,
			map[string][]string{"c1": {"svc-a"}, "c2": nil, "c3": {"svc-b"}}},
		{"svc-a maps nothing", confService("svc-a", 3), 2,
			map[string][]string{"c1": nil, "c2": nil, "c3": {"svc-b"}}},
		{"svc-c1 (an id extending c1's) maps c1", confService("svc-c1", 1, "c1"), 0,
			map[string][]string{"c1": {"svc-c1"}, "c2": nil, "c3": {"svc-b"}}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			confPutService(t, s, st.svc, st.prev)
			check(t, st.want)
		})
	}
}

func confUnknownCredentials(t *testing.T, s Store) {
	ctx := context.Background()
	confPutCred(t, s, confCred("c1", "c1", 1), 0)
	confPutCred(t, s, confCred("c2", "c2", 1), 0)

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
			err := s.PutService(ctx, confService("svc", 1, tt.credentials...), 0)
			var unknown *UnknownCredentialsError
			if !errors.As(err, &unknown) {
				t.Fatalf("PutService error = %v, want *UnknownCredentialsError", err)
			}
			if !slices.Equal(unknown.IDs, tt.want) {
				t.Errorf("UnknownCredentialsError.IDs = %q, want %q", unknown.IDs, tt.want)
			}
			if _, err := s.GetService(ctx, "svc"); !errors.Is(err, ErrNotFound) {
				t.Errorf("GetService after the refused create: error = %v, want ErrNotFound", err)
			}
			if got, err := s.CredentialServices(ctx, "c1"); err != nil || len(got) != 0 {
				t.Errorf("CredentialServices(c1) = %v, %v; want none", got, err)
			}
		})
	}

	rev1 := confService("svc", 1, "c1")
	confPutService(t, s, rev1, 0)
	for _, tt := range tests {
		t.Run("update/"+tt.name, func(t *testing.T) {
			err := s.PutService(ctx, confService("svc", 2, tt.credentials...), 1)
			var unknown *UnknownCredentialsError
			if !errors.As(err, &unknown) {
				t.Fatalf("PutService error = %v, want *UnknownCredentialsError", err)
			}
			if !slices.Equal(unknown.IDs, tt.want) {
				t.Errorf("UnknownCredentialsError.IDs = %q, want %q", unknown.IDs, tt.want)
			}
			confCheckService(t, s, "svc", 0, rev1)
			if _, err := s.GetServiceRevision(ctx, "svc", 2); !errors.Is(err, ErrNotFound) {
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

func confBlindCredentials(t *testing.T, s Store) {
	ctx := context.Background()
	rec := confService("svc", 1)
	rec.BlindCredentials = []string{"blind-z", "blind-a", "blind-z", "Not Even An ID"}
	confPutService(t, s, rec, 0)
	confCheckService(t, s, "svc", 0, rec)
	confCheckService(t, s, "svc", 1, rec)
	for _, id := range rec.BlindCredentials {
		if got, err := s.CredentialServices(ctx, id); err != nil || len(got) != 0 {
			t.Errorf("CredentialServices(%q) = %v, %v; blind credentials are not mapped", id, got, err)
		}
	}
}

func confArchive(t *testing.T, s Store) {
	ctx := context.Background()
	rev1 := confCred("c1", "db-old", 1)
	rev2 := confNextCred(rev1)
	rev2.Name = "db"
	confPutCred(t, s, rev1, 0)
	confPutCred(t, s, rev2, 1)
	confPutCred(t, s, confCred("c2", "other", 1), 0)
	confPutService(t, s, confService("svc", 1, "c1", "c2"), 0)
	at := confT0.Add(48 * time.Hour)

	t.Run("refused", func(t *testing.T) {
		if err := s.ArchiveCredential(ctx, "c1", 2, at); !errors.Is(err, ErrStillMapped) {
			t.Errorf("ArchiveCredential while mapped: error = %v, want ErrStillMapped", err)
		}
		confPutService(t, s, confService("svc", 2, "c2"), 1)
		for _, prev := range []int32{0, 1, 3} {
			if err := s.ArchiveCredential(ctx, "c1", prev, at); !errors.Is(err, ErrRevisionConflict) {
				t.Errorf("ArchiveCredential(prev %d) error = %v, want ErrRevisionConflict", prev, err)
			}
		}
		confCheckCred(t, s, "c1", 0, rev2)
		confCheckCred(t, s, "c1", 1, rev1)
		if _, err := s.GetArchivedCredential(ctx, "c1"); !errors.Is(err, ErrNotFound) {
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
			{"ListCredentialRevisions", func() error { _, _, err := s.ListCredentialRevisions(ctx, "c1", Page{}); return err }},
			{"SetLastDecrypted", func() error { return s.SetLastDecrypted(ctx, "c1", 2, at) }},
			{"ArchiveCredential again", func() error { return s.ArchiveCredential(ctx, "c1", 2, at) }},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if err := tt.call(); !errors.Is(err, ErrNotFound) {
					t.Errorf("error = %v, want ErrNotFound", err)
				}
			})
		}
	})

	t.Run("gone from listings and indexes", func(t *testing.T) {
		list, _, err := s.ListCredentials(ctx, Page{})
		if err != nil || !slices.Equal(confCredKeys(list), []string{"c2@1"}) {
			t.Errorf("ListCredentials = %v, %v; want [c2@1]", confCredKeys(list), err)
		}
		all, _, err := s.ListAllCredentialRevisions(ctx, Page{})
		if err != nil || !slices.Equal(confCredKeys(all), []string{"c2@1"}) {
			t.Errorf("ListAllCredentialRevisions = %v, %v; want [c2@1]", confCredKeys(all), err)
		}
		if got, err := s.CredentialServices(ctx, "c1"); err != nil || len(got) != 0 {
			t.Errorf("CredentialServices(c1) = %v, %v; want none", got, err)
		}
		err = s.PutService(ctx, confService("svc", 3, "c1"), 2)
		var unknown *UnknownCredentialsError
		if !errors.As(err, &unknown) || !slices.Equal(unknown.IDs, []string{"c1"}) {
			t.Errorf("PutService mapping the archived credential: error = %v, want UnknownCredentialsError [c1]", err)
		}
		if err := s.PutCredential(ctx, confNextCred(rev2), 2); !errors.Is(err, ErrRevisionConflict) {
			t.Errorf("PutCredential(c1 rev 3, prev 2) error = %v, want ErrRevisionConflict", err)
		}
	})

	t.Run("name is free", func(t *testing.T) {
		for _, rec := range []*CredentialRecord{confCred("c3", "db", 1), confCred("c4", "db-old", 1)} {
			confPutCred(t, s, rec, 0)
			confCheckCred(t, s, rec.ID, 0, rec)
		}
	})

	t.Run("archived record", func(t *testing.T) {
		got, err := s.GetArchivedCredential(ctx, "c1")
		if err != nil {
			t.Fatalf("GetArchivedCredential error = %v", err)
		}
		if diff := confDiffCred(got, rev2); diff != "" {
			t.Errorf("GetArchivedCredential: %s", diff)
		}
		if _, err := s.GetArchivedCredential(ctx, "c2"); !errors.Is(err, ErrNotFound) {
			t.Errorf("GetArchivedCredential(c2) error = %v, want ErrNotFound", err)
		}
	})
}

func confSetLastDecrypted(t *testing.T, s Store) {
	ctx := context.Background()
	rev1 := confCred("c1", "c1", 1)
	rev2 := confNextCred(rev1)
	confPutCred(t, s, rev1, 0)
	confPutCred(t, s, rev2, 1)
	t1 := confT0.Add(time.Hour + 3*time.Nanosecond)
	t2 := confT0.Add(2*time.Hour + 5*time.Nanosecond)

	wantCur := confCloneCred(rev2)
	wantRev1 := confCloneCred(rev1)
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
			confCheckCred(t, s, "c1", 0, wantCur)
			confCheckCred(t, s, "c1", 2, wantCur)
			confCheckCred(t, s, "c1", 1, wantRev1)
			if _, err := s.GetCredentialRevision(ctx, "c1", 3); !errors.Is(err, ErrNotFound) {
				t.Errorf("GetCredentialRevision(c1, 3) error = %v, want ErrNotFound: no revision is created", err)
			}
		})
	}
	t.Run("next revision still follows", func(t *testing.T) {
		rev3 := confNextCred(wantCur)
		rev3.LastDecryptedDate = nil
		confPutCred(t, s, rev3, 2)
		confCheckCred(t, s, "c1", 0, rev3)
	})
}

func confRecordsAreCopies(t *testing.T, s Store) {
	ctx := context.Background()
	orig := confCred("c1", "c1", 1)
	orig.Documentation = confStr("doc")
	confPutCred(t, s, orig, 0)
	svc := confService("svc", 1, "c1")
	svc.BlindCredentials = []string{"blind"}
	confPutService(t, s, svc, 0)

	mutateCred := func(r *CredentialRecord) {
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
	mutateService := func(r *ServiceRecord) {
		r.Credentials[0] = "mutated"
		r.BlindCredentials[0] = "mutated"
		*r.Account = "mutated"
	}

	t.Run("input record", func(t *testing.T) {
		in := confCloneCred(confCred("c2", "c2", 1))
		in.Documentation = confStr("doc")
		want := confCloneCred(in)
		if err := s.PutCredential(ctx, in, 0); err != nil {
			t.Fatal(err)
		}
		mutateCred(in)
		confCheckCred(t, s, "c2", 0, want)

		svcIn := confService("svc2", 1, "c2")
		svcIn.BlindCredentials = []string{"blind"}
		svcWant := confCloneService(svcIn)
		if err := s.PutService(ctx, svcIn, 0); err != nil {
			t.Fatal(err)
		}
		mutateService(svcIn)
		confCheckService(t, s, "svc2", 0, svcWant)
	})

	credReads := []struct {
		name string
		get  func() (*CredentialRecord, error)
	}{
		{"GetCredential", func() (*CredentialRecord, error) { return s.GetCredential(ctx, "c1") }},
		{"GetCredentialRevision", func() (*CredentialRecord, error) { return s.GetCredentialRevision(ctx, "c1", 1) }},
		{"ListCredentials", func() (*CredentialRecord, error) { return firstOf(s.ListCredentials(ctx, Page{Limit: 1})) }},
		{"ListCredentialRevisions", func() (*CredentialRecord, error) { return firstOf(s.ListCredentialRevisions(ctx, "c1", Page{})) }},
		{"ListAllCredentialRevisions", func() (*CredentialRecord, error) { return firstOf(s.ListAllCredentialRevisions(ctx, Page{Limit: 1})) }},
	}
	for _, rd := range credReads {
		t.Run(rd.name, func(t *testing.T) {
			got, err := rd.get()
			if err != nil {
				t.Fatal(err)
			}
			if diff := confDiffCred(got, orig); diff != "" {
				t.Fatalf("before mutating: %s", diff)
			}
			mutateCred(got)
			confCheckCred(t, s, "c1", 0, orig)
			confCheckCred(t, s, "c1", 1, orig)
		})
	}

	svcReads := []struct {
		name string
		get  func() (*ServiceRecord, error)
	}{
		{"GetService", func() (*ServiceRecord, error) { return s.GetService(ctx, "svc") }},
		{"GetServiceRevision", func() (*ServiceRecord, error) { return s.GetServiceRevision(ctx, "svc", 1) }},
		{"ListServices", func() (*ServiceRecord, error) { return firstOf(s.ListServices(ctx, Page{Limit: 1})) }},
		{"ListServiceRevisions", func() (*ServiceRecord, error) { return firstOf(s.ListServiceRevisions(ctx, "svc", Page{})) }},
		{"ListAllServiceRevisions", func() (*ServiceRecord, error) { return firstOf(s.ListAllServiceRevisions(ctx, Page{Limit: 1})) }},
	}
	for _, rd := range svcReads {
		t.Run(rd.name, func(t *testing.T) {
			got, err := rd.get()
			if err != nil {
				t.Fatal(err)
			}
			if diff := confDiffService(got, svc); diff != "" {
				t.Fatalf("before mutating: %s", diff)
			}
			mutateService(got)
			confCheckService(t, s, "svc", 0, svc)
			confCheckService(t, s, "svc", 1, svc)
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

func confCancelledContext(t *testing.T, s Store) {
	confPutCred(t, s, confCred("c1", "c1", 1), 0)
	confPutService(t, s, confService("svc", 1), 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		call func() error
	}{
		{"GetCredential", func() error { _, err := s.GetCredential(ctx, "c1"); return err }},
		{"GetCredentialRevision", func() error { _, err := s.GetCredentialRevision(ctx, "c1", 1); return err }},
		{"GetCredentials", func() error { _, err := s.GetCredentials(ctx, []string{"c1"}); return err }},
		{"ListCredentials", func() error { _, _, err := s.ListCredentials(ctx, Page{}); return err }},
		{"ListCredentialRevisions", func() error { _, _, err := s.ListCredentialRevisions(ctx, "c1", Page{}); return err }},
		{"ListAllCredentialRevisions", func() error { _, _, err := s.ListAllCredentialRevisions(ctx, Page{}); return err }},
		{"PutCredential", func() error { return s.PutCredential(ctx, confCred("c2", "c2", 1), 0) }},
		{"SetLastDecrypted", func() error { return s.SetLastDecrypted(ctx, "c1", 1, confT0) }},
		{"CredentialServices", func() error { _, err := s.CredentialServices(ctx, "c1"); return err }},
		{"ArchiveCredential", func() error { return s.ArchiveCredential(ctx, "c1", 1, confT0) }},
		{"GetArchivedCredential", func() error { _, err := s.GetArchivedCredential(ctx, "c1"); return err }},
		{"GetService", func() error { _, err := s.GetService(ctx, "svc"); return err }},
		{"GetServiceRevision", func() error { _, err := s.GetServiceRevision(ctx, "svc", 1); return err }},
		{"ListServices", func() error { _, _, err := s.ListServices(ctx, Page{}); return err }},
		{"ListServiceRevisions", func() error { _, _, err := s.ListServiceRevisions(ctx, "svc", Page{}); return err }},
		{"ListAllServiceRevisions", func() error { _, _, err := s.ListAllServiceRevisions(ctx, Page{}); return err }},
		{"PutService", func() error { return s.PutService(ctx, confService("svc2", 1), 0) }},
		{"Grants", func() error { _, err := s.Grants(ctx, "svc"); return err }},
		{"PutGrants", func() error { return s.PutGrants(ctx, "svc2", GrantsRecord{Encrypt: true}) }},
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
		if _, err := s.GetCredential(bg, "c2"); !errors.Is(err, ErrNotFound) {
			t.Errorf("GetCredential(c2) error = %v, want ErrNotFound", err)
		}
		if _, err := s.GetService(bg, "svc2"); !errors.Is(err, ErrNotFound) {
			t.Errorf("GetService(svc2) error = %v, want ErrNotFound", err)
		}
		if _, err := s.Grants(bg, "svc2"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Grants(svc2) error = %v, want ErrNotFound", err)
		}
		got, err := s.GetCredential(bg, "c1")
		if err != nil || got.LastDecryptedDate != nil {
			t.Errorf("GetCredential(c1) = %v, %v; want it untouched", got, err)
		}
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

// confGrants: a grants record is a point record per service id: a miss is ErrNotFound, a put replaces
// the record whole (times survive exactly), ids do not leak into each other (nor into ids sharing a
// prefix), and no service record is needed.
func confGrants(t *testing.T, s Store) {
	ctx := context.Background()
	for _, id := range []string{"api", "", "a\x00b", "nope"} {
		if got, err := s.Grants(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Grants(%q) on an empty store = %+v, %v; want ErrNotFound", id, got, err)
		}
	}
	partial := GrantsRecord{Encrypt: true, Created: confT0}
	if err := s.PutGrants(ctx, "api", partial); err != nil {
		t.Fatalf("PutGrants(api) error = %v", err)
	}
	check := func(id string, want GrantsRecord) {
		t.Helper()
		got, err := s.Grants(ctx, id)
		if err != nil {
			t.Fatalf("Grants(%q) error = %v", id, err)
		}
		if got.Encrypt != want.Encrypt || got.Decrypt != want.Decrypt || !got.Created.Equal(want.Created) {
			t.Errorf("Grants(%q) = %+v, want %+v", id, got, want)
		}
	}
	check("api", partial)
	full := GrantsRecord{Encrypt: true, Decrypt: true, Created: confT0.Add(time.Second)}
	if err := s.PutGrants(ctx, "api", full); err != nil {
		t.Fatalf("PutGrants(api) again error = %v", err)
	}
	check("api", full)
	if err := s.PutGrants(ctx, "api-2", GrantsRecord{Decrypt: true, Created: confT0}); err != nil {
		t.Fatalf("PutGrants(api-2) error = %v", err)
	}
	check("api", full)
	check("api-2", GrantsRecord{Decrypt: true, Created: confT0})
	for _, id := range []string{"ap", "API", "api-"} {
		if _, err := s.Grants(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Grants(%q) error = %v, want ErrNotFound", id, err)
		}
	}
	for _, id := range []string{"", "a\x00b"} {
		if err := s.PutGrants(ctx, id, full); err == nil {
			t.Errorf("PutGrants(%q) error = nil, want an error", id)
		}
	}
	// Grants are not service records: listings and service reads do not see them.
	if svcs, _, err := s.ListServices(ctx, Page{}); err != nil || len(svcs) != 0 {
		t.Errorf("ListServices() = %d services, %v; want none", len(svcs), err)
	}
	if _, err := s.GetService(ctx, "api"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetService(api) error = %v, want ErrNotFound", err)
	}
}

// GetCredentials reads the current records of the ids that have one, in the order asked, and leaves
// out the others without failing.
func confGetCredentials(t *testing.T, s Store) {
	ctx := context.Background()
	confPutCred(t, s, confCred("c1", "c1", 1), 0)
	confPutCred(t, s, confCred("c2", "c2", 1), 0)
	confPutCred(t, s, confNextCred(confCred("c2", "c2", 1)), 1)
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
		confPutCred(t, s, confCred(id, id, 1), 0)
	}
	got, err = s.GetCredentials(ctx, ids)
	if err != nil || len(got) != len(ids) || got[249].ID != "many-249" {
		t.Fatalf("GetCredentials(250 ids) = %d records, %v", len(got), err)
	}
}

func confKeyCheck(t *testing.T, s Store) {
	ctx := context.Background()
	if _, err := s.KeyCheck(ctx); !errors.Is(err, ErrNotFound) {
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

func confHasData(t *testing.T, s Store) {
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
	if err := s.PutGrants(ctx, "svc", GrantsRecord{Encrypt: true}); err != nil {
		t.Fatal(err)
	}
	check(false, "with only a key check and grants")
	confPutService(t, s, confService("svc", 1), 0)
	check(true, "with a service")
	confPutCred(t, s, confCred("c1", "c1", 1), 0)
	if err := s.ArchiveCredential(ctx, "c1", 1, confT0); err != nil {
		t.Fatal(err)
	}
	check(true, "with an archived credential")
}

func confProbe(t *testing.T, s Store) {
	if err := s.Probe(context.Background()); err != nil {
		t.Fatalf("Probe of a healthy store = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Probe(ctx); err == nil {
		t.Error("Probe with a cancelled context succeeded")
	}
}
