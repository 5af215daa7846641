// Package codec is the engine-neutral stored form of the secrets records, shared by the storage
// adapters (services/secrets/store/boltstore and services/secrets/store/etcdstore): the bytes of each
// record, the index key shapes, page tokens and the compare-and-set revision rule. Both adapters
// store exactly these bytes, so what one writes the other would read the same way, and listings and
// page tokens have the same order and shape whatever the engine.
//
// A record is stored in one of two formats (see Format): FormatProto, the format byte 0x01 then the
// protobuf message of proto/secretsstore/v1 (records.go; credentials, services and archives go
// through the hand-written wire code of wire.go, the read path's hot spot), which every Encode
// function writes; or FormatJSON, the JSON that earlier versions wrote (legacy.go), which every
// Decode function still reads, and which a Writer of that format still writes (an etcd prefix at
// schema version 2, while replicas of an older build may share it). A record is rewritten in the
// current format on its next write, and Upgrade rewrites one record whatever its kind (gantry check
// -upgrade runs it over a whole store). Change requests (changes.go), a kind newer than the JSON
// format, are the exception: they exist only in FormatProto, whatever a Writer writes.
//
// Nothing here may change without a schema version change of every adapter: existing bbolt files
// and etcd prefixes hold these bytes. Schema version 3 of both adapters is the one that may hold
// FormatProto records; builds that read version 2 refuse it instead of failing on each record.
package codec

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/gantry-dev/gantry/pkg/b64url"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// CheckRevision is the compare-and-set rule: the stored revision (0: none) must be prevRevision and
// the new one its successor.
func CheckRevision(stored, prevRevision, revision int32) error {
	if prevRevision < 0 || stored != prevRevision || int64(revision) != int64(prevRevision)+1 {
		return store.ErrRevisionConflict
	}
	return nil
}

// CheckReplacement checks the arguments of ReplaceServiceRevision before anything is read: rec and
// prev must name the same revision (else an error that is none of the store's: the caller's
// mistake), of an id that a key can hold (else store.ErrNotFound, as no record has it).
func CheckReplacement(rec, prev *store.ServiceRecord) error {
	if rec == nil || prev == nil || rec.ID != prev.ID || rec.Revision != prev.Revision {
		return errors.New("secrets: store: ReplaceServiceRevision: rec and prev must name the same revision")
	}
	if !ValidKeyPart(rec.ID) {
		return store.ErrNotFound
	}
	return nil
}

// CredRevision is the revision of a stored record, 0 for none.
func CredRevision(r *store.CredentialRecord) int32 {
	if r == nil {
		return 0
	}
	return r.Revision
}

// ServiceRevision is the revision of a stored record, 0 for none.
func ServiceRevision(r *store.ServiceRecord) int32 {
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

// ValidRevKeyOf returns whether a key has the shape prefix|rev, where prefix ends with its 0x00
// (RevPrefix): the keys of the history of one record.
func ValidRevKeyOf(prefix []byte) func(k []byte) bool {
	return func(k []byte) bool { return len(k) == len(prefix)+4 && bytes.HasPrefix(k, prefix) }
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
	// TokenChangeRequests is ListChangeRequests': its key is a change request's id.
	TokenChangeRequests
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
// store.ErrBadPageToken for a token of another kind or whose key fails valid. It also rejects a
// negative limit.
func DecodePageToken(page store.Page, kind byte, valid func([]byte) bool) ([]byte, error) {
	if page.Limit < 0 {
		return nil, fmt.Errorf("secrets: store: negative page limit %d", page.Limit)
	}
	if page.Token == "" {
		return nil, nil
	}
	raw, err := b64url.Decode(page.Token)
	if err != nil || len(raw) < 2 || raw[0] != kind || !valid(raw[1:]) {
		return nil, store.ErrBadPageToken
	}
	return raw[1:], nil
}
