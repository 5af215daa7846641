package storetest

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gantry-dev/gantry/services/secrets/store"
)

// Run runs the conformance suite against the stores newStore returns, one subtest per behaviour.
// newStore must return an empty, open store and arrange (t.Cleanup) for it to be closed; it is called
// once per subtest with that subtest's t. See the package documentation.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, s store.Store)
	}{
		{"CreateAndGet", testCreateAndGet},
		{"GetCredentials", testGetCredentials},
		{"SecondRevisionKeepsHistory", testSecondRevision},
		{"NotFound", testNotFound},
		{"CredentialRevisionConflict", testCredentialRevisionConflict},
		{"ServiceRevisionConflict", testServiceRevisionConflict},
		{"ReplaceServiceRevision", testReplaceServiceRevision},
		{"ConcurrentWriters", testConcurrentWriters},
		{"NameUniqueness", testNameUniqueness},
		{"ListCredentials", testListCredentials},
		{"ListAllCredentialRevisions", testListAllCredentialRevisions},
		{"ListCredentialRevisions", testListCredentialRevisions},
		{"ListServices", testListServices},
		{"ListServiceRevisions", testListServiceRevisions},
		{"ListAllServiceRevisions", testListAllServiceRevisions},
		{"BadPageTokens", testBadPageTokens},
		{"CredentialServices", testCredentialServices},
		{"UnknownCredentials", testUnknownCredentials},
		{"BlindCredentials", testBlindCredentials},
		{"Archive", testArchive},
		{"SetLastDecrypted", testSetLastDecrypted},
		{"RewrapCredential", testRewrapCredential},
		{"ConcurrentRewrap", testConcurrentRewrap},
		{"RewrapKeepsConcurrentStamps", testRewrapKeepsConcurrentStamps},
		{"RecordsAreCopies", testRecordsAreCopies},
		{"CancelledContext", testCancelledContext},
		{"Grants", testGrants},
		{"KeyCheck", testKeyCheck},
		{"ReplaceKeyCheck", testReplaceKeyCheck},
		{"HasData", testHasData},
		{"Probe", testProbe},
		{"ClaimLoginNonce", testClaimLoginNonce},
		{"ChangeRequests", testChangeRequests},
		{"ListChangeRequests", testListChangeRequests},
		{"ConcurrentChangeRequestWriters", testConcurrentChangeRequestWriters},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.run(t, newStore(t))
		})
	}
}

// Record fixtures and checks: exported so a backend's own tests build records the way the suite does.

// T0 has nanoseconds and a non-UTC zone, so lossy time encodings show.
var T0 = time.Date(2024, 3, 4, 5, 6, 7, 123456789, time.FixedZone("UTC+1", 3600))

// StrPtr returns a pointer to s, for optional string fields.
func StrPtr(s string) *string { return &s }

// TimePtr returns a pointer to t, for optional time fields.
func TimePtr(t time.Time) *time.Time { return &t }

// NewCred returns a credential record with every field set except Documentation (nil) and
// LastDecryptedDate (nil).
func NewCred(id, name string, revision int32) *store.CredentialRecord {
	return &store.CredentialRecord{
		ID:               id,
		Revision:         revision,
		Name:             name,
		Enabled:          true,
		Metadata:         map[string]string{"team": "infra", "rev": fmt.Sprint(revision)},
		Tags:             []string{"prod", "db"},
		Keys:             []string{"password", "user"},
		SealedPairs:      []byte{0x01, 0x00, 0xff, byte(revision)},
		WrappedKey:       []byte("wrapped-" + id),
		ModifiedDate:     T0.Add(time.Duration(revision) * time.Minute),
		ModifiedBy:       "alice@example.com",
		LastRotationDate: TimePtr(T0.Add(-time.Hour).UTC()),
	}
}

// NextCred returns the successor revision of rec with some fields changed.
func NextCred(rec *store.CredentialRecord) *store.CredentialRecord {
	next := CloneCred(rec)
	next.Revision++
	next.Metadata["rev"] = fmt.Sprint(next.Revision)
	next.SealedPairs = append(next.SealedPairs, byte(next.Revision))
	next.ModifiedDate = rec.ModifiedDate.Add(time.Second + 7)
	next.ModifiedBy = "bob@example.com"
	return next
}

