package codec

import (
	"errors"
	"maps"
	"slices"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/gantry-dev/gantry/services/secrets/store"
)

// The credential and service records, the hot path of every read, are encoded and decoded here by
// hand on the protobuf wire (protowire) rather than through the generated messages: a decode goes
// straight into the domain record, its strings all share one copy of the record's bytes, and its
// slices and map are sized before they are filled, so a record costs a handful of allocations
// instead of one per field, timestamp and string. The bytes are exactly those of the generated
// code's deterministic marshal of proto/secretsstore/v1 (fields in number order, map entries sorted
// by key with key and value always written, proto3 zero values left out, optional fields written
// when set): the golden files pin them, and wire_test.go checks both directions against the
// generated code on random records and under the fuzzer.

// Field numbers of proto/secretsstore/v1.
const (
	credID                protowire.Number = 1
	credRevision          protowire.Number = 2
	credName              protowire.Number = 3
	credEnabled           protowire.Number = 4
	credDocumentation     protowire.Number = 5
	credMetadata          protowire.Number = 6
	credTags              protowire.Number = 7
	credKeys              protowire.Number = 8
	credSealedPairs       protowire.Number = 9
	credWrappedKey        protowire.Number = 10
	credModifiedDate      protowire.Number = 11
	credModifiedBy        protowire.Number = 12
	credLastRotationDate  protowire.Number = 13
	credLastDecryptedDate protowire.Number = 14

	svcID               protowire.Number = 1
	svcRevision         protowire.Number = 2
	svcEnabled          protowire.Number = 3
	svcAccount          protowire.Number = 4
	svcCredentials      protowire.Number = 5
	svcBlindCredentials protowire.Number = 6
	svcModifiedDate     protowire.Number = 7
	svcModifiedBy       protowire.Number = 8

	archivedAt     protowire.Number = 1
	archivedRecord protowire.Number = 2

	mapKey       protowire.Number = 1
	mapValue     protowire.Number = 2
	tsSeconds    protowire.Number = 1
	tsNanos      protowire.Number = 2
	bytesTagSize                  = 1 // every field number here is below 16: one byte of tag
)

func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendStringField(b []byte, num protowire.Number, v string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}

// appendString writes a proto3 string field, left out when empty.
func appendString(b []byte, num protowire.Number, v string) []byte {
	if v == "" {
		return b
	}
	return appendStringField(b, num, v)
}

// appendInt32 writes a proto3 int32 field (a negative one as ten bytes, as protobuf does), left out
// when 0.
func appendInt32(b []byte, num protowire.Number, v int32) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(int64(v)))
}

func appendBool(b []byte, num protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, 1)
}

func appendStrings(b []byte, num protowire.Number, vs []string) []byte {
	for _, v := range vs {
		b = appendStringField(b, num, v)
	}
	return b
}

// tsSize is the size of a google.protobuf.Timestamp message of seconds and nanos.
func tsSize(seconds int64, nanos int32) int {
	n := 0
	if seconds != 0 {
		n += 1 + protowire.SizeVarint(uint64(seconds))
	}
	if nanos != 0 {
		n += 1 + protowire.SizeVarint(uint64(int64(nanos)))
	}
	return n
}

// appendTime writes t as a Timestamp message field (its instant: the zone is not kept).
func appendTime(b []byte, num protowire.Number, t time.Time) []byte {
	seconds, nanos := t.Unix(), int32(t.Nanosecond())
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(tsSize(seconds, nanos)))
	if seconds != 0 {
		b = protowire.AppendTag(b, tsSeconds, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(seconds))
	}
	if nanos != 0 {
		b = protowire.AppendTag(b, tsNanos, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(nanos)))
	}
	return b
}

// appendMap writes a map<string, string> field: entries sorted by key, key and value always written.
func appendMap(b []byte, num protowire.Number, m map[string]string) []byte {
	if len(m) == 0 {
		return b
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(bytesTagSize+protowire.SizeBytes(len(k))+bytesTagSize+protowire.SizeBytes(len(v))))
		b = appendStringField(b, mapKey, k)
		b = appendStringField(b, mapValue, v)
	}
	return b
}

