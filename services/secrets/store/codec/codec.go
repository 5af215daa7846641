// Package codec is the engine-neutral stored form of the secrets records, shared by the storage
// adapters (services/secrets/store/boltstore and services/secrets/store/etcdstore): the JSON of each
// record, the index key shapes, page tokens and the compare-and-set revision rule. Both adapters
// store exactly these bytes, so what one writes the other would read the same way, and listings and
// page tokens have the same order and shape whatever the engine.
//
// Nothing here may change without a schema version change of every adapter: existing bbolt files
// and etcd prefixes hold these bytes.
package codec

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/b64url"
	"github.com/gantry-dev/gantry/services/secrets"
)

// Cred is the JSON form of a secrets.CredentialRecord. It has exactly the fields of
// CredentialRecord, so the two convert into each other (and adding a field to one without the other
// does not compile). omitempty turns empty collections into absent ones: they decode as nil.
type Cred struct {
	ID                string            `json:"id"`
	Revision          int32             `json:"revision"`
	Name              string            `json:"name"`
	Enabled           bool              `json:"enabled"`
	Documentation     *string           `json:"documentation,omitempty"`
	Metadata          map[string]string `json:"metadata,omitempty"`
	Tags              []string          `json:"tags,omitempty"`
	Keys              []string          `json:"keys,omitempty"`
	SealedPairs       []byte            `json:"sealed_pairs,omitempty"`
	WrappedKey        []byte            `json:"wrapped_key,omitempty"`
	ModifiedDate      time.Time         `json:"modified_date"`
	ModifiedBy        string            `json:"modified_by"`
	LastRotationDate  *time.Time        `json:"last_rotation_date,omitempty"`
	LastDecryptedDate *time.Time        `json:"last_decrypted_date,omitempty"`
}

// Service is the JSON form of a secrets.ServiceRecord (see Cred).
type Service struct {
	ID               string    `json:"id"`
	Revision         int32     `json:"revision"`
	Enabled          bool      `json:"enabled"`
	Account          *string   `json:"account,omitempty"`
	Credentials      []string  `json:"credentials,omitempty"`
	BlindCredentials []string  `json:"blind_credentials,omitempty"`
	ModifiedDate     time.Time `json:"modified_date"`
	ModifiedBy       string    `json:"modified_by"`
}

// Grants is the JSON form of a secrets.GrantsRecord (the shape of an entry of the grants.json file
// that earlier versions kept, too).
type Grants struct {
	Encrypt bool      `json:"encrypt"`
	Decrypt bool      `json:"decrypt"`
	Created time.Time `json:"created"`
}

// Archived wraps an archived credential record (its Cred JSON, unchanged).
type Archived struct {
	ArchivedAt time.Time       `json:"archived_at"`
	Record     json.RawMessage `json:"record"`
}

// EncodeCred is the stored form of a credential record.
func EncodeCred(rec *secrets.CredentialRecord) ([]byte, error) { return json.Marshal(Cred(*rec)) }

// EncodeService is the stored form of a service record.
func EncodeService(rec *secrets.ServiceRecord) ([]byte, error) { return json.Marshal(Service(*rec)) }

// EncodeGrants is the stored form of a grants record.
func EncodeGrants(rec secrets.GrantsRecord) ([]byte, error) { return json.Marshal(Grants(rec)) }

// EncodeArchived wraps the stored form of a credential record as archived at `at`.
func EncodeArchived(at time.Time, record []byte) ([]byte, error) {
	return json.Marshal(Archived{ArchivedAt: at, Record: record})
}

// DecodeArchived decodes an archive-area entry: the credential record and when it was archived.
func DecodeArchived(area, raw []byte) (*secrets.ArchivedCredential, error) {
	var a Archived
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fmt.Errorf("corrupt record in %s: %w", area, err)
	}
	rec, err := DecodeCred(area, a.Record)
	if err != nil {
		return nil, err
	}
	return &secrets.ArchivedCredential{Record: rec, ArchivedAt: a.ArchivedAt}, nil
}

// DecodeCred decodes a record into fresh memory, so the result outlives the transaction; area (a
// bucket or key area) names where it was read in the error.
func DecodeCred(area, raw []byte) (*secrets.CredentialRecord, error) {
	var c Cred
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("corrupt record in %s: %w", area, err)
	}
	rec := secrets.CredentialRecord(c)
	return &rec, nil
}

// CredHead is what a write needs of the record it replaces: the revision its compare-and-set checks
// and the name its indexes are kept under.
type CredHead struct {
	Revision int32  `json:"revision"`
	Name     string `json:"name"`
}

// DecodeCredHead decodes only the revision and name of a stored credential record: a write runs it
// inside the shared commit, where decoding the whole record (its sealed pairs are base64) would
// hold up every write of the batch.
func DecodeCredHead(area, raw []byte) (CredHead, error) {
	var h CredHead
	if err := json.Unmarshal(raw, &h); err != nil {
		return CredHead{}, fmt.Errorf("corrupt record in %s: %w", area, err)
	}
	return h, nil
}

