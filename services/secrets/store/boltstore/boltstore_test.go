package boltstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/codec"
	"github.com/gantry-dev/gantry/services/secrets/store/storetest"
)

// newBoltTestStore opens an empty store in t.TempDir(). At cleanup it checks that every index agrees
// with the records (so each conformance subtest also proves the indexes were maintained), then
// closes the store.
func newBoltTestStore(t testing.TB) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "secrets.db"), boltdb.Options{NoSync: true}, logtest.New(t))
	if err != nil {
		t.Fatalf("Open() error = %v", err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			boltCheckIndexes(t, s)
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close() error = %v", err)
		}
	})
	return s
}

// boltCheckIndexes fails t unless every index and the archive agree with the current and history
// records: nothing missing, nothing left over.
func boltCheckIndexes(t testing.TB, s *Store) {
	t.Helper()
	err := s.db.View(func(tx *bolt.Tx) error {
		keys := func(bucket []byte) map[string]string {
			m := make(map[string]string)
			_ = tx.Bucket(bucket).ForEach(func(k, v []byte) error {
				m[string(k)] = string(v)
				return nil
			})
			return m
		}
		expect := func(what string, got, want map[string]string) {
			for k, v := range want {
				if g, ok := got[k]; !ok {
					t.Errorf("%s: missing key %q", what, k)
				} else if g != v {
					t.Errorf("%s: key %q = %q, want %q", what, k, g, v)
				}
			}
			for k := range got {
				if _, ok := want[k]; !ok {
					t.Errorf("%s: stray key %q", what, k)
				}
			}
		}

		// Credentials.
		wantByName, wantExact, wantHistName := map[string]string{}, map[string]string{}, map[string]string{}
		wantHistKeys := map[string]string{}
		current := keys(boltCredCurrent)
		history := keys(boltCredHistory)
		for id, raw := range current {
			rec, err := codec.DecodeCred(boltCredCurrent, []byte(raw))
			if err != nil {
				return err
			}
			if rec.ID != id {
				t.Errorf("cred_current key %q holds record %q", id, rec.ID)
			}
			if history[string(codec.RevKey(id, rec.Revision))] != raw {
				t.Errorf("cred_current %q differs from its history revision %d", id, rec.Revision)
			}
			wantByName[string(codec.NameKey(rec.Name, id))] = ""
			wantExact[rec.Name] = id
			for r := int32(1); r <= rec.Revision; r++ {
				wantHistKeys[string(codec.RevKey(id, r))] = ""
			}
		}
		histKeysOnly := map[string]string{}
		for k, raw := range history {
			histKeysOnly[k] = ""
			rec, err := codec.DecodeCred(boltCredHistory, []byte(raw))
			if err != nil {
				return err
			}
			if k != string(codec.RevKey(rec.ID, rec.Revision)) {
				t.Errorf("cred_history key %q holds record %s@%d", k, rec.ID, rec.Revision)
			}
			wantHistName[string(codec.RevNameKey(rec.Name, rec.ID, rec.Revision))] = ""
		}
		expect("cred_history (revisions 1..current of current credentials)", histKeysOnly, wantHistKeys)
		expect("cred_by_name", keys(boltCredByName), wantByName)
		expect("cred_name_exact", keys(boltCredNameExact), wantExact)
		expect("cred_history_by_name", keys(boltCredHistoryName), wantHistName)

		// Services.
		wantByID, wantLinks, wantSvcHist := map[string]string{}, map[string]string{}, map[string]string{}
		svcHistory := keys(boltSvcHistory)
		for id, raw := range keys(boltSvcCurrent) {
			rec, err := codec.DecodeService(boltSvcCurrent, []byte(raw))
			if err != nil {
				return err
			}
			if rec.ID != id || svcHistory[string(codec.RevKey(id, rec.Revision))] != raw {
				t.Errorf("svc_current %q: record %s@%d does not match its key and history", id, rec.ID, rec.Revision)
			}
			wantByID[string(codec.NameKey(id, id))] = ""
			for _, cred := range rec.Credentials {
				if _, ok := current[cred]; !ok {
					t.Errorf("service %q maps credential %q, which has no current record", id, cred)
				}
				wantLinks[string(codec.LinkKey(cred, id))] = ""
			}
			for r := int32(1); r <= rec.Revision; r++ {
				wantSvcHist[string(codec.RevKey(id, r))] = ""
			}
		}
		svcHistKeys := map[string]string{}
		for k := range svcHistory {
			svcHistKeys[k] = ""
		}
		expect("svc_by_id", keys(boltSvcByID), wantByID)
		expect("cred_services", keys(boltCredServices), wantLinks)
		expect("svc_history", svcHistKeys, wantSvcHist)

		// Archive: ids disjoint from live credentials, history only for archived ids.
		archived := keys(boltArchiveCurrent)
		for id := range archived {
			if _, ok := current[id]; ok {
				t.Errorf("credential %q is both archived and current", id)
			}
		}
		for k := range keys(boltArchiveHistory) {
			id := k[:strings.IndexByte(k, 0)]
			if _, ok := archived[id]; !ok {
				t.Errorf("archive_history key %q has no archive_current record", k)
			}
		}

		// Change requests: each under its own id, at version 1 or later.
		for id, raw := range keys(boltChangeRequests) {
			rec, err := codec.DecodeChangeRequest(boltChangeRequests, []byte(raw))
			if err != nil {
				return err
			}
			if rec.ID != id || rec.Version < 1 {
				t.Errorf("change_requests key %q holds request %q version %d", id, rec.ID, rec.Version)
			}
		}
		return nil
	})
	if err != nil {
		t.Errorf("checking indexes: %v", err)
	}
}

func TestBoltStoreFileMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.db")
	s, err := Open(path, boltdb.Options{NoSync: true}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Mode().Perm(); got != 0o600 {
		t.Errorf("file mode = %v, want -rw-------", got)
	}
}

func TestBoltStoreReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "secrets.db")
	s, err := Open(path, boltdb.Options{}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	c1 := storetest.NewCred("c1", "first", 1)
	c1r2 := storetest.NextCred(c1)
	c1r2.Documentation = storetest.StrPtr("doc")
	c2 := storetest.NewCred("c2", "second", 1)
	c3 := storetest.NewCred("c3", "archived", 1)
	svc := storetest.NewService("svc", 1, "c1")
	svc.BlindCredentials = []string{"blind"}
	decrypted := storetest.T0.Add(time.Hour + time.Nanosecond)
	archivedAt := storetest.T0.Add(2 * time.Hour)
	storetest.PutCred(t, s, c1, 0)
	storetest.PutCred(t, s, c1r2, 1)
	storetest.PutCred(t, s, c2, 0)
	storetest.PutCred(t, s, c3, 0)
	storetest.PutService(t, s, svc, 0)
	if err := s.SetLastDecrypted(ctx, "c1", 2, decrypted); err != nil {
		t.Fatal(err)
	}
	if err := s.ArchiveCredential(ctx, "c3", 1, archivedAt); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close() error = %v", err)
	}

	s, err = Open(path, boltdb.Options{}, logtest.New(t))
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	c1r2.LastDecryptedDate = &decrypted
	storetest.CheckCred(t, s, "c1", 0, c1r2)
	storetest.CheckCred(t, s, "c1", 1, c1)
	storetest.CheckCred(t, s, "c1", 2, c1r2)
	storetest.CheckCred(t, s, "c2", 0, c2)
	storetest.CheckService(t, s, "svc", 0, svc)
	if got, err := s.GetArchivedCredential(ctx, "c3"); err != nil || storetest.DiffCred(got, c3) != "" {
		t.Errorf("GetArchivedCredential(c3) = %v, %v; want %v", got, err, c3)
	}
	list, _, err := s.ListCredentials(ctx, store.Page{})
	if got, want := storetest.CredKeys(list), []string{"c1@2", "c2@1"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("ListCredentials = %v, %v; want %v", got, err, want)
	}
	if got, err := s.CredentialServices(ctx, "c1"); err != nil || !slices.Equal(got, []string{"svc"}) {
		t.Errorf("CredentialServices(c1) = %v, %v; want [svc]", got, err)
	}
	if err := s.PutCredential(ctx, storetest.NewCred("c4", "first", 1), 0); !isNameTakenBy(err, "c1") {
		t.Errorf("PutCredential(name of c1) error = %v, want store.NameTakenError{c1}", err)
	}
	boltCheckIndexes(t, s)
}