// CloneCred returns a deep copy of rec.
func CloneCred(rec *store.CredentialRecord) *store.CredentialRecord {
	c := *rec
	if rec.Documentation != nil {
		c.Documentation = StrPtr(*rec.Documentation)
	}
	c.Metadata = maps.Clone(rec.Metadata)
	c.Tags = slices.Clone(rec.Tags)
	c.Keys = slices.Clone(rec.Keys)
	c.SealedPairs = bytes.Clone(rec.SealedPairs)
	c.WrappedKey = bytes.Clone(rec.WrappedKey)
	if rec.LastRotationDate != nil {
		c.LastRotationDate = TimePtr(*rec.LastRotationDate)
	}
	if rec.LastDecryptedDate != nil {
		c.LastDecryptedDate = TimePtr(*rec.LastDecryptedDate)
	}
	return &c
}

// NewService returns a service record mapping credentials, with every field set.
func NewService(id string, revision int32, credentials ...string) *store.ServiceRecord {
	return &store.ServiceRecord{
		ID:           id,
		Revision:     revision,
		Enabled:      true,
		Account:      StrPtr("prod-account"),
		Credentials:  credentials,
		ModifiedDate: T0.Add(time.Duration(revision) * time.Hour),
		ModifiedBy:   "carol@example.com",
	}
}

// CloneService returns a deep copy of rec.
func CloneService(rec *store.ServiceRecord) *store.ServiceRecord {
	c := *rec
	if rec.Account != nil {
		c.Account = StrPtr(*rec.Account)
	}
	c.Credentials = slices.Clone(rec.Credentials)
	c.BlindCredentials = slices.Clone(rec.BlindCredentials)
	return &c
}

// NewChangeRequest returns a pending change request with every field set but the decision
// (DecidedBy, DecidedAt, DecisionReason, AppliedRevision, which NextChangeRequest sets), its times in
// T0's zone.
func NewChangeRequest(id string, version int32) *store.ChangeRequestRecord {
	return &store.ChangeRequestRecord{
		ID:           id,
		Version:      version,
		Action:       "update",
		ResourceType: "credential",
		ResourceID:   "cred-" + id,
		ResourceName: "DB " + id,
		BaseRevision: 4,
		Status:       store.ChangePending,
		RequestedBy:  "user:alice@example.com",
		Reason:       "rotate the password of " + id,
		Created:      T0,
		Expires:      T0.Add(24 * time.Hour),
		Required:     2,
		Approvals:    []store.ChangeApproval{{By: "user:bob@example.com", At: T0.Add(time.Hour + time.Nanosecond), Via: "api"}},
		Change:       []byte(`{"pairs":"replaced","keys":["password"]}`),
		Summary:      []byte("password: changed"),
		SealedPairs:  []byte{0x01, 0x00, 0xff, byte(version)},
		WrappedKey:   []byte("wrapped-" + id),
		Team:         "T0001",
		Bot:          "B0001",
		Channel:      "C0001",
	}
}

// NextChangeRequest returns the successor version of rec: a second approval that applies it, with
// every decision field set and the Slack notice posted.
func NextChangeRequest(rec *store.ChangeRequestRecord) *store.ChangeRequestRecord {
	next := CloneChangeRequest(rec)
	next.Version++
	at := rec.Created.Add(2*time.Hour + 7)
	next.Approvals = append(next.Approvals, store.ChangeApproval{By: "service:deployer", At: at, Via: "slack:T0001/U0002"})
	next.Status = store.ChangeApplied
	next.DecidedBy = "service:deployer"
	next.DecidedAt = TimePtr(at)
	next.DecisionReason = "second approval"
	next.AppliedRevision = rec.BaseRevision + 1
	next.NoticeChannel = "C0001"
	next.NoticeTS = "1712345678.000100"
	next.NoticedStatus = store.ChangePending
	return next
}

// CloneChangeRequest returns a deep copy of rec.
func CloneChangeRequest(rec *store.ChangeRequestRecord) *store.ChangeRequestRecord {
	c := *rec
	c.Approvals = slices.Clone(rec.Approvals)
	if rec.DecidedAt != nil {
		c.DecidedAt = TimePtr(*rec.DecidedAt)
	}
	c.Change = bytes.Clone(rec.Change)
	c.Summary = bytes.Clone(rec.Summary)
	c.SealedPairs = bytes.Clone(rec.SealedPairs)
	c.WrappedKey = bytes.Clone(rec.WrappedKey)
	return &c
}

// recordOpts is how records are compared: nil and empty slices and maps are equal (adapters may
// return either); times are compared with time.Time.Equal (cmp uses the Equal method), so the
// instant counts and not the zone; pointers are equal when both are nil or their pointees are equal.
var recordOpts = cmp.Options{cmpopts.EquateEmpty()}