// credSize bounds the encoded size of rec, so the encoding is one allocation.
func credSize(rec *store.CredentialRecord) int {
	n := 1 + 12*16 + len(rec.ID) + len(rec.Name) + len(rec.ModifiedBy) + len(rec.SealedPairs) + len(rec.WrappedKey) + 3*32
	if rec.Documentation != nil {
		n += len(*rec.Documentation)
	}
	for k, v := range rec.Metadata {
		n += len(k) + len(v) + 16
	}
	for _, v := range rec.Tags {
		n += len(v) + 8
	}
	for _, v := range rec.Keys {
		n += len(v) + 8
	}
	return n
}

// appendCred appends the CredentialRecord message of rec.
func appendCred(b []byte, rec *store.CredentialRecord) []byte {
	b = appendString(b, credID, rec.ID)
	b = appendInt32(b, credRevision, rec.Revision)
	b = appendString(b, credName, rec.Name)
	b = appendBool(b, credEnabled, rec.Enabled)
	if rec.Documentation != nil {
		b = appendStringField(b, credDocumentation, *rec.Documentation)
	}
	b = appendMap(b, credMetadata, rec.Metadata)
	b = appendStrings(b, credTags, rec.Tags)
	b = appendStrings(b, credKeys, rec.Keys)
	if len(rec.SealedPairs) > 0 {
		b = appendBytesField(b, credSealedPairs, rec.SealedPairs)
	}
	if len(rec.WrappedKey) > 0 {
		b = appendBytesField(b, credWrappedKey, rec.WrappedKey)
	}
	if !rec.ModifiedDate.IsZero() {
		b = appendTime(b, credModifiedDate, rec.ModifiedDate)
	}
	b = appendString(b, credModifiedBy, rec.ModifiedBy)
	if rec.LastRotationDate != nil {
		b = appendTime(b, credLastRotationDate, *rec.LastRotationDate)
	}
	if rec.LastDecryptedDate != nil {
		b = appendTime(b, credLastDecryptedDate, *rec.LastDecryptedDate)
	}
	return b
}

// appendService appends the ServiceRecord message of rec.
func appendService(b []byte, rec *store.ServiceRecord) []byte {
	b = appendString(b, svcID, rec.ID)
	b = appendInt32(b, svcRevision, rec.Revision)
	b = appendBool(b, svcEnabled, rec.Enabled)
	if rec.Account != nil {
		b = appendStringField(b, svcAccount, *rec.Account)
	}
	b = appendStrings(b, svcCredentials, rec.Credentials)
	b = appendStrings(b, svcBlindCredentials, rec.BlindCredentials)
	if !rec.ModifiedDate.IsZero() {
		b = appendTime(b, svcModifiedDate, rec.ModifiedDate)
	}
	return appendString(b, svcModifiedBy, rec.ModifiedBy)
}

// field is one field of a message on the wire: its number and type, and its varint value or, for a
// length-delimited one, where its bytes are in the message.
type field struct {
	num        protowire.Number
	typ        protowire.Type
	v          uint64
	start, end int
}

// bytesField reports whether f is field num with the length-delimited type: a field of a known
// number but another type is an unknown field, skipped, as the generated code does.
func (f field) bytesField(num protowire.Number) bool {
	return f.num == num && f.typ == protowire.BytesType
}

func (f field) varintField(num protowire.Number) bool {
	return f.num == num && f.typ == protowire.VarintType
}

// nextField reads the field at b[i:] and returns it with the index after it.
func nextField(b []byte, i int) (field, int, error) {
	num, typ, n := protowire.ConsumeTag(b[i:])
	if n < 0 {
		return field{}, 0, protowire.ParseError(n)
	}
	if num > protowire.MaxValidNumber {
		return field{}, 0, errFieldNumber
	}
	i += n
	f := field{num: num, typ: typ}
	switch typ {
	case protowire.VarintType:
		f.v, n = protowire.ConsumeVarint(b[i:])
	case protowire.BytesType:
		var v []byte
		v, n = protowire.ConsumeBytes(b[i:])
		f.start, f.end = i+n-len(v), i+n
	default:
		n = protowire.ConsumeFieldValue(num, typ, b[i:])
	}
	if n < 0 {
		return field{}, 0, protowire.ParseError(n)
	}
	return f, i + n, nil
}