func isNameTakenBy(err error, id string) bool {
	var taken *store.NameTakenError
	return errors.As(err, &taken) && taken.ID == id
}

func TestBoltStoreOpenTwice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.db")
	s, err := Open(path, boltdb.Options{NoSync: true}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	done := make(chan error, 1)
	go func() {
		second, err := Open(path, boltdb.Options{Timeout: 100 * time.Millisecond}, logtest.New(t))
		if err == nil {
			_ = second.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("second Open of the same file succeeded, want an error")
		}
		if !errors.Is(err, boltdb.ErrLocked) || !strings.Contains(err.Error(), path) {
			t.Errorf("error = %q, want ErrLocked naming %s", err, path)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("second Open still blocked after 10s")
	}
	// The first store is unaffected.
	storetest.PutCred(t, s, storetest.NewCred("c1", "c1", 1), 0)
}

func TestBoltStoreSchemaVersion(t *testing.T) {
	tests := []struct {
		name    string
		version int
		wantErr error
	}{
		{"current version", boltSchemaVersion, nil},
		{"newer version", 99, boltdb.ErrNewerSchema},
		{"next version", boltSchemaVersion + 1, boltdb.ErrNewerSchema},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "secrets.db")
			s, err := Open(path, boltdb.Options{NoSync: true}, logtest.New(t))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			db, err := boltdb.Open(path, boltdb.Options{NoSync: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := boltdb.ReadSchemaVersion(db, boltMeta); err != nil || got != boltSchemaVersion {
				t.Errorf("stored schema version = %d, %v; want %d", got, err, boltSchemaVersion)
			}
			if err := boltdb.WriteSchemaVersion(db, boltMeta, tt.version); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}

			s, err = Open(path, boltdb.Options{NoSync: true}, logtest.New(t))
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("reopen error = %v, want nil", err)
				}
				_ = s.Close()
				return
			}
			if err == nil {
				_ = s.Close()
				t.Fatalf("reopen with schema version %d succeeded, want an error", tt.version)
			}
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), path) {
				t.Errorf("reopen error = %q, want %v naming %s", err, tt.wantErr, path)
			}
		})
	}
}

// TestBoltStoreUpgradesSchema opens a file as version 1 left it (no grants bucket, JSON records) and
// one as version 2 left it (JSON records): the open upgrades each in place to the current version,
// keeping the records, which read as before; grants can be stored.
func TestBoltStoreUpgradesSchema(t *testing.T) {
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprintf("version %d", version), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "secrets.db")
			s, err := Open(path, boltdb.Options{NoSync: true}, logtest.New(t))
			if err != nil {
				t.Fatal(err)
			}
			want := storetest.NewService("api", 1)
			storetest.PutService(t, s, want, 0)
			raw := boltRaw{s}
			for _, r := range raw.Records(t) {
				js, err := codec.EncodeJSON(r.Kind, []byte(r.Area), r.Value)
				if err != nil {
					t.Fatal(err)
				}
				raw.Replace(t, r, js)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			db, err := boltdb.Open(path, boltdb.Options{NoSync: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if version == 1 {
				if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(boltGrants) }); err != nil {
					t.Fatal(err)
				}
			}
			if err := boltdb.WriteSchemaVersion(db, boltMeta, version); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}

			s, err = Open(path, boltdb.Options{NoSync: true}, logtest.New(t))
			if err != nil {
				t.Fatalf("open of a version %d file: %v", version, err)
			}
			ctx := context.Background()
			storetest.CheckService(t, s, "api", 0, want)
			if _, err := s.Grants(ctx, "api"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("Grants after the upgrade: %v, want store.ErrNotFound", err)
			}
			if err := s.PutGrants(ctx, "api", store.GrantsRecord{Encrypt: true, Decrypt: true}); err != nil {
				t.Errorf("PutGrants after the upgrade: %v", err)
			}
			if err := s.PutChangeRequest(ctx, storetest.NewChangeRequest("r1", 1), 0); err != nil {
				t.Errorf("PutChangeRequest after the upgrade: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			db, err = boltdb.Open(path, boltdb.Options{NoSync: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if got, err := boltdb.ReadSchemaVersion(db, boltMeta); err != nil || got != boltSchemaVersion {
				t.Errorf("schema version after the upgrade = %d, %v; want %d", got, err, boltSchemaVersion)
			}
		})
	}
}

