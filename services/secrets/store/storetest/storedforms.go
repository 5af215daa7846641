package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/codec"
)

// StoredRecord is one record as a backend stores it (see Raw).
type StoredRecord struct {
	// Area is the bucket or key area the record is in, Key its key there.
	Area string
	Key  []byte
	// Kind says which codec encoding the record is.
	Kind codec.Kind
	// Value is the stored bytes.
	Value []byte
}

// Raw is what RunStoredForms needs of a backend that stores package codec's bytes, beyond
// store.Store: the stored bytes of its records, written and read past the Store methods. The bbolt
// and etcd adapters implement it in their tests on the engine itself.
type Raw interface {
	// Records returns every stored record (not the indexes), in any order.
	Records(t *testing.T) []StoredRecord
	// Replace overwrites the stored bytes of the record r names, leaving every index as it is.
	Replace(t *testing.T, r StoredRecord, value []byte)
	// Upgrade is the backend's upgrade pass (gantry check -upgrade).
	Upgrade(ctx context.Context) (codec.Upgraded, error)
}

// RunStoredForms checks the two stored formats of package codec on a backend that stores its bytes:
// a store whose records are all in the JSON format of schema version 2 (as an upgraded store holds
// them) reads exactly as before; a write stores its records in the current format and leaves the
// history as it was; and the upgrade pass rewrites every record, changes no read, and rewrites
// nothing the second time. newStore is as for Run, and also returns the backend's Raw.
func RunStoredForms(t *testing.T, newStore func(t *testing.T) (store.Store, Raw)) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, s store.Store, raw Raw)
	}{
		{"JSONRecordsRead", testJSONRecordsRead},
		{"WriteStoresCurrentFormat", testWriteStoresCurrentFormat},
		{"UpgradeRewritesAll", testUpgradeRewritesAll},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, raw := newStore(t)
			tt.run(t, s, raw)
		})
	}
}

// storedView is everything the Store methods read of the records fillForms writes.
type storedView struct {
	Creds     []*store.CredentialRecord
	Revisions []*store.CredentialRecord
	Services  []*store.ServiceRecord
	SvcRevs   []*store.ServiceRecord
	Archived  []*store.ArchivedCredential
	Grants    store.GrantsRecord
}

// fillForms writes records of every kind, with the nil and empty values the formats must keep apart:
// a credential with two revisions and one without Documentation, one with Documentation "" and
// LastDecryptedDate, services, grants and an archived credential with its history.
func fillForms(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	rev1 := NewCred("c1", "db", 1)
	PutCred(t, s, rev1, 0)
	PutCred(t, s, NextCred(rev1), 1)
	blank := NewCred("c2", "blank", 1)
	blank.Documentation = StrPtr("")
	blank.Metadata, blank.Tags = nil, nil
	blank.LastDecryptedDate = TimePtr(T0.Add(time.Hour))
	PutCred(t, s, blank, 0)
	old := NewCred("c3", "old", 1)
	PutCred(t, s, old, 0)
	PutCred(t, s, NextCred(old), 1)
	if err := s.ArchiveCredential(ctx, "c3", 2, T0.Add(48*time.Hour)); err != nil {
		t.Fatalf("ArchiveCredential error = %v", err)
	}
	PutService(t, s, NewService("svc", 1, "c1"), 0)
	svc2 := NewService("svc", 2, "c1", "c2")
	svc2.Account = nil
	svc2.BlindCredentials = []string{"blind-1"}
	PutService(t, s, svc2, 1)
	if err := s.PutGrants(ctx, "svc", store.GrantsRecord{Encrypt: true, Created: T0}); err != nil {
		t.Fatalf("PutGrants error = %v", err)
	}
}

func readView(t *testing.T, s store.Store) storedView {
	t.Helper()
	ctx := context.Background()
	var v storedView
	var err error
	if v.Creds, _, err = s.ListCredentials(ctx, store.Page{}); err != nil {
		t.Fatalf("ListCredentials error = %v", err)
	}
	if v.Revisions, _, err = s.ListAllCredentialRevisions(ctx, store.Page{}); err != nil {
		t.Fatalf("ListAllCredentialRevisions error = %v", err)
	}
	if v.Services, _, err = s.ListServices(ctx, store.Page{}); err != nil {
		t.Fatalf("ListServices error = %v", err)
	}
	if v.SvcRevs, _, err = s.ListAllServiceRevisions(ctx, store.Page{}); err != nil {
		t.Fatalf("ListAllServiceRevisions error = %v", err)
	}
	if v.Archived, _, err = s.ListArchivedCredentials(ctx, store.Page{}); err != nil {
		t.Fatalf("ListArchivedCredentials error = %v", err)
	}
	if v.Grants, err = s.Grants(ctx, "svc"); err != nil {
		t.Fatalf("Grants error = %v", err)
	}
	for _, id := range []string{"c1", "c2"} {
		got, err := s.GetCredential(ctx, id)
		if err != nil {
			t.Fatalf("GetCredential(%s) error = %v", id, err)
		}
		v.Creds = append(v.Creds, got)
	}
	archived, err := s.GetArchivedCredential(ctx, "c3")
	if err != nil {
		t.Fatalf("GetArchivedCredential error = %v", err)
	}
	v.Archived = append(v.Archived, &store.ArchivedCredential{Record: archived})
	return v
}

// diffView compares two views strictly: unlike the rest of the suite, nil and empty differ (both
// formats decode empty collections as nil), and times are compared with time.Time.Equal.
func diffView(want, got storedView) string {
	return cmp.Diff(want, got)
}

