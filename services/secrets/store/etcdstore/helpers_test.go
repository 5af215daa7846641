package etcdstore

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

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