func TestBoltStoreRejectsUnstorableKeys(t *testing.T) {
	ctx := context.Background()
	s := newBoltTestStore(t)
	long := strings.Repeat("x", bolt.MaxKeySize)
	tests := []struct {
		name string
		put  func() error
	}{
		{"credential with empty id", func() error { return s.PutCredential(ctx, storetest.NewCred("", "n", 1), 0) }},
		{"credential id with NUL", func() error { return s.PutCredential(ctx, storetest.NewCred("a\x00b", "n", 1), 0) }},
		{"credential with empty name", func() error { return s.PutCredential(ctx, storetest.NewCred("c1", "", 1), 0) }},
		{"credential name with NUL", func() error { return s.PutCredential(ctx, storetest.NewCred("c1", "a\x00b", 1), 0) }},
		{"credential name too long", func() error { return s.PutCredential(ctx, storetest.NewCred("c1", long, 1), 0) }},
		{"nil credential", func() error { return s.PutCredential(ctx, nil, 0) }},
		{"service with empty id", func() error { return s.PutService(ctx, storetest.NewService("", 1), 0) }},
		{"service id with NUL", func() error { return s.PutService(ctx, storetest.NewService("a\x00b", 1), 0) }},
		{"service id too long", func() error { return s.PutService(ctx, storetest.NewService(long, 1), 0) }},
		{"nil service", func() error { return s.PutService(ctx, nil, 0) }},
		{"change request with empty id", func() error { return s.PutChangeRequest(ctx, storetest.NewChangeRequest("", 1), 0) }},
		{"change request id with NUL", func() error { return s.PutChangeRequest(ctx, storetest.NewChangeRequest("a\x00b", 1), 0) }},
		{"change request id too long", func() error { return s.PutChangeRequest(ctx, storetest.NewChangeRequest(long+"x", 1), 0) }},
		{"nil change request", func() error { return s.PutChangeRequest(ctx, nil, 0) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.put(); err == nil {
				t.Error("error = nil, want an error")
			}
		})
	}
	if list, _, err := s.ListCredentials(ctx, store.Page{}); err != nil || len(list) != 0 {
		t.Errorf("ListCredentials = %v, %v; want nothing stored", storetest.CredKeys(list), err)
	}
	if list, _, err := s.ListServices(ctx, store.Page{}); err != nil || len(list) != 0 {
		t.Errorf("ListServices = %v, %v; want nothing stored", storetest.ServiceKeys(list), err)
	}
	if list, _, err := s.ListChangeRequests(ctx, store.Page{}); err != nil || len(list) != 0 {
		t.Errorf("ListChangeRequests = %v, %v; want nothing stored", storetest.ChangeKeys(list), err)
	}
}

func TestBoltStoreReadsWithUnstorableKeys(t *testing.T) {
	ctx := context.Background()
	s := newBoltTestStore(t)
	storetest.PutCred(t, s, storetest.NewCred("a", "a", 1), 0)
	storetest.PutService(t, s, storetest.NewService("a", 1, "a"), 0)
	// "a\x00\x00\x00\x00" + 1 byte would alias history keys of "a" if NUL were allowed.
	ids := []string{"a\x00", "a\x00\x00\x00\x00", "\x00"}
	for _, id := range ids {
		t.Run(fmt.Sprintf("%q", id), func(t *testing.T) {
			if _, err := s.GetCredentialRevision(ctx, id, 1); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("GetCredentialRevision error = %v, want store.ErrNotFound", err)
			}
			if _, err := s.GetServiceRevision(ctx, id, 1); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("GetServiceRevision error = %v, want store.ErrNotFound", err)
			}
			if _, _, err := s.ListCredentialRevisions(ctx, id, store.Page{}); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("ListCredentialRevisions error = %v, want store.ErrNotFound", err)
			}
			if got, err := s.CredentialServices(ctx, id); err != nil || len(got) != 0 {
				t.Errorf("CredentialServices = %v, %v; want none", got, err)
			}
			if err := s.SetLastDecrypted(ctx, id, 1, storetest.T0); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("SetLastDecrypted error = %v, want store.ErrNotFound", err)
			}
		})
	}
}

