package codec

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	storev1 "github.com/gantry-dev/gantry/proto/secretsstore/v1"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// Format is the encoding of a stored record, told by its first byte.
type Format byte

const (
	// FormatJSON is the JSON of schema versions 1 and 2 (legacy.go): a JSON object, so its first
	// byte is '{'. It is read, never written.
	FormatJSON Format = '{'
	// FormatProto is the current format: this byte, then the record's protobuf message
	// (proto/secretsstore/v1). No JSON text starts with it, so the two formats cannot be confused.
	FormatProto Format = 0x01
)

// FormatOf returns the format of a stored record, and an error for bytes that are neither (empty, or
// a format a newer gantry wrote).
func FormatOf(area, raw []byte) (Format, error) {
	if len(raw) == 0 {
		return 0, corrupt(area, errors.New("empty value"))
	}
	switch f := Format(raw[0]); f {
	case FormatProto, FormatJSON:
		return f, nil
	}
	return 0, corrupt(area, fmt.Errorf("unknown record format 0x%02x (written by a newer gantry?)", raw[0]))
}

// Kind is what a stored record is, for the functions that take any record (Upgrade, EncodeJSON).
type Kind int

const (
	// KindCred is a credential record (EncodeCred).
	KindCred Kind = iota + 1
	// KindService is a service record (EncodeService).
	KindService
	// KindGrants is a grants record (EncodeGrants).
	KindGrants
	// KindArchived is an archived credential record (EncodeArchived).
	KindArchived
)

// marshal is deterministic so that a record has one encoding (map entries sorted by key), as the
// hand-written encoders of wire.go are; the golden test pins both. It encodes the grants records.
var marshal = proto.MarshalOptions{Deterministic: true}

func encode(m proto.Message) ([]byte, error) {
	return marshal.MarshalAppend(append(make([]byte, 0, 1+marshal.Size(m)), byte(FormatProto)), m)
}

// unmarshal decodes the grants records (rare: the hot records go through wire.go): no merging,
// unknown fields kept.
var unmarshal = proto.UnmarshalOptions{}

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return &timestamppb.Timestamp{Seconds: t.Unix(), Nanos: int32(t.Nanosecond())}
}

// fromTS is the time of a timestamp in UTC (the zone is not stored), the zero time when absent.
func fromTS(p *timestamppb.Timestamp) time.Time {
	if p == nil {
		return time.Time{}
	}
	return time.Unix(p.Seconds, int64(p.Nanos)).UTC()
}

// EncodeCred is the stored form of a credential record. It fails for a string that is not UTF-8,
// which protobuf cannot hold (the JSON format replaced its bytes with U+FFFD): nothing is written
// rather than a record no decoder reads.
func EncodeCred(rec *store.CredentialRecord) ([]byte, error) {
	if err := checkCredUTF8(rec); err != nil {
		return nil, err
	}
	return appendCred(append(make([]byte, 0, credSize(rec)), byte(FormatProto)), rec), nil
}

// EncodeService is the stored form of a service record (see EncodeCred for strings not UTF-8).
func EncodeService(rec *store.ServiceRecord) ([]byte, error) {
	if err := checkServiceUTF8(rec); err != nil {
		return nil, err
	}
	n := 64 + len(rec.ID) + len(rec.ModifiedBy)
	if rec.Account != nil {
		n += len(*rec.Account)
	}
	for _, c := range rec.Credentials {
		n += len(c) + 8
	}
	for _, c := range rec.BlindCredentials {
		n += len(c) + 8
	}
	return appendService(append(make([]byte, 0, n), byte(FormatProto)), rec), nil
}

// errNotUTF8 is the encoders' error for a string that is not UTF-8.
func errNotUTF8(record, field string) error {
	return fmt.Errorf("secrets: store: the %s's %s is not valid UTF-8", record, field)
}

func checkCredUTF8(rec *store.CredentialRecord) error {
	if !utf8.ValidString(rec.ID) || !utf8.ValidString(rec.Name) || !utf8.ValidString(rec.ModifiedBy) ||
		(rec.Documentation != nil && !utf8.ValidString(*rec.Documentation)) {
		return errNotUTF8("credential", "id, name, documentation or modified_by")
	}
	for k, v := range rec.Metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return errNotUTF8("credential", "metadata")
		}
	}
	for _, v := range rec.Tags {
		if !utf8.ValidString(v) {
			return errNotUTF8("credential", "tags")
		}
	}
	for _, v := range rec.Keys {
		if !utf8.ValidString(v) {
			return errNotUTF8("credential", "keys")
		}
	}
	return nil
}

func checkServiceUTF8(rec *store.ServiceRecord) error {
	if !utf8.ValidString(rec.ID) || !utf8.ValidString(rec.ModifiedBy) || (rec.Account != nil && !utf8.ValidString(*rec.Account)) {
		return errNotUTF8("service", "id, account or modified_by")
	}
	for _, list := range [][]string{rec.Credentials, rec.BlindCredentials} {
		for _, v := range list {
			if !utf8.ValidString(v) {
				return errNotUTF8("service", "credentials")
			}
		}
	}
	return nil
}

// EncodeGrants is the stored form of a grants record.
func EncodeGrants(rec store.GrantsRecord) ([]byte, error) {
	return encode(&storev1.GrantsRecord{Encrypt: rec.Encrypt, Decrypt: rec.Decrypt, Created: ts(rec.Created)})
}

// EncodeArchived wraps the stored form of a credential record (in either format) as archived at
// `at`; the record inside is in the current format too.
func EncodeArchived(at time.Time, record []byte) ([]byte, error) {
	rec, err := DecodeCred([]byte("the record to archive"), record)
	if err != nil {
		return nil, err
	}
	return encodeArchived(at, rec), nil
}

