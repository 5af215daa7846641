package etcdstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/storetest"
)

// newReplicaPair opens two stores on one fresh prefix, as two secrets replicas sharing the cluster:
// the tests run RewrapCredential on the first and change the record through the second in the
// window between the rewrap's read and its transaction (beforeRewrapCommit), so each interleaving is
// the test's own, whatever the scheduler does.
func newReplicaPair(t *testing.T) (s, other *Store) {
	t.Helper()
	s = newEtcdTestStore(t, nil)
	other = newEtcdTestStore(t, func(o *Options) { o.Prefix = strings.TrimSuffix(s.prefix, "secrets/") })
	return s, other
}

// TestEtcdStoreRewrapRetriesOverOtherWrites: a write of the record by another replica between the
// rewrap's read and its transaction (a decryption stamp, a new revision) loses the rewrap's guard; it
// reads again and rewraps over the new state, keeping what the other replica wrote.
func TestEtcdStoreRewrapRetriesOverOtherWrites(t *testing.T) {
	ctx := context.Background()
	stamp := storetest.T0.Add(time.Hour + time.Nanosecond)
	rev1 := storetest.NewCred("c1", "c1", 1)
	rev2 := storetest.NextCred(rev1) // the same wrapped key, as a write that keeps the data key
	tests := []struct {
		name     string
		revision int32
		// meanwhile is the other replica's write; it returns what the records must be afterwards
		// (revisions 0 = current, 1 and 2).
		meanwhile func(t *testing.T, other *Store) map[int32]*store.CredentialRecord
	}{
		{"stamp of the current revision", 2, func(t *testing.T, other *Store) map[int32]*store.CredentialRecord {
			if err := other.SetLastDecrypted(ctx, "c1", 2, stamp); err != nil {
				t.Fatal(err)
			}
			want := storetest.CloneCred(rev2)
			want.LastDecryptedDate = &stamp
			want.WrappedKey = []byte("key-v2")
			return map[int32]*store.CredentialRecord{0: want, 1: rev1, 2: want}
		}},
		{"stamp of an older revision (history changed, current not)", 1, func(t *testing.T, other *Store) map[int32]*store.CredentialRecord {
			if err := other.SetLastDecrypted(ctx, "c1", 1, stamp); err != nil {
				t.Fatal(err)
			}
			want := storetest.CloneCred(rev1)
			want.LastDecryptedDate = &stamp
			want.WrappedKey = []byte("key-v2")
			return map[int32]*store.CredentialRecord{0: rev2, 1: want, 2: rev2}
		}},
		{"new current revision (current changed, history not)", 2, func(t *testing.T, other *Store) map[int32]*store.CredentialRecord {
			// Revision 3 becomes current with revision 2's wrapped key: the rewrap of revision 2 must
			// not write its record over revision 3's current record.
			rev3 := storetest.NextCred(rev2)
			storetest.PutCred(t, other, rev3, 2)
			want2 := storetest.CloneCred(rev2)
			want2.WrappedKey = []byte("key-v2")
			return map[int32]*store.CredentialRecord{0: rev3, 1: rev1, 2: want2}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, other := newReplicaPair(t)
			storetest.PutCred(t, s, rev1, 0)
			storetest.PutCred(t, s, rev2, 1)
			var want map[int32]*store.CredentialRecord
			calls := 0
			s.beforeRewrapCommit = func() {
				if calls++; calls == 1 {
					want = tt.meanwhile(t, other)
				}
			}
			if err := s.RewrapCredential(ctx, "c1", tt.revision, rev1.WrappedKey, []byte("key-v2")); err != nil {
				t.Fatalf("RewrapCredential error = %v", err)
			}
			if calls != 2 {
				t.Errorf("RewrapCredential wrote %d times, want 2 (one guard lost to the other replica, then done)", calls)
			}
			for rev, rec := range want {
				storetest.CheckCred(t, s, "c1", rev, rec)
			}
		})
	}
}

