package boltstore

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

	"github.com/gantry-dev/gantry/services/secrets"
)

// Record fixtures and checks for the adapter's internal tests (the conformance suite, package
// storetest, has its own).

// confT0 has nanoseconds and a non-UTC zone, so lossy time encodings show.
var confT0 = time.Date(2024, 3, 4, 5, 6, 7, 123456789, time.FixedZone("UTC+1", 3600))

func confStr(s string) *string { return &s }

func confTime(t time.Time) *time.Time { return &t }

// confCred returns a credential record with every field set except Documentation (nil) and
// LastDecryptedDate (nil).
func confCred(id, name string, revision int32) *secrets.CredentialRecord {
	return &secrets.CredentialRecord{
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
func confNextCred(rec *secrets.CredentialRecord) *secrets.CredentialRecord {
	next := confCloneCred(rec)
	next.Revision++
	next.Metadata["rev"] = fmt.Sprint(next.Revision)
	next.SealedPairs = append(next.SealedPairs, byte(next.Revision))
	next.ModifiedDate = rec.ModifiedDate.Add(time.Second + 7)
	next.ModifiedBy = "bob@example.com"
	return next
}

func confCloneCred(rec *secrets.CredentialRecord) *secrets.CredentialRecord {
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

func confService(id string, revision int32, credentials ...string) *secrets.ServiceRecord {
	return &secrets.ServiceRecord{
		ID:           id,
		Revision:     revision,
		Enabled:      true,
		Account:      confStr("prod-account"),
		Credentials:  credentials,
		ModifiedDate: confT0.Add(time.Duration(revision) * time.Hour),
		ModifiedBy:   "carol@example.com",
	}
}

func confCloneService(rec *secrets.ServiceRecord) *secrets.ServiceRecord {
	c := *rec
	if rec.Account != nil {
		c.Account = confStr(*rec.Account)
	}
	c.Credentials = slices.Clone(rec.Credentials)
	c.BlindCredentials = slices.Clone(rec.BlindCredentials)
	return &c
}

// confDiffCred describes how got differs from want as a cmp.Diff "(-want +got)", "" when equal. nil
// and empty slices and maps are equal; times are compared with time.Time.Equal; pointers by
// nil-ness and pointee.
func confDiffCred(got, want *secrets.CredentialRecord) string { return confDiff(got, want) }

// confDiffService is confDiffCred for services.
func confDiffService(got, want *secrets.ServiceRecord) string { return confDiff(got, want) }

func confDiff[T any](got, want T) string {
	if d := cmp.Diff(want, got, cmpopts.EquateEmpty()); d != "" {
		return "mismatch (-want +got):\n" + d
	}
	return ""
}

func confPutCred(t *testing.T, s secrets.Store, rec *secrets.CredentialRecord, prev int32) {
	t.Helper()
	if err := s.PutCredential(context.Background(), confCloneCred(rec), prev); err != nil {
		t.Fatalf("PutCredential(%s rev %d, prev %d) error = %v", rec.ID, rec.Revision, prev, err)
	}
}

func confPutService(t *testing.T, s secrets.Store, rec *secrets.ServiceRecord, prev int32) {
	t.Helper()
	if err := s.PutService(context.Background(), confCloneService(rec), prev); err != nil {
		t.Fatalf("PutService(%s rev %d, prev %d) error = %v", rec.ID, rec.Revision, prev, err)
	}
}

// confCheckCred fails unless GetCredential (revision 0) or GetCredentialRevision returns want.
func confCheckCred(t *testing.T, s secrets.Store, id string, revision int32, want *secrets.CredentialRecord) {
	t.Helper()
	var got *secrets.CredentialRecord
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

func confCheckService(t *testing.T, s secrets.Store, id string, revision int32, want *secrets.ServiceRecord) {
	t.Helper()
	var got *secrets.ServiceRecord
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

// confCredKeys renders records as "id@revision" for order comparisons.
func confCredKeys(recs []*secrets.CredentialRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprintf("%s@%d", r.ID, r.Revision)
	}
	return out
}

func confServiceKeys(recs []*secrets.ServiceRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprintf("%s@%d", r.ID, r.Revision)
	}
	return out
}
