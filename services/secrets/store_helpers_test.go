package secrets

import (
	"fmt"
	"time"
)

// A record fixture for the internal tests that write to a store directly (the key check). The
// conformance suite, package storetest, and the adapters' tests have their own.

// confT0 has nanoseconds and a non-UTC zone, so lossy time encodings show.
var confT0 = time.Date(2024, 3, 4, 5, 6, 7, 123456789, time.FixedZone("UTC+1", 3600))

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