func TestBoltStoreArchivedIDCannotBeCreatedAgain(t *testing.T) {
	ctx := context.Background()
	s := newBoltTestStore(t)
	rec := storetest.NewCred("c1", "c1", 1)
	storetest.PutCred(t, s, rec, 0)
	if err := s.ArchiveCredential(ctx, "c1", 1, storetest.T0); err != nil {
		t.Fatal(err)
	}
	if err := s.PutCredential(ctx, storetest.NewCred("c1", "c1", 1), 0); !errors.Is(err, store.ErrRevisionConflict) {
		t.Errorf("PutCredential(archived id) error = %v, want store.ErrRevisionConflict", err)
	}
	if got, err := s.GetArchivedCredential(ctx, "c1"); err != nil || storetest.DiffCred(got, rec) != "" {
		t.Errorf("GetArchivedCredential = %v, %v; want the archived record", got, err)
	}
}

func TestBoltStoreArchiveKeepsHistory(t *testing.T) {
	ctx := context.Background()
	s := newBoltTestStore(t)
	rev1 := storetest.NewCred("c1", "old", 1)
	rev2 := storetest.NextCred(rev1)
	rev2.Name = "new"
	storetest.PutCred(t, s, rev1, 0)
	storetest.PutCred(t, s, rev2, 1)
	at := storetest.T0.Add(time.Hour + time.Nanosecond)
	if err := s.ArchiveCredential(ctx, "c1", 2, at); err != nil {
		t.Fatal(err)
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		for _, want := range []*store.CredentialRecord{rev1, rev2} {
			raw := tx.Bucket(boltArchiveHistory).Get(codec.RevKey("c1", want.Revision))
			if raw == nil {
				t.Errorf("archive_history has no revision %d", want.Revision)
				continue
			}
			got, gotAt := boltDecodeArchived(t, raw)
			if diff := storetest.DiffCred(got, want); diff != "" {
				t.Errorf("archived revision %d: %s", want.Revision, diff)
			}
			if !gotAt.Equal(at) {
				t.Errorf("archived revision %d: archived_at = %v, want %v", want.Revision, gotAt, at)
			}
		}
		_, gotAt := boltDecodeArchived(t, tx.Bucket(boltArchiveCurrent).Get([]byte("c1")))
		if !gotAt.Equal(at) {
			t.Errorf("archive_current: archived_at = %v, want %v", gotAt, at)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func boltDecodeArchived(t *testing.T, raw []byte) (*store.CredentialRecord, time.Time) {
	t.Helper()
	if raw == nil {
		t.Fatal("no archived record")
	}
	a, err := codec.DecodeArchived(boltArchiveHistory, raw)
	if err != nil {
		t.Fatalf("archived record: %v", err)
	}
	return a.Record, a.ArchivedAt
}

func TestBoltStoreSetLastDecryptedUnknownRevision(t *testing.T) {
	ctx := context.Background()
	s := newBoltTestStore(t)
	rec := storetest.NewCred("c1", "c1", 1)
	storetest.PutCred(t, s, rec, 0)
	for _, revision := range []int32{0, 2, 99} {
		if err := s.SetLastDecrypted(ctx, "c1", revision, storetest.T0); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("SetLastDecrypted(c1, %d) error = %v, want store.ErrNotFound", revision, err)
		}
	}
	storetest.CheckCred(t, s, "c1", 0, rec)
}

func TestBoltStoreNegativeLimit(t *testing.T) {
	s := newBoltTestStore(t)
	if _, _, err := s.ListCredentials(context.Background(), store.Page{Limit: -1}); err == nil {
		t.Error("ListCredentials(limit -1) error = nil, want an error")
	}
}

// TestBoltStoreLogging: the store.Store's own errors are not logged; storage failures are, with the
// operation and without record contents.
func TestBoltStoreLogging(t *testing.T) {
	ctx := context.Background()
	core, logs := observer.New(zapcore.DebugLevel)
	s, err := Open(filepath.Join(t.TempDir(), "secrets.db"), boltdb.Options{NoSync: true}, zap.New(core).Named("secrets.store"))
	if err != nil {
		t.Fatal(err)
	}
	rec := storetest.NewCred("c1", "very-secret-name", 1)
	storetest.PutCred(t, s, rec, 0)
	_ = s.PutCredential(ctx, storetest.NewCred("c1", "very-secret-name", 1), 0) // conflict
	_, _ = s.GetCredential(ctx, "nope")                                         // not found
	_, _, _ = s.ListCredentials(ctx, store.Page{Token: "garbage"})              // bad token
	if logs.Len() != 0 {
		t.Fatalf("store.Store errors were logged: %v", logs.All())
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetCredential(ctx, "c1"); err == nil || errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetCredential on a closed store: error = %v, want a storage error", err)
	}
	if err := s.PutCredential(ctx, storetest.NextCred(rec), 1); err == nil {
		t.Error("PutCredential on a closed store: error = nil, want one")
	}
	entries := logs.All()
	if len(entries) != 2 {
		t.Fatalf("logged %d entries, want 2: %v", len(entries), entries)
	}
	for i, op := range []string{"GetCredential", "PutCredential"} {
		e := entries[i]
		if e.Level != zapcore.ErrorLevel || e.LoggerName != "secrets.store" || e.ContextMap()["op"] != op {
			t.Errorf("entry %d = %v %s %q %v, want error level on logger secrets.store with op %s", i, e.Level, e.LoggerName, e.Message, e.ContextMap(), op)
		}
		if text := fmt.Sprint(e.Message, e.ContextMap()); strings.Contains(text, "very-secret-name") {
			t.Errorf("entry %d leaks record contents: %s", i, text)
		}
	}
}

// TestBoltStorePageTokenShape pins the token format: base64url without padding of a kind byte and
// the index key of the last item.
func TestBoltStorePageTokenShape(t *testing.T) {
	ctx := context.Background()
	s := newBoltTestStore(t)
	storetest.PutCred(t, s, storetest.NewCred("id-1", "Name", 1), 0)
	storetest.PutCred(t, s, storetest.NewCred("id-2", "other", 1), 0)
	_, next, err := s.ListCredentials(ctx, store.Page{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := codec.EncodePageToken(codec.TokenCredentials, []byte("name\x00id-1"))
	if next != want {
		t.Errorf("token = %q, want %q", next, want)
	}
	if strings.ContainsAny(next, "=+/") {
		t.Errorf("token %q is not unpadded base64url", next)
	}
}

// FuzzBoltPageToken feeds arbitrary tokens to every listing: each must answer with a page or
// store.ErrBadPageToken, never panic.
func FuzzBoltPageToken(f *testing.F) {
	s := newBoltTestStore(f)
	ctx := context.Background()
	for _, id := range []string{"c1", "c2"} {
		rec := storetest.NewCred(id, "n-"+id, 1)
		if err := s.PutCredential(ctx, rec, 0); err != nil {
			f.Fatal(err)
		}
		if err := s.PutCredential(ctx, storetest.NextCred(rec), 1); err != nil {
			f.Fatal(err)
		}
		if err := s.PutService(ctx, storetest.NewService("s-"+id, 1, id), 0); err != nil {
			f.Fatal(err)
		}
		if err := s.PutService(ctx, storetest.NewService("s-"+id, 2), 1); err != nil {
			f.Fatal(err)
		}
	}
	lists := []struct {
		name string
		list func(store.Page) (string, error)
	}{
		{"ListCredentials", func(p store.Page) (string, error) { _, n, err := s.ListCredentials(ctx, p); return n, err }},
		{"ListCredentialRevisions", func(p store.Page) (string, error) {
			_, n, err := s.ListCredentialRevisions(ctx, "c1", p)
			return n, err
		}},
		{"ListAllCredentialRevisions", func(p store.Page) (string, error) { _, n, err := s.ListAllCredentialRevisions(ctx, p); return n, err }},
		{"ListServices", func(p store.Page) (string, error) { _, n, err := s.ListServices(ctx, p); return n, err }},
		{"ListServiceRevisions", func(p store.Page) (string, error) {
			_, n, err := s.ListServiceRevisions(ctx, "s-c1", p)
			return n, err
		}},
		{"ListAllServiceRevisions", func(p store.Page) (string, error) { _, n, err := s.ListAllServiceRevisions(ctx, p); return n, err }},
	}
	seeds := []string{"", "!!!", "AAAA", "wQ", codec.EncodePageToken(codec.TokenAllServiceRevisions, []byte("a\x00a\x00\x00\x00\x00\x01"))}
	for _, l := range lists {
		next, err := l.list(store.Page{Limit: 1})
		if err != nil || next == "" {
			f.Fatalf("%s first page: token %q, error %v", l.name, next, err)
		}
		seeds = append(seeds, next)
	}
	for _, seed := range seeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, token string) {
		for _, l := range lists {
			if _, err := l.list(store.Page{Limit: 1, Token: token}); err != nil && !errors.Is(err, store.ErrBadPageToken) {
				t.Errorf("%s(token %q) error = %v, want nil or store.ErrBadPageToken", l.name, token, err)
			}
		}
	})
}

// Benchmarks (make bench); they assert nothing about time.

func BenchmarkBoltPutCredential(b *testing.B) {
	for _, noSync := range []bool{false, true} {
		b.Run(fmt.Sprintf("NoSync=%v", noSync), func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "secrets.db"), boltdb.Options{NoSync: noSync}, zap.NewNop())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			var writers atomic.Int64
			b.ReportAllocs()
			// Parallel writers of distinct credentials: bolt's Batch groups them into shared commits.
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				id := fmt.Sprintf("bench-%d", writers.Add(1))
				rec := storetest.NewCred(id, id, 1)
				var prev int32
				for pb.Next() {
					if err := s.PutCredential(ctx, rec, prev); err != nil {
						b.Error(err)
						return
					}
					prev = rec.Revision
					rec.Revision++
				}
			})
		})
	}
}