// DiffCred describes how got differs from want as a cmp.Diff "(-want +got)", "" when equal.
func DiffCred(got, want *store.CredentialRecord) string {
	return diffRecords(got, want)
}

// DiffService is DiffCred for services.
func DiffService(got, want *store.ServiceRecord) string {
	return diffRecords(got, want)
}

// DiffChangeRequest is DiffCred for change requests.
func DiffChangeRequest(got, want *store.ChangeRequestRecord) string {
	return diffRecords(got, want)
}

func diffRecords[T any](got, want T) string {
	if d := cmp.Diff(want, got, recordOpts); d != "" {
		return "mismatch (-want +got):\n" + d
	}
	return ""
}

func showPtr[T any](p *T) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprintf("&%v", *p)
}

// PutCred writes rec over revision prev, failing t on an error.
func PutCred(t *testing.T, s store.Store, rec *store.CredentialRecord, prev int32) {
	t.Helper()
	if err := s.PutCredential(context.Background(), CloneCred(rec), prev); err != nil {
		t.Fatalf("PutCredential(%s rev %d, prev %d) error = %v", rec.ID, rec.Revision, prev, err)
	}
}

// PutService writes rec over revision prev, failing t on an error.
func PutService(t *testing.T, s store.Store, rec *store.ServiceRecord, prev int32) {
	t.Helper()
	if err := s.PutService(context.Background(), CloneService(rec), prev); err != nil {
		t.Fatalf("PutService(%s rev %d, prev %d) error = %v", rec.ID, rec.Revision, prev, err)
	}
}

// PutChange writes rec over version prev, failing t on an error.
func PutChange(t *testing.T, s store.Store, rec *store.ChangeRequestRecord, prev int32) {
	t.Helper()
	if err := s.PutChangeRequest(context.Background(), CloneChangeRequest(rec), prev); err != nil {
		t.Fatalf("PutChangeRequest(%s version %d, prev %d) error = %v", rec.ID, rec.Version, prev, err)
	}
}

// CheckChange fails unless GetChangeRequest returns want.
func CheckChange(t *testing.T, s store.Store, id string, want *store.ChangeRequestRecord) {
	t.Helper()
	got, err := s.GetChangeRequest(context.Background(), id)
	if err != nil {
		t.Fatalf("GetChangeRequest(%q) error = %v", id, err)
	}
	if diff := DiffChangeRequest(got, want); diff != "" {
		t.Errorf("GetChangeRequest(%q): %s", id, diff)
	}
}

// ChangeKeys renders change requests as "id@version" for order comparisons.
func ChangeKeys(recs []*store.ChangeRequestRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprintf("%s@%d", r.ID, r.Version)
	}
	return out
}

// CheckCred fails unless GetCredential (revision 0) or GetCredentialRevision returns want.
func CheckCred(t *testing.T, s store.Store, id string, revision int32, want *store.CredentialRecord) {
	t.Helper()
	var got *store.CredentialRecord
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
	if diff := DiffCred(got, want); diff != "" {
		t.Errorf("%s: %s", what, diff)
	}
}

// CheckService is CheckCred for services.
func CheckService(t *testing.T, s store.Store, id string, revision int32, want *store.ServiceRecord) {
	t.Helper()
	var got *store.ServiceRecord
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
	if diff := DiffService(got, want); diff != "" {
		t.Errorf("%s: %s", what, diff)
	}
}

// walk pages through a listing with limit and returns every item and the number of pages. It
// checks that non-final pages are full, that no page exceeds the limit and that it ends.
func walk[T any](t *testing.T, limit int, list func(store.Page) ([]T, string, error)) ([]T, int) {
	t.Helper()
	var all []T
	token := ""
	for pages := 1; ; pages++ {
		if pages > 1000 {
			t.Fatalf("limit %d: still paging after 1000 pages", limit)
		}
		items, next, err := list(store.Page{Limit: limit, Token: token})
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

// CredKeys renders records as "id@revision" for order comparisons.
func CredKeys(recs []*store.CredentialRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprintf("%s@%d", r.ID, r.Revision)
	}
	return out
}

// ServiceKeys is CredKeys for services.
func ServiceKeys(recs []*store.ServiceRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprintf("%s@%d", r.ID, r.Revision)
	}
	return out
}

// pageCount returns how many pages a listing of n items has with limit (limit 0: one page).
func pageCount(n, limit int) int {
	if limit == 0 || n == 0 {
		return 1
	}
	return (n + limit - 1) / limit
}