// DecodeService decodes a service record (see DecodeCred).
func DecodeService(area, raw []byte) (*secrets.ServiceRecord, error) {
	var c Service
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("corrupt record in %s: %w", area, err)
	}
	rec := secrets.ServiceRecord(c)
	return &rec, nil
}

// DecodeGrants decodes a grants record (see DecodeCred).
func DecodeGrants(area, raw []byte) (secrets.GrantsRecord, error) {
	var g Grants
	if err := json.Unmarshal(raw, &g); err != nil {
		return secrets.GrantsRecord{}, fmt.Errorf("corrupt record in %s: %w", area, err)
	}
	return secrets.GrantsRecord(g), nil
}

// CheckRevision is the compare-and-set rule: the stored revision (0: none) must be prevRevision and
// the new one its successor.
func CheckRevision(stored, prevRevision, revision int32) error {
	if prevRevision < 0 || stored != prevRevision || int64(revision) != int64(prevRevision)+1 {
		return secrets.ErrRevisionConflict
	}
	return nil
}

// CredRevision is the revision of a stored record, 0 for none.
func CredRevision(r *secrets.CredentialRecord) int32 {
	if r == nil {
		return 0
	}
	return r.Revision
}

// ServiceRevision is the revision of a stored record, 0 for none.
func ServiceRevision(r *secrets.ServiceRecord) int32 {
	if r == nil {
		return 0
	}
	return r.Revision
}

// Key building. In the key shapes "|" is a 0x00 byte and rev is a revision as 4 big-endian bytes;
// lower() is strings.ToLower. Ids and names cannot contain 0x00, so every key splits unambiguously
// and sorts by its first part, then the next. RevKey is also the prefix-plus-suffix shape of the
// credential→services links (credential id|service id).

// RevPrefix is id|: the prefix of every RevKey of id.
func RevPrefix(id string) []byte {
	return append([]byte(id), 0)
}

// RevKey is id|rev.
func RevKey(id string, revision int32) []byte {
	return binary.BigEndian.AppendUint32(RevPrefix(id), uint32(revision))
}

// NameKey is lower(name)|id.
func NameKey(name, id string) []byte {
	k := append([]byte(strings.ToLower(name)), 0)
	return append(k, id...)
}

// RevNameKey is lower(name)|id|rev.
func RevNameKey(name, id string, revision int32) []byte {
	return binary.BigEndian.AppendUint32(append(NameKey(name, id), 0), uint32(revision))
}

// LinkKey is credential id|service id.
func LinkKey(credentialID, serviceID string) []byte {
	return append(RevPrefix(credentialID), serviceID...)
}

// ValidKeyPart reports whether s can be part of a key: non-empty, without the 0x00 separator.
func ValidKeyPart(s string) bool {
	return s != "" && strings.IndexByte(s, 0) < 0
}

// ValidNameKey reports whether k has the shape a|b with a and b non-empty and without 0x00.
func ValidNameKey(k []byte) bool {
	i := bytes.IndexByte(k, 0)
	return i > 0 && i < len(k)-1 && bytes.IndexByte(k[i+1:], 0) < 0
}

// ValidRevNameKey reports whether k has the shape a|b|rev (ValidNameKey plus a revision).
func ValidRevNameKey(k []byte) bool {
	n := len(k)
	return n >= 8 && k[n-5] == 0 && ValidNameKey(k[:n-5])
}

// Page token kinds: a token is base64url (no padding) of one kind byte followed by the index key of
// the last item returned, so a token handed to a listing other than the one that issued it is
// rejected even where two indexes share a key shape.
const (
	TokenCredentials byte = 0xc1 + iota
	TokenCredentialRevisions
	TokenAllCredentialRevisions
	TokenServices
	TokenServiceRevisions
	TokenAllServiceRevisions
	TokenArchivedCredentials
)

// EncodePageToken is the page token of a listing of kind whose last item has index key key; "" when
// key is nil (no more items).
func EncodePageToken(kind byte, key []byte) string {
	if key == nil {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(append([]byte{kind}, key...))
}

// DecodePageToken returns the index key a page token stands for, nil for the first page, or
// secrets.ErrBadPageToken for a token of another kind or whose key fails valid. It also rejects a
// negative limit.
func DecodePageToken(page secrets.Page, kind byte, valid func([]byte) bool) ([]byte, error) {
	if page.Limit < 0 {
		return nil, fmt.Errorf("secrets: store: negative page limit %d", page.Limit)
	}
	if page.Token == "" {
		return nil, nil
	}
	raw, err := b64url.Decode(page.Token)
	if err != nil || len(raw) < 2 || raw[0] != kind || !valid(raw[1:]) {
		return nil, secrets.ErrBadPageToken
	}
	return raw[1:], nil
}