func encodeArchived(at time.Time, rec *store.CredentialRecord) []byte {
	msg := appendCred(make([]byte, 0, credSize(rec)), rec)
	b := make([]byte, 0, 1+16+len(msg)+8)
	b = append(b, byte(FormatProto))
	if !at.IsZero() {
		b = appendTime(b, archivedAt, at)
	}
	return appendBytesField(b, archivedRecord, msg)
}

// DecodeCred decodes a record into fresh memory, so the result outlives the transaction; area (a
// bucket or key area) names where it was read in the error.
func DecodeCred(area, raw []byte) (*store.CredentialRecord, error) {
	f, err := FormatOf(area, raw)
	if err != nil {
		return nil, err
	}
	if f == FormatJSON {
		return decodeCredJSON(area, raw)
	}
	rec, err := decodeCredWire(raw[1:])
	if err != nil {
		return nil, corrupt(area, err)
	}
	return rec, nil
}

// DecodeService decodes a service record (see DecodeCred).
func DecodeService(area, raw []byte) (*store.ServiceRecord, error) {
	f, err := FormatOf(area, raw)
	if err != nil {
		return nil, err
	}
	if f == FormatJSON {
		return decodeServiceJSON(area, raw)
	}
	rec, err := decodeServiceWire(raw[1:])
	if err != nil {
		return nil, corrupt(area, err)
	}
	return rec, nil
}

// DecodeGrants decodes a grants record (see DecodeCred).
func DecodeGrants(area, raw []byte) (store.GrantsRecord, error) {
	f, err := FormatOf(area, raw)
	if err != nil {
		return store.GrantsRecord{}, err
	}
	if f == FormatJSON {
		return decodeGrantsJSON(area, raw)
	}
	var m storev1.GrantsRecord
	if err := unmarshal.Unmarshal(raw[1:], &m); err != nil {
		return store.GrantsRecord{}, corrupt(area, err)
	}
	return store.GrantsRecord{Encrypt: m.Encrypt, Decrypt: m.Decrypt, Created: fromTS(m.Created)}, nil
}

// DecodeArchived decodes an archive-area entry: the credential record and when it was archived.
func DecodeArchived(area, raw []byte) (*store.ArchivedCredential, error) {
	f, err := FormatOf(area, raw)
	if err != nil {
		return nil, err
	}
	if f == FormatJSON {
		return decodeArchivedJSON(area, raw)
	}
	a, ok, err := decodeArchivedWire(raw[1:])
	if err != nil {
		return nil, corrupt(area, err)
	}
	if !ok {
		return nil, corrupt(area, errors.New("archived entry without a record"))
	}
	return a, nil
}

// DecodeCredHead decodes only the revision and name of a stored credential record: a write runs it
// inside the shared commit, and listings of index keys check with it, where decoding the whole
// record would hold up every write of the batch. A record in the current format is walked field by
// field (protowire), skipping the others without decoding or copying them.
func DecodeCredHead(area, raw []byte) (CredHead, error) {
	f, err := FormatOf(area, raw)
	if err != nil {
		return CredHead{}, err
	}
	if f == FormatJSON {
		return decodeCredHeadJSON(area, raw)
	}
	var h CredHead
	b := raw[1:]
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return CredHead{}, corrupt(area, protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == credRevision && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return CredHead{}, corrupt(area, protowire.ParseError(n))
			}
			h.Revision, b = int32(v), b[n:]
		case num == credName && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return CredHead{}, corrupt(area, protowire.ParseError(n))
			}
			h.Name, b = string(v), b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return CredHead{}, corrupt(area, protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
	return h, nil
}

// Upgrade returns a stored record of kind rewritten in the current format, or nil when it already
// is in it. Either way the record is decoded whole, so a damaged one is an error, not left behind.
func Upgrade(kind Kind, area, raw []byte) ([]byte, error) {
	f, err := FormatOf(area, raw)
	if err != nil {
		return nil, err
	}
	if f == FormatProto {
		return nil, validate(kind, area, raw)
	}
	switch kind {
	case KindCred:
		rec, err := DecodeCred(area, raw)
		if err != nil {
			return nil, err
		}
		return EncodeCred(rec)
	case KindService:
		rec, err := DecodeService(area, raw)
		if err != nil {
			return nil, err
		}
		return EncodeService(rec)
	case KindGrants:
		rec, err := DecodeGrants(area, raw)
		if err != nil {
			return nil, err
		}
		return EncodeGrants(rec)
	case KindArchived:
		a, err := DecodeArchived(area, raw)
		if err != nil {
			return nil, err
		}
		return encodeArchived(a.ArchivedAt, a.Record), nil
	}
	return nil, fmt.Errorf("codec: unknown record kind %d", kind)
}

// validate decodes a record of kind, for its error.
func validate(kind Kind, area, raw []byte) error {
	var err error
	switch kind {
	case KindCred:
		_, err = DecodeCred(area, raw)
	case KindService:
		_, err = DecodeService(area, raw)
	case KindGrants:
		_, err = DecodeGrants(area, raw)
	case KindArchived:
		_, err = DecodeArchived(area, raw)
	default:
		err = fmt.Errorf("codec: unknown record kind %d", kind)
	}
	return err
}

// Upgraded counts what an upgrade pass (gantry check -upgrade) found, by area (a bbolt bucket or an
// etcd key area): records read, and those of them it rewrote from FormatJSON to FormatProto.
type Upgraded map[string]UpgradeCount

// UpgradeCount is one area's count (see Upgraded).
type UpgradeCount struct {
	Read, Rewritten int
}
