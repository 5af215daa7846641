package secrets

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"unicode"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/stats"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// failingStore answers GetCredential with a miss, PutCredential with a storage failure and
// PutService with a name conflict; nothing else is called.
type failingStore struct{ store.Store }

func (failingStore) GetCredential(context.Context, string) (*store.CredentialRecord, error) {
	return nil, fmt.Errorf("bolt: %w", store.ErrNotFound)
}
func (failingStore) PutCredential(context.Context, *store.CredentialRecord, int32) error {
	return fmt.Errorf("%w: bolt store: put: disk full", store.ErrStorage)
}
func (failingStore) PutService(context.Context, *store.ServiceRecord, int32) error {
	return &store.NameTakenError{}
}

// failingKMS refuses a ciphertext (an answer) and then cannot be reached (a failure).
type failingKMS struct{ kms.Provider }

func (failingKMS) Decrypt(_ context.Context, c []byte, _ map[string]string) ([]byte, string, error) {
	if string(c) == "forged" {
		return nil, "", kms.ErrInvalidCiphertext
	}
	return nil, "", fmt.Errorf("%w: throttled", kms.ErrUnavailable)
}

// TestDependencyStatsCountFailuresNotAnswers: a store or KMS call counts as an error only when the
// dependency failed (ErrStorage, an unreachable KMS), never for a miss, a conflict or a refused
// ciphertext, which are answers; every call is counted and timed.
func TestDependencyStatsCountFailuresNotAnswers(t *testing.T) {
	st := stats.New()
	s := instrumentStore(failingStore{}, st)
	ctx := context.Background()
	_, _ = s.GetCredential(ctx, "x")
	_ = s.PutCredential(ctx, &store.CredentialRecord{}, 0)
	_ = s.PutService(ctx, &store.ServiceRecord{}, 0)
	k := instrumentKMS(failingKMS{}, st)
	_, _, _ = k.Decrypt(ctx, []byte("forged"), nil)
	_, _, _ = k.Decrypt(ctx, []byte("real"), nil)

	values := map[string]int64{}
	for _, v := range st.Snapshot() {
		values[v.Name] = v.Value
	}
	for name, want := range map[string]int64{
		"secrets.store.get_credential.rq_total": 1, "secrets.store.get_credential.rq_error": 0,
		"secrets.store.put_credential.rq_total": 1, "secrets.store.put_credential.rq_error": 1,
		"secrets.store.put_service.rq_total": 1, "secrets.store.put_service.rq_error": 0,
		"secrets.store.list_credentials.rq_total": 0, // created at zero
		"secrets.kms.decrypt.rq_total":            2, "secrets.kms.decrypt.rq_error": 1,
	} {
		if got, ok := values[name]; !ok || got != want {
			t.Errorf("%s = %d (exists %v), want %d", name, got, ok, want)
		}
	}
	for _, h := range st.Histograms() {
		if h.Name == "secrets.kms.decrypt.rq_time" && h.Count != 2 || h.Name == "secrets.store.put_credential.rq_time" && h.Count != 1 {
			t.Errorf("%s has %d samples", h.Name, h.Count)
		}
	}
}

// diskFullStore fails every write as a full disk does (bbolt's ENOSPC wrapped by the adapter, and
// etcd's NOSPACE alarm, which arrives as text) and another way (an I/O error), and serves reads.
type diskFullStore struct{ store.Store }

func (diskFullStore) GetCredential(context.Context, string) (*store.CredentialRecord, error) {
	return &store.CredentialRecord{}, nil
}
func (diskFullStore) PutCredential(context.Context, *store.CredentialRecord, int32) error {
	return fmt.Errorf("%w: bolt store: put_credential: %w", store.ErrStorage, &fs.PathError{Op: "write", Path: "secrets.db", Err: syscall.ENOSPC})
}
func (diskFullStore) PutService(context.Context, *store.ServiceRecord, int32) error {
	return fmt.Errorf("%w: etcd store: put_service: %v", store.ErrStorage, errors.New("etcdserver: mvcc: database space exceeded"))
}
func (diskFullStore) PutGrants(context.Context, string, store.GrantsRecord) error {
	return fmt.Errorf("%w: bolt store: put_grants: %w", store.ErrStorage, syscall.EIO)
}