// TestEtcdStoreRewrapLosesToAnotherRewrap: another replica rewrapping the record first wins; this
// one answers ErrRevisionConflict and the winner's key stays.
func TestEtcdStoreRewrapLosesToAnotherRewrap(t *testing.T) {
	ctx := context.Background()
	s, other := newReplicaPair(t)
	rec := storetest.NewCred("c1", "c1", 1)
	storetest.PutCred(t, s, rec, 0)
	calls := 0
	s.beforeRewrapCommit = func() {
		if calls++; calls == 1 {
			if err := other.RewrapCredential(ctx, "c1", 1, rec.WrappedKey, []byte("key-of-other")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.RewrapCredential(ctx, "c1", 1, rec.WrappedKey, []byte("key-of-s")); !errors.Is(err, store.ErrRevisionConflict) {
		t.Fatalf("RewrapCredential after another replica's: error = %v, want ErrRevisionConflict", err)
	}
	if calls != 1 {
		t.Errorf("RewrapCredential tried to write %d times, want 1 (the re-read sees the other key)", calls)
	}
	want := storetest.CloneCred(rec)
	want.WrappedKey = []byte("key-of-other")
	storetest.CheckCred(t, s, "c1", 0, want)
	storetest.CheckCred(t, s, "c1", 1, want)
}

// TestEtcdStoreRewrapGivesUp: a record another replica writes before every one of the rewrap's
// attempts fails the rewrap with an error wrapping ErrStorage (retry later) — never
// ErrRevisionConflict, which would tell the caller the key was rewrapped by someone else — and leaves
// the wrapped key as it was.
func TestEtcdStoreRewrapGivesUp(t *testing.T) {
	ctx := context.Background()
	s, other := newReplicaPair(t)
	rec := storetest.NewCred("c1", "c1", 1)
	storetest.PutCred(t, s, rec, 0)
	calls := 0
	var last time.Time
	s.beforeRewrapCommit = func() {
		calls++
		last = storetest.T0.Add(time.Duration(calls) * time.Minute)
		if err := other.SetLastDecrypted(ctx, "c1", 1, last); err != nil {
			t.Fatal(err)
		}
	}
	err := s.RewrapCredential(ctx, "c1", 1, rec.WrappedKey, []byte("key-v2"))
	if !errors.Is(err, store.ErrStorage) || errors.Is(err, store.ErrRevisionConflict) {
		t.Fatalf("RewrapCredential losing every attempt: error = %v, want ErrStorage and not ErrRevisionConflict", err)
	}
	if calls != etcdWriteAttempts {
		t.Errorf("RewrapCredential tried to write %d times, want %d", calls, etcdWriteAttempts)
	}
	want := storetest.CloneCred(rec)
	want.LastDecryptedDate = &last
	storetest.CheckCred(t, s, "c1", 0, want)
	storetest.CheckCred(t, s, "c1", 1, want)
}

// TestEtcdStoreRewrapTooLarge: a new wrapped key or key-check value past the request size limit is
// refused with ErrTooLarge before anything is sent, and nothing changes.
func TestEtcdStoreRewrapTooLarge(t *testing.T) {
	ctx := context.Background()
	s := newEtcdTestStore(t, func(o *Options) { o.MaxRequestBytes = 64 << 10 })
	rec := storetest.NewCred("c1", "c1", 1)
	storetest.PutCred(t, s, rec, 0)
	if _, err := s.InitKeyCheck(ctx, []byte("check")); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 64<<10)
	if err := s.RewrapCredential(ctx, "c1", 1, rec.WrappedKey, big); !errors.Is(err, store.ErrTooLarge) {
		t.Errorf("RewrapCredential(64 KiB key) error = %v, want ErrTooLarge", err)
	}
	if err := s.ReplaceKeyCheck(ctx, []byte("check"), big); !errors.Is(err, store.ErrTooLarge) {
		t.Errorf("ReplaceKeyCheck(64 KiB value) error = %v, want ErrTooLarge", err)
	}
	if err := s.ReplaceKeyCheck(ctx, big, []byte("next")); !errors.Is(err, store.ErrTooLarge) {
		t.Errorf("ReplaceKeyCheck(prev of 64 KiB) error = %v, want ErrTooLarge (the comparison carries the value)", err)
	}
	storetest.CheckCred(t, s, "c1", 0, rec)
	storetest.CheckCred(t, s, "c1", 1, rec)
	if got, err := s.KeyCheck(ctx); err != nil || string(got) != "check" {
		t.Errorf("KeyCheck = %q, %v; want check", got, err)
	}
}
