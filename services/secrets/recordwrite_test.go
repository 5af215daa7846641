package secrets

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/wirekeys"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// TestRecordLocksLineUpWritersAndForgetIdleKeys: one holder per key at a time, other keys
// independent, a waiter whose context ends gives up, and no entry outlives its last user.
func TestRecordLocksLineUpWritersAndForgetIdleKeys(t *testing.T) {
	var locks recordLocks
	ctx := context.Background()
	var inside [2]atomic.Int32
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			key := i % 2
			unlock, err := locks.lock(ctx, fmt.Sprint("k", key))
			if err != nil {
				t.Error(err)
				return
			}
			if n := inside[key].Add(1); n != 1 {
				t.Errorf("%d holders of key %d at once", n, key)
			}
			time.Sleep(100 * time.Microsecond)
			inside[key].Add(-1)
			unlock()
		})
	}
	wg.Wait()
	if n := locks.active(); n != 0 {
		t.Errorf("%d lock entries left after every writer finished", n)
	}

	unlock, err := locks.lock(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := locks.lock(waitCtx, "held"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting past the deadline = %v, want context.DeadlineExceeded", err)
	}
	if other, err := locks.lock(ctx, "other"); err != nil {
		t.Errorf("another key while one is held: %v", err)
	} else {
		other()
	}
	unlock()
	if n := locks.active(); n != 0 {
		t.Errorf("%d lock entries left after the holder and a waiter that gave up", n)
	}
}

func createTestCredential(t *testing.T, svc *Service, ctx context.Context, name string) string {
	t.Helper()
	doc := "test"
	created, err := svc.CreateCredential(ctx, CredentialInput{Name: &name, Documentation: &doc, Pairs: map[string]any{"n": "0"}})
	if err != nil {
		t.Fatal(err)
	}
	return created.Record.ID
}

// TestConcurrentUpdatesOfOneCredentialEachGetARevision: 16 concurrent updates of one credential all
// succeed (none refused for losing a race), with the revisions 2..17, a whole history, and each
// revision holding the value its writer sent.
func TestConcurrentUpdatesOfOneCredentialEachGetARevision(t *testing.T) {
	svc, st := barrierTestService(t)
	ctx := WithPrincipal(context.Background(), AnonymousPrincipal)
	id := createTestCredential(t, svc, ctx, "hot")
	const writers = 16
	revisions := make([]int32, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			view, err := svc.UpdateCredential(ctx, id, CredentialInput{Pairs: map[string]any{"n": fmt.Sprint("writer-", w)}})
			if err != nil {
				t.Errorf("writer %d: %v", w, err)
				return
			}
			revisions[w] = view.Record.Revision
		})
	}
	wg.Wait()
	slices.Sort(revisions)
	for i, r := range revisions {
		if r != int32(i+2) {
			t.Fatalf("revisions %v, want 2..%d each once", revisions, writers+1)
		}
	}
	history, _, err := st.ListCredentialRevisions(ctx, id, store.Page{})
	if err != nil || len(history) != writers+1 {
		t.Fatalf("history: %d records, %v; want %d", len(history), err, writers+1)
	}
	seen := map[string]bool{}
	for _, rec := range history[1:] {
		pairs, err := svc.barrier.open(ctx, id, rec.Revision, rec.SealedPairs, rec.WrappedKey)
		if err != nil {
			t.Fatalf("revision %d: %v", rec.Revision, err)
		}
		seen[pairs["n"].Text()] = true
	}
	if len(seen) != writers {
		t.Errorf("%d distinct values in revisions 2..%d, want every writer's (%d): a lost update", len(seen), writers+1, writers)
	}
}

// conflictingStore loses the compare-and-set of its first `conflicts` credential and service writes,
// as a store shared with another replica does when that replica writes first.
type conflictingStore struct {
	store.Store
	conflicts atomic.Int32
}

func (s *conflictingStore) PutCredential(ctx context.Context, rec *store.CredentialRecord, prev int32) error {
	if s.conflicts.Add(-1) >= 0 {
		return store.ErrRevisionConflict
	}
	return s.Store.PutCredential(ctx, rec, prev)
}

func (s *conflictingStore) PutService(ctx context.Context, rec *store.ServiceRecord, prev int32) error {
	if s.conflicts.Add(-1) >= 0 {
		return store.ErrRevisionConflict
	}
	return s.Store.PutService(ctx, rec, prev)
}