// TestDiskFullIsCountedApart: a write refused for lack of space counts in rq_disk_full besides
// rq_error (bbolt's ENOSPC and etcd's NOSPACE alarm alike), another storage failure only in
// rq_error, and a read in neither: GantryStoreDiskFull names the cause without a guess.
func TestDiskFullIsCountedApart(t *testing.T) {
	st := stats.New()
	s := instrumentStore(diskFullStore{}, st)
	ctx := context.Background()
	_, _ = s.GetCredential(ctx, "x")
	_ = s.PutCredential(ctx, &store.CredentialRecord{}, 0)
	_ = s.PutCredential(ctx, &store.CredentialRecord{}, 0)
	_ = s.PutService(ctx, &store.ServiceRecord{}, 0)
	_ = s.PutGrants(ctx, "svc", store.GrantsRecord{})

	values := map[string]int64{}
	for _, v := range st.Snapshot() {
		values[v.Name] = v.Value
	}
	for name, want := range map[string]int64{
		"secrets.store.get_credential.rq_disk_full": 0,
		"secrets.store.put_credential.rq_error":     2, "secrets.store.put_credential.rq_disk_full": 2,
		"secrets.store.put_service.rq_error": 1, "secrets.store.put_service.rq_disk_full": 1,
		"secrets.store.put_grants.rq_error": 1, "secrets.store.put_grants.rq_disk_full": 0,
	} {
		if got, ok := values[name]; !ok || got != want {
			t.Errorf("%s = %d (exists %v), want %d", name, got, ok, want)
		}
	}
}

// TestEveryStoreMethodIsInstrumented: each method of store.Store (Close aside) called through
// instrumentStore counts in secrets.store.<its name in snake case>.rq_total. instrumentedStore
// embeds the store, so a method it does not wrap still compiles and runs, uncounted: a method added
// to the contract fails here until it is wrapped. The calls go to a real (bbolt) store with zero
// arguments, which it refuses or answers without writing anything of note.
func TestEveryStoreMethodIsInstrumented(t *testing.T) {
	st := stats.New()
	s := reflect.ValueOf(instrumentStore(newTestStore(t), st))
	contract := reflect.TypeFor[store.Store]()
	ctxType := reflect.TypeFor[context.Context]()
	for i := range contract.NumMethod() {
		m := contract.Method(i)
		if m.Name == "Close" {
			continue
		}
		args := make([]reflect.Value, m.Type.NumIn())
		for j := range args {
			if in := m.Type.In(j); in == ctxType {
				args[j] = reflect.ValueOf(context.Background())
			} else {
				args[j] = reflect.Zero(in)
			}
		}
		s.MethodByName(m.Name).Call(args)
	}
	values := map[string]int64{}
	for _, v := range st.Snapshot() {
		values[v.Name] = v.Value
	}
	for i := range contract.NumMethod() {
		name := contract.Method(i).Name
		if name == "Close" {
			continue
		}
		stat := "secrets.store." + snakeCase(name) + ".rq_total"
		if got, ok := values[stat]; !ok || got != 1 {
			t.Errorf("%s after one call of %s = %d (exists %v), want 1: does instrumentedStore wrap it?", stat, name, got, ok)
		}
	}
}

// snakeCase is a method name as its statistic names it: PutChangeRequest is put_change_request.
func snakeCase(name string) string {
	var b strings.Builder
	for i, c := range name {
		if unicode.IsUpper(c) {
			if i > 0 {
				b.WriteByte('_')
			}
			c = unicode.ToLower(c)
		}
		b.WriteRune(c)
	}
	return b.String()
}

// changeStore fails a change request's write as a full disk does and serves its reads.
type changeStore struct{ store.Store }

func (changeStore) GetChangeRequest(context.Context, string) (*store.ChangeRequestRecord, error) {
	return nil, store.ErrNotFound
}
func (changeStore) PutChangeRequest(context.Context, *store.ChangeRequestRecord, int32) error {
	return fmt.Errorf("%w: bolt store: put_change_request: %w", store.ErrStorage, syscall.ENOSPC)
}
func (changeStore) ListChangeRequests(context.Context, store.Page) ([]*store.ChangeRequestRecord, string, error) {
	return nil, "", store.ErrBadPageToken
}

// TestChangeRequestStats: the change requests' calls are counted like their siblings': a miss and a
// bad token are answers, a full disk a failure counted apart.
func TestChangeRequestStats(t *testing.T) {
	st := stats.New()
	s := instrumentStore(changeStore{}, st)
	ctx := context.Background()
	_, _ = s.GetChangeRequest(ctx, "r")
	_ = s.PutChangeRequest(ctx, &store.ChangeRequestRecord{ID: "r", Version: 1}, 0)
	_, _, _ = s.ListChangeRequests(ctx, store.Page{Token: "x"})
	values := map[string]int64{}
	for _, v := range st.Snapshot() {
		values[v.Name] = v.Value
	}
	for name, want := range map[string]int64{
		"secrets.store.get_change_request.rq_total": 1, "secrets.store.get_change_request.rq_error": 0,
		"secrets.store.put_change_request.rq_total": 1, "secrets.store.put_change_request.rq_error": 1,
		"secrets.store.put_change_request.rq_disk_full": 1,
		"secrets.store.list_change_requests.rq_total":   1, "secrets.store.list_change_requests.rq_error": 0,
	} {
		if got, ok := values[name]; !ok || got != want {
			t.Errorf("%s = %d (exists %v), want %d", name, got, ok, want)
		}
	}
}