var (
	errUTF8        = errors.New("string field is not valid UTF-8")
	errFieldNumber = errors.New("invalid field number")
)

// str is the string of field f, a substring of s (the message's bytes as one string); proto3
// strings are UTF-8, as the generated code checks.
func str(s string, f field) (string, error) {
	v := s[f.start:f.end]
	if !utf8.ValidString(v) {
		return "", errUTF8
	}
	return v, nil
}

// wireTime gathers a Timestamp field: a message field given twice on the wire merges, so each
// occurrence overrides only the fields it holds, as the generated code does.
type wireTime struct {
	seconds int64
	nanos   int32
	set     bool
}

// merge reads the Timestamp message of f into t.
func (t *wireTime) merge(b []byte, f field) error {
	b = b[:f.end]
	for i := f.start; i < len(b); {
		g, next, err := nextField(b, i)
		if err != nil {
			return err
		}
		switch {
		case g.varintField(tsSeconds):
			t.seconds = int64(g.v)
		case g.varintField(tsNanos):
			t.nanos = int32(g.v)
		}
		i = next
	}
	t.set = true
	return nil
}

// time is the instant, in UTC; the zero time when the field was absent.
func (t *wireTime) time() time.Time {
	if !t.set {
		return time.Time{}
	}
	return time.Unix(t.seconds, int64(t.nanos)).UTC()
}

// ptr is the instant as an optional field: nil when absent.
func (t *wireTime) ptr() *time.Time {
	if !t.set {
		return nil
	}
	v := t.time()
	return &v
}

// decodeMapEntry decodes the map<string, string> entry of f; an absent key or value is "".
func decodeMapEntry(b []byte, s string, f field) (k, v string, err error) {
	b = b[:f.end]
	for i := f.start; i < len(b); {
		g, next, err := nextField(b, i)
		if err != nil {
			return "", "", err
		}
		switch {
		case g.bytesField(mapKey):
			k, err = str(s, g)
		case g.bytesField(mapValue):
			v, err = str(s, g)
		}
		if err != nil {
			return "", "", err
		}
		i = next
	}
	return k, v, nil
}

// cloneBytes copies the bytes of f, nil when there are none (as the JSON format's omitempty had it).
func cloneBytes(b []byte, f field) []byte {
	if f.end == f.start {
		return nil
	}
	return append([]byte(nil), b[f.start:f.end]...)
}

// countFields checks that b is a well-formed message and counts the occurrences of the
// length-delimited fields of the given numbers (n[i] for nums[i]), so their slices are made once.
func countFields(b []byte, nums ...protowire.Number) ([3]int, error) {
	var n [3]int
	for i := 0; i < len(b); {
		f, next, err := nextField(b, i)
		if err != nil {
			return n, err
		}
		if f.typ == protowire.BytesType {
			for j, num := range nums {
				if f.num == num {
					n[j]++
				}
			}
		}
		i = next
	}
	return n, nil
}