// formsOf counts the records of each format.
func formsOf(t *testing.T, raw Raw) (json, current int) {
	t.Helper()
	for _, r := range raw.Records(t) {
		f, err := codec.FormatOf([]byte(r.Area), r.Value)
		switch {
		case err != nil:
			t.Fatalf("%s %q: %v", r.Area, r.Key, err)
		case f == codec.FormatJSON:
			json++
		default:
			current++
		}
	}
	return json, current
}

// toJSON rewrites every record in the JSON format, as a store of schema version 2 holds them.
func toJSON(t *testing.T, raw Raw) int {
	t.Helper()
	records := raw.Records(t)
	for _, r := range records {
		js, err := codec.EncodeJSON(r.Kind, []byte(r.Area), r.Value)
		if err != nil {
			t.Fatalf("%s %q: %v", r.Area, r.Key, err)
		}
		raw.Replace(t, r, js)
	}
	return len(records)
}

// A store of JSON records reads exactly as it did in the current format.
func testJSONRecordsRead(t *testing.T, s store.Store, raw Raw) {
	fillForms(t, s)
	if json, _ := formsOf(t, raw); json != 0 {
		t.Errorf("%d records written in the JSON format, want none", json)
	}
	before := readView(t, s)
	n := toJSON(t, raw)
	if json, current := formsOf(t, raw); json != n || current != 0 {
		t.Fatalf("after the rewrite: %d JSON and %d current records, want %d and 0", json, current, n)
	}
	if d := diffView(before, readView(t, s)); d != "" {
		t.Errorf("JSON records read differently (-current +JSON):\n%s", d)
	}
}

// A write stores its records in the current format; the history records it does not touch stay JSON.
func testWriteStoresCurrentFormat(t *testing.T, s store.Store, raw Raw) {
	ctx := context.Background()
	fillForms(t, s)
	toJSON(t, raw)
	cur, err := s.GetCredential(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	PutCred(t, s, NextCred(cur), cur.Revision)
	svc, err := s.GetService(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	next := CloneService(svc)
	next.Revision++
	PutService(t, s, next, svc.Revision)
	if err := s.PutGrants(ctx, "svc", store.GrantsRecord{Encrypt: true, Decrypt: true, Created: T0}); err != nil {
		t.Fatal(err)
	}
	var currentRecords int
	for _, r := range raw.Records(t) {
		f, err := codec.FormatOf([]byte(r.Area), r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if f == codec.FormatJSON {
			continue
		}
		currentRecords++
		// Only the records of these writes are new.
		switch r.Kind {
		case codec.KindCred:
			rec, err := codec.DecodeCred([]byte(r.Area), r.Value)
			if err != nil || rec.ID != "c1" || rec.Revision != 3 {
				t.Errorf("%s %q in the current format: %+v, %v; want only c1 revision 3", r.Area, r.Key, rec, err)
			}
		case codec.KindService:
			rec, err := codec.DecodeService([]byte(r.Area), r.Value)
			if err != nil || rec.ID != "svc" || rec.Revision != 3 {
				t.Errorf("%s %q in the current format: %+v, %v; want only svc revision 3", r.Area, r.Key, rec, err)
			}
		case codec.KindArchived:
			t.Errorf("%s %q: an archived record was rewritten", r.Area, r.Key)
		}
	}
	// c1 revision 3 (current and history), svc revision 3 (current and history), the grants.
	if currentRecords != 5 {
		t.Errorf("%d records in the current format after three writes, want 5", currentRecords)
	}
	CheckCred(t, s, "c1", 2, NextCred(NewCred("c1", "db", 1)))
	CheckService(t, s, "svc", 3, next)
}

// The upgrade pass rewrites every JSON record, the reads do not change, and a second pass rewrites
// nothing.
func testUpgradeRewritesAll(t *testing.T, s store.Store, raw Raw) {
	ctx := context.Background()
	fillForms(t, s)
	before := readView(t, s)
	// Half the records JSON, half current: the pass rewrites only the JSON ones.
	records := raw.Records(t)
	wantRewritten := 0
	for i, r := range records {
		if i%2 == 1 {
			continue
		}
		js, err := codec.EncodeJSON(r.Kind, []byte(r.Area), r.Value)
		if err != nil {
			t.Fatal(err)
		}
		raw.Replace(t, r, js)
		wantRewritten++
	}
	up, err := raw.Upgrade(ctx)
	if err != nil {
		t.Fatalf("Upgrade error = %v", err)
	}
	read, rewritten := 0, 0
	for _, c := range up {
		read, rewritten = read+c.Read, rewritten+c.Rewritten
	}
	if read != len(records) || rewritten != wantRewritten {
		t.Errorf("Upgrade = %v: %d read, %d rewritten; want %d and %d", up, read, rewritten, len(records), wantRewritten)
	}
	if json, _ := formsOf(t, raw); json != 0 {
		t.Errorf("%d records still JSON after the upgrade", json)
	}
	if d := diffView(before, readView(t, s)); d != "" {
		t.Errorf("reads changed by the upgrade (-before +after):\n%s", d)
	}
	again, err := raw.Upgrade(ctx)
	if err != nil {
		t.Fatalf("second Upgrade error = %v", err)
	}
	for area, c := range again {
		if c.Rewritten != 0 || c.Read != up[area].Read {
			t.Errorf("second Upgrade of %s = %+v, want %d read and none rewritten", area, c, up[area].Read)
		}
	}
}