func BenchmarkBoltGetCredential(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "secrets.db"), boltdb.Options{NoSync: true}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const n = 1000
	var wg sync.WaitGroup
	for i := range n { // concurrently, so Batch commits many at once
		wg.Go(func() {
			id := fmt.Sprintf("c%04d", i)
			if err := s.PutCredential(ctx, storetest.NewCred(id, id, 1), 0); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		return
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := s.GetCredential(ctx, fmt.Sprintf("c%04d", i%n)); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// TestBoltStoreContainsAPanicOfTheCommit: bbolt panicking while it commits a write (here: a commit
// handler's panic, which bbolt runs inside Commit, on the batch's own goroutine) fails the write with
// store.ErrStorage instead of ending the process; the store then refuses every call and its probe fails.
func TestBoltStoreContainsAPanicOfTheCommit(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "secrets.db"), boltdb.Options{NoSync: true}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	storetest.PutCred(t, s, storetest.NewCred("c1", "c1", 1), 0)
	err = s.batch(func(tx *bolt.Tx) error {
		tx.OnCommit(func() { panic("injected commit failure") })
		return nil
	})
	if !errors.Is(err, store.ErrStorage) {
		t.Fatalf("write whose commit panicked = %v, want store.ErrStorage", err)
	}
	if _, err := s.GetCredential(context.Background(), "c1"); !errors.Is(err, store.ErrStorage) {
		t.Errorf("read after the failure = %v, want store.ErrStorage", err)
	}
	if err := s.Probe(context.Background()); !errors.Is(err, store.ErrStorage) {
		t.Errorf("probe after the failure = %v, want store.ErrStorage", err)
	}
	// Every kind of call is refused, the change requests' too.
	if _, err := s.GetChangeRequest(context.Background(), "r1"); !errors.Is(err, store.ErrStorage) {
		t.Errorf("GetChangeRequest after the failure = %v, want store.ErrStorage", err)
	}
	if err := s.PutChangeRequest(context.Background(), storetest.NewChangeRequest("r1", 1), 0); !errors.Is(err, store.ErrStorage) {
		t.Errorf("PutChangeRequest after the failure = %v, want store.ErrStorage", err)
	}
	if _, _, err := s.ListChangeRequests(context.Background(), store.Page{}); !errors.Is(err, store.ErrStorage) {
		t.Errorf("ListChangeRequests after the failure = %v, want store.ErrStorage", err)
	}
}

// TestOpenReadOnly: the offline open reads what a store wrote, reports its schema version,
// refuses writes, never creates a file, and is locked out while the store is open for writing.
func TestOpenReadOnly(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "secrets.db")
	s, err := Open(path, boltdb.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	storetest.PutCred(t, s, storetest.NewCred("c1", "c1", 1), 0)
	if _, err := OpenReadOnly(path, boltdb.Options{Timeout: 50 * time.Millisecond}, nil); !errors.Is(err, boltdb.ErrLocked) {
		t.Errorf("read-only open of a store in use: %v, want boltdb.ErrLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	ro, err := OpenReadOnly(path, boltdb.Options{}, nil)
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
	if err := ro.PutChangeRequest(ctx, storetest.NewChangeRequest("r1", 1), 0); err == nil {
		t.Error("a change request written through the read-only store")
	}
	missing := filepath.Join(t.TempDir(), "secrets.db")
	if _, err := OpenReadOnly(missing, boltdb.Options{}, nil); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the read-only open created the file: %v", err)
	}
}

// TestBoltStoreLoginNonceSweep: a used login nonce survives a reopen (a restart cannot reopen a used
// link), and expired records are swept by later claims, so the bucket holds only live links.
func TestBoltStoreLoginNonceSweep(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "secrets.db")
	s, err := Open(path, boltdb.Options{NoSync: true}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.ClaimLoginNonce(ctx, "live", time.Now().Add(time.Hour)); err != nil || !ok {
		t.Fatalf("claim live = %v, %v", ok, err)
	}
	if ok, err := s.ClaimLoginNonce(ctx, "stale", time.Now().Add(-time.Second)); err != nil || !ok {
		t.Fatalf("claim stale = %v, %v", ok, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, boltdb.Options{NoSync: true}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if ok, err := s.ClaimLoginNonce(ctx, "live", time.Now().Add(time.Hour)); err != nil || ok {
		t.Errorf("claim live after reopen = %v, %v; want refused", ok, err)
	}
	// The expired record was swept: the nonce may be claimed again (the redeemer refuses its expired
	// link before asking the store anyway).
	if ok, err := s.ClaimLoginNonce(ctx, "stale", time.Now().Add(time.Hour)); err != nil || !ok {
		t.Errorf("claim of an expired record = %v, %v; want it swept", ok, err)
	}
	var keys []string
	_ = s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(boltLoginNonces).ForEach(func(k, _ []byte) error { keys = append(keys, string(k)); return nil })
	})
	if !slices.Equal(keys, []string{"live", "stale"}) {
		t.Errorf("bucket holds %q, want live and stale (claimed again)", keys)
	}
}

// TestBoltStoreChangeRequestsBucketAdded: a file of schema version 3 without the change_requests
// bucket, as a build before change requests left it, needs no schema change: opened read-only (the
// offline tools) it has no change requests and reads as before; Open adds the bucket, and the
// version stays 3, so that older build still opens the file (and ignores the bucket).
func TestBoltStoreChangeRequestsBucketAdded(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "secrets.db")
	s, err := Open(path, boltdb.Options{NoSync: true}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	storetest.PutCred(t, s, storetest.NewCred("c1", "db", 1), 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := boltdb.Open(path, boltdb.Options{NoSync: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(boltChangeRequests) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	ro, err := OpenReadOnly(path, boltdb.Options{}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := ro.SchemaVersion(); err != nil || v != boltSchemaVersion {
		t.Errorf("SchemaVersion = %d, %v; want %d", v, err, boltSchemaVersion)
	}
	if _, err := ro.GetChangeRequest(ctx, "r1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetChangeRequest without the bucket: error = %v, want store.ErrNotFound", err)
	}
	if list, next, err := ro.ListChangeRequests(ctx, store.Page{Limit: 10}); err != nil || len(list) != 0 || next != "" {
		t.Errorf("ListChangeRequests without the bucket = %v, %q, %v; want nothing", storetest.ChangeKeys(list), next, err)
	}
	storetest.CheckCred(t, ro, "c1", 0, storetest.NewCred("c1", "db", 1))
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(path, boltdb.Options{NoSync: true}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	req := storetest.NewChangeRequest("r1", 1)
	storetest.PutChange(t, s, req, 0)
	storetest.CheckChange(t, s, "r1", req)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = boltdb.Open(path, boltdb.Options{NoSync: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if v, err := boltdb.ReadSchemaVersion(db, boltMeta); err != nil || v != boltSchemaVersion {
		t.Errorf("schema version after adding the bucket = %d, %v; want %d", v, err, boltSchemaVersion)
	}
	// What a build before change requests checks at its start: the same version, so it opens.
	if err := boltdb.EnsureSchema(db, boltMeta, boltSchemaVersion); err != nil {
		t.Errorf("the same schema version's check = %v", err)
	}
}