// decodeCredWire decodes a CredentialRecord message into fresh memory.
func decodeCredWire(b []byte) (*store.CredentialRecord, error) {
	counts, err := countFields(b, credMetadata, credTags, credKeys)
	if err != nil {
		return nil, err
	}
	rec := &store.CredentialRecord{}
	if counts[0] > 0 {
		rec.Metadata = make(map[string]string, counts[0])
	}
	if counts[1] > 0 {
		rec.Tags = make([]string, 0, counts[1])
	}
	if counts[2] > 0 {
		rec.Keys = make([]string, 0, counts[2])
	}
	s := string(b) // one copy for every string of the record
	var modified, rotated, decrypted wireTime
	for i := 0; i < len(b); {
		f, next, _ := nextField(b, i) // countFields read it without error
		i = next
		var err error
		switch {
		case f.bytesField(credID):
			rec.ID, err = str(s, f)
		case f.varintField(credRevision):
			rec.Revision = int32(f.v)
		case f.bytesField(credName):
			rec.Name, err = str(s, f)
		case f.varintField(credEnabled):
			rec.Enabled = f.v != 0
		case f.bytesField(credDocumentation):
			var doc string
			doc, err = str(s, f)
			rec.Documentation = &doc
		case f.bytesField(credMetadata):
			var k, v string
			k, v, err = decodeMapEntry(b, s, f)
			rec.Metadata[k] = v
		case f.bytesField(credTags):
			var v string
			v, err = str(s, f)
			rec.Tags = append(rec.Tags, v)
		case f.bytesField(credKeys):
			var v string
			v, err = str(s, f)
			rec.Keys = append(rec.Keys, v)
		case f.bytesField(credSealedPairs):
			rec.SealedPairs = cloneBytes(b, f)
		case f.bytesField(credWrappedKey):
			rec.WrappedKey = cloneBytes(b, f)
		case f.bytesField(credModifiedDate):
			err = modified.merge(b, f)
		case f.bytesField(credModifiedBy):
			rec.ModifiedBy, err = str(s, f)
		case f.bytesField(credLastRotationDate):
			err = rotated.merge(b, f)
		case f.bytesField(credLastDecryptedDate):
			err = decrypted.merge(b, f)
		}
		if err != nil {
			return nil, err
		}
	}
	rec.ModifiedDate, rec.LastRotationDate, rec.LastDecryptedDate = modified.time(), rotated.ptr(), decrypted.ptr()
	return rec, nil
}

// decodeServiceWire decodes a ServiceRecord message into fresh memory.
func decodeServiceWire(b []byte) (*store.ServiceRecord, error) {
	counts, err := countFields(b, svcCredentials, svcBlindCredentials)
	if err != nil {
		return nil, err
	}
	rec := &store.ServiceRecord{}
	if counts[0] > 0 {
		rec.Credentials = make([]string, 0, counts[0])
	}
	if counts[1] > 0 {
		rec.BlindCredentials = make([]string, 0, counts[1])
	}
	s := string(b)
	var modified wireTime
	for i := 0; i < len(b); {
		f, next, _ := nextField(b, i)
		i = next
		var err error
		switch {
		case f.bytesField(svcID):
			rec.ID, err = str(s, f)
		case f.varintField(svcRevision):
			rec.Revision = int32(f.v)
		case f.varintField(svcEnabled):
			rec.Enabled = f.v != 0
		case f.bytesField(svcAccount):
			var account string
			account, err = str(s, f)
			rec.Account = &account
		case f.bytesField(svcCredentials):
			var v string
			v, err = str(s, f)
			rec.Credentials = append(rec.Credentials, v)
		case f.bytesField(svcBlindCredentials):
			var v string
			v, err = str(s, f)
			rec.BlindCredentials = append(rec.BlindCredentials, v)
		case f.bytesField(svcModifiedDate):
			err = modified.merge(b, f)
		case f.bytesField(svcModifiedBy):
			rec.ModifiedBy, err = str(s, f)
		}
		if err != nil {
			return nil, err
		}
	}
	rec.ModifiedDate = modified.time()
	return rec, nil
}

// decodeArchivedWire decodes an ArchivedCredential message; ok is false when it has no record.
func decodeArchivedWire(b []byte) (a *store.ArchivedCredential, ok bool, err error) {
	var at wireTime
	// A message field given twice merges: its record is the concatenation of the occurrences (one
	// in what this package writes).
	var record []byte
	for i := 0; i < len(b); {
		f, next, err := nextField(b, i)
		if err != nil {
			return nil, false, err
		}
		switch {
		case f.bytesField(archivedAt):
			if err := at.merge(b, f); err != nil {
				return nil, false, err
			}
		case f.bytesField(archivedRecord):
			if !ok {
				record = b[f.start:f.end]
			} else {
				record = append(append([]byte(nil), record...), b[f.start:f.end]...)
			}
			ok = true
		}
		i = next
	}
	if !ok {
		return nil, false, nil
	}
	rec, err := decodeCredWire(record)
	if err != nil {
		return nil, false, err
	}
	return &store.ArchivedCredential{Record: rec, ArchivedAt: at.time()}, true, nil
}