// TestWritesRetryConflictsUntilTheDeadline: a write that loses the compare-and-set to another replica
// reads again and retries — more often than the 8 attempts writes used to get — and gives up only
// with its request's deadline.
func TestWritesRetryConflictsUntilTheDeadline(t *testing.T) {
	svc, store := barrierTestService(t)
	racing := &conflictingStore{Store: store}
	svc.store = racing
	ctx := WithPrincipal(context.Background(), AnonymousPrincipal)
	id := createTestCredential(t, svc, ctx, "raced")

	racing.conflicts.Store(20)
	view, err := svc.UpdateCredential(ctx, id, CredentialInput{Pairs: map[string]any{"n": "1"}})
	if err != nil || view.Record.Revision != 2 {
		t.Fatalf("update after 20 lost races: %v, %v; want revision 2", view, err)
	}
	racing.conflicts.Store(20)
	svcView, err := svc.PutService(ctx, "api", ServiceInput{Credentials: []string{id}})
	if err != nil || svcView.Record.Revision != 1 {
		t.Fatalf("service write after 20 lost races: %v, %v; want revision 1", svcView, err)
	}

	racing.conflicts.Store(1 << 30)
	deadline, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := svc.UpdateCredential(deadline, id, CredentialInput{Pairs: map[string]any{"n": "2"}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("update that always loses = %v, want the request's deadline", err)
	}
	if n := svc.recordLocks.active(); n != 0 {
		t.Errorf("%d record locks held after the writes returned", n)
	}
}

// TestExpectedRevision: an update, a revert or a service write with If-Match goes through only while
// the expected revision is current; a stale one fails with StaleRevisionError, nothing written.
func TestExpectedRevision(t *testing.T) {
	svc, store := barrierTestService(t)
	ctx := WithPrincipal(context.Background(), AnonymousPrincipal)
	id := createTestCredential(t, svc, ctx, "guarded")

	var stale *StaleRevisionError
	if _, err := svc.UpdateCredential(ctx, id, CredentialInput{Pairs: map[string]any{"n": "x"}, Expect: 2}); !errors.As(err, &stale) || stale.Current != 1 || stale.Expected != 2 {
		t.Fatalf("update expecting revision 2 of a revision 1 = %v, want StaleRevisionError{Expected: 2, Current: 1}", err)
	}
	if view, err := svc.UpdateCredential(ctx, id, CredentialInput{Pairs: map[string]any{"n": "1"}, Expect: 1}); err != nil || view.Record.Revision != 2 {
		t.Fatalf("update expecting the current revision: %v, %v", view, err)
	}
	if _, err := svc.RevertCredential(ctx, id, 1, 1, ChangeIntent{}); !errors.As(err, &stale) {
		t.Errorf("revert expecting a replaced revision = %v, want StaleRevisionError", err)
	}
	if view, err := svc.RevertCredential(ctx, id, 1, 2, ChangeIntent{}); err != nil || view.Record.Revision != 3 {
		t.Errorf("revert expecting the current revision: %v, %v", view, err)
	}
	if cur, _ := store.GetCredential(ctx, id); cur.Revision != 3 {
		t.Errorf("current revision %d after two refused and two accepted writes, want 3", cur.Revision)
	}

	if _, err := svc.PutService(ctx, "api", ServiceInput{Credentials: []string{id}, Expect: 1}); !errors.As(err, &stale) || stale.Current != 0 {
		t.Errorf("creating a service while expecting revision 1 = %v, want StaleRevisionError (no current revision)", err)
	}
	if _, err := svc.PutService(ctx, "api", ServiceInput{Credentials: []string{id}}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.PutService(ctx, "api", ServiceInput{Credentials: []string{}, Expect: 2}); !errors.As(err, &stale) {
		t.Errorf("service write expecting a future revision = %v, want StaleRevisionError", err)
	}
	if _, err := svc.PutService(ctx, "api", ServiceInput{Credentials: []string{}, Expect: 1}); err != nil {
		t.Errorf("service write expecting the current revision: %v", err)
	}
	if _, err := svc.RevertService(ctx, "api", 1, 1, ChangeIntent{}); !errors.As(err, &stale) {
		t.Errorf("service revert expecting a replaced revision = %v, want StaleRevisionError", err)
	}
	if got := status.Code(toStatus(zap.NewNop(), stale)); got != codes.FailedPrecondition {
		t.Errorf("toStatus(StaleRevisionError) = %s, want FailedPrecondition (the gateway's 412)", got)
	}
}

// TestExpectedRevisionFromIfMatch: the If-Match metadata is a revision number, bare or quoted; any
// other value is refused, not ignored.
func TestExpectedRevisionFromIfMatch(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   ExpectedRevision
		bad    bool
	}{
		{values: nil, want: 0},
		{values: []string{"3"}, want: 3},
		{values: []string{`"17"`}, want: 17},
		{values: []string{" 4 "}, want: 4},
		{values: []string{"0"}, bad: true},
		{values: []string{"-1"}, bad: true},
		{values: []string{"*"}, bad: true},
		{values: []string{`W/"3"`}, bad: true},
		{values: []string{"3, 4"}, bad: true},
		{values: []string{"3", "4"}, bad: true},
		{values: []string{"99999999999"}, bad: true},
		{values: []string{`"3`}, bad: true},
	} {
		md := metadata.MD{}
		if tc.values != nil {
			md[wirekeys.IfMatch] = tc.values
		}
		got, err := expectedRevision(metadata.NewIncomingContext(context.Background(), md))
		var inv *invalidError
		if tc.bad != errors.As(err, &inv) || got != tc.want {
			t.Errorf("If-Match %q = %d, %v; want %d (refused: %v)", tc.values, got, err, tc.want, tc.bad)
		}
	}
}
