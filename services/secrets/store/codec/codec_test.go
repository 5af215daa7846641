package codec

import (
	"bytes"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	storev1 "github.com/gantry-dev/gantry/proto/secretsstore/v1"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of testdata/ from the current encoding")

// goldenAt has nanoseconds and a zone, so a lossy time encoding shows.
var goldenAt = time.Date(2024, 3, 4, 5, 6, 7, 123456789, time.FixedZone("UTC+1", 3600))

func goldenRecords() (cred, empty *store.CredentialRecord, svc *store.ServiceRecord, grants store.GrantsRecord) {
	doc, account := "the db", "prod"
	cred = &store.CredentialRecord{
		ID: "c1", Revision: 2, Name: "DB", Enabled: true, Documentation: &doc,
		Metadata: map[string]string{"team": "infra", "owner": "ops"}, Tags: []string{"prod"}, Keys: []string{"password"},
		SealedPairs: []byte{1, 0, 0xff}, WrappedKey: []byte("wk"), ModifiedDate: goldenAt, ModifiedBy: "alice",
		LastRotationDate: &goldenAt,
	}
	empty = &store.CredentialRecord{ID: "c2", Revision: 1, Name: "x", Metadata: map[string]string{}, Tags: []string{}}
	svc = &store.ServiceRecord{ID: "s1", Revision: 1, Enabled: true, Account: &account,
		Credentials: []string{"c1"}, ModifiedDate: goldenAt, ModifiedBy: "bob"}
	grants = store.GrantsRecord{Encrypt: true, Created: goldenAt.UTC()}
	return cred, empty, svc, grants
}

// golden compares got with testdata/name, or writes it there with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *updateGolden {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestStoredFormat -update once to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: the stored bytes changed:\n got %s\nwant %s\nexisting stores hold these bytes: a change needs a schema version change of both adapters", name, hex.EncodeToString(got), hex.EncodeToString(want))
	}
}

// TestStoredFormat pins the stored bytes: existing bbolt files and etcd prefixes hold them, so any
// change here needs a schema version change of both adapters.
func TestStoredFormat(t *testing.T) {
	cred, empty, svc, grants := goldenRecords()
	for _, tt := range []struct {
		name   string
		encode func() ([]byte, error)
	}{
		{"credential.bin", func() ([]byte, error) { return EncodeCred(cred) }},
		{"credential-empty.bin", func() ([]byte, error) { return EncodeCred(empty) }},
		{"service.bin", func() ([]byte, error) { return EncodeService(svc) }},
		{"grants.bin", func() ([]byte, error) { return EncodeGrants(grants) }},
		{"archived.bin", func() ([]byte, error) {
			raw, err := EncodeCred(cred)
			if err != nil {
				return nil, err
			}
			return EncodeArchived(goldenAt.UTC(), raw)
		}},
		{"change-request.bin", func() ([]byte, error) { return EncodeChangeRequest(goldenChange()) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.encode()
			if err != nil {
				t.Fatal(err)
			}
			if got[0] != byte(FormatProto) {
				t.Errorf("first byte %#x, want the format byte %#x", got[0], FormatProto)
			}
			golden(t, tt.name, got)
			// The same message, as the generated code marshals it deterministically: the golden bytes
			// are plain protobuf.
			again, err := tt.encode()
			if err != nil || !bytes.Equal(got, again) {
				t.Errorf("a second encoding differs: %x, %v", again, err)
			}
		})
	}
	for _, tt := range []struct{ name, got, want string }{
		{"RevKey", hex.EncodeToString(RevKey("c1", 258)), "633100" + "00000102"},
		{"NameKey", hex.EncodeToString(NameKey("DB", "c1")), "6462006331"},
		{"RevNameKey", hex.EncodeToString(RevNameKey("DB", "c1", 3)), "646200633100" + "00000003"},
		{"LinkKey", hex.EncodeToString(LinkKey("c1", "s1")), "6331007331"},
		{"page token", EncodePageToken(TokenServices, []byte("s1\x00s1")), "xHMxAHMx"},
	} {
		if tt.got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, tt.got, tt.want)
		}
	}
	if TokenCredentials != 0xc1 || TokenAllServiceRevisions != 0xc6 || TokenArchivedCredentials != 0xc7 || TokenChangeRequests != 0xc8 {
		t.Errorf("token kinds %#x..%#x, %#x, %#x; want 0xc1..0xc6, 0xc7, 0xc8", TokenCredentials, TokenAllServiceRevisions, TokenArchivedCredentials, TokenChangeRequests)
	}
}

// TestDecodeGolden decodes the committed golden bytes of both formats, the JSON ones exactly as
// schema version 2 stored them, into the records they were made from.
func TestDecodeGolden(t *testing.T) {
	cred, empty, svc, grants := goldenRecords()
	emptyWant := &store.CredentialRecord{ID: "c2", Revision: 1, Name: "x"} // empty collections decode as nil
	for _, format := range []string{"bin", "json"} {
		t.Run(format, func(t *testing.T) {
			read := func(name string) []byte {
				raw, err := os.ReadFile(filepath.Join("testdata", name+"."+format))
				if err != nil {
					t.Fatal(err)
				}
				return raw
			}
			for name, want := range map[string]*store.CredentialRecord{"credential": cred, "credential-empty": emptyWant} {
				got, err := DecodeCred([]byte("area"), read(name))
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("%s: (-want +got)\n%s", name, d)
				}
				head, err := DecodeCredHead([]byte("area"), read(name))
				if err != nil || head != (CredHead{Revision: want.Revision, Name: want.Name}) {
					t.Errorf("%s: DecodeCredHead = %+v, %v", name, head, err)
				}
			}
			gotSvc, err := DecodeService([]byte("area"), read("service"))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(svc, gotSvc); d != "" {
				t.Errorf("service: (-want +got)\n%s", d)
			}
			gotGrants, err := DecodeGrants([]byte("area"), read("grants"))
			if err != nil || !cmp.Equal(grants, gotGrants) {
				t.Errorf("grants = %+v, %v; want %+v", gotGrants, err, grants)
			}
			a, err := DecodeArchived([]byte("area"), read("archived"))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(&store.ArchivedCredential{Record: cred, ArchivedAt: goldenAt}, a); d != "" {
				t.Errorf("archived: (-want +got)\n%s", d)
			}
		})
	}
	_ = empty
}

// TestJSONFormatUnchanged: EncodeJSON (what the upgrade tests store) writes exactly the committed
// JSON of schema version 2.
func TestJSONFormatUnchanged(t *testing.T) {
	for _, tt := range []struct {
		name string
		kind Kind
	}{{"credential", KindCred}, {"credential-empty", KindCred}, {"service", KindService}, {"grants", KindGrants}, {"archived", KindArchived}} {
		want, err := os.ReadFile(filepath.Join("testdata", tt.name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		current, err := os.ReadFile(filepath.Join("testdata", tt.name+".bin"))
		if err != nil {
			t.Fatal(err)
		}
		// From the JSON itself (the zone of its times is kept) and from the protobuf (times in UTC):
		// equal for every golden record but those with a zone.
		got, err := EncodeJSON(tt.kind, []byte("area"), want)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: EncodeJSON of the JSON = %s, %v; want %s", tt.name, got, err, want)
		}
		up, err := Upgrade(tt.kind, []byte("area"), want)
		if err != nil || !bytes.Equal(up, current) {
			t.Errorf("%s: Upgrade of the JSON = %x, %v; want the golden %x", tt.name, up, err, current)
		}
		if again, err := Upgrade(tt.kind, []byte("area"), current); again != nil || err != nil {
			t.Errorf("%s: Upgrade of a current record = %x, %v; want nil, nil", tt.name, again, err)
		}
	}
}

// TestNilAndEmpty: what comes back nil and what stays set, as the JSON format had it: empty
// collections come back nil, a set pointer stays set even to "" or the zero time, the zero
// ModifiedDate stays zero.
func TestNilAndEmpty(t *testing.T) {
	blank, zero := "", time.Time{}
	for _, tt := range []struct {
		name     string
		in, want *store.CredentialRecord
	}{
		{"nil everything", &store.CredentialRecord{ID: "c"}, &store.CredentialRecord{ID: "c"}},
		{"empty collections", &store.CredentialRecord{ID: "c", Metadata: map[string]string{}, Tags: []string{}, Keys: []string{},
			SealedPairs: []byte{}, WrappedKey: []byte{}}, &store.CredentialRecord{ID: "c"}},
		{"set to empty", &store.CredentialRecord{ID: "c", Documentation: &blank, LastRotationDate: &zero, LastDecryptedDate: &zero},
			&store.CredentialRecord{ID: "c", Documentation: &blank, LastRotationDate: &zero, LastDecryptedDate: &zero}},
		{"empty strings in collections", &store.CredentialRecord{ID: "c", Metadata: map[string]string{"": ""}, Tags: []string{""}},
			&store.CredentialRecord{ID: "c", Metadata: map[string]string{"": ""}, Tags: []string{""}}},
		{"before 1970", &store.CredentialRecord{ID: "c", ModifiedDate: time.Date(1969, 12, 31, 23, 59, 59, 1, time.UTC)},
			&store.CredentialRecord{ID: "c", ModifiedDate: time.Date(1969, 12, 31, 23, 59, 59, 1, time.UTC)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := EncodeCred(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeCred([]byte("area"), raw)
			if err != nil {
				t.Fatal(err)
			}
			// cmp, unlike the conformance suite, tells nil from empty.
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("(-want +got)\n%s", d)
			}
			// The JSON format agrees.
			js, err := EncodeJSON(KindCred, []byte("area"), raw)
			if err != nil {
				t.Fatal(err)
			}
			fromJSON, err := DecodeCred([]byte("area"), js)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, fromJSON); d != "" {
				t.Errorf("JSON (-want +got)\n%s", d)
			}
		})
	}
	raw, err := EncodeService(&store.ServiceRecord{ID: "s", Account: &blank, Credentials: []string{}, BlindCredentials: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := DecodeService([]byte("area"), raw)
	if err != nil || svc.Account == nil || *svc.Account != "" || svc.Credentials != nil || svc.BlindCredentials != nil {
		t.Errorf("DecodeService = %+v, %v; want Account set to \"\" and nil collections", svc, err)
	}
}

// protoNames are the protobuf field names of a message.
func protoNames(m proto.Message) map[string]bool {
	out := map[string]bool{}
	fields := m.ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		out[string(fields.Get(i).Name())] = true
	}
	return out
}

// TestMessagesMatchRecords: every message of proto/secretsstore/v1 has exactly the fields of its
// domain record, named as the JSON format named them. The JSON types convert to and from the domain
// records (so adding a field to a record without the JSON type does not compile), and this test
// makes the same hold of the messages: a field added to a record and its JSON type but not to the
// message fails here instead of being silently dropped.
func TestMessagesMatchRecords(t *testing.T) {
	for _, tt := range []struct {
		record, jsonType any
		message          proto.Message
	}{
		{store.CredentialRecord{}, Cred{}, &storev1.CredentialRecord{}},
		{store.ServiceRecord{}, Service{}, &storev1.ServiceRecord{}},
		{store.GrantsRecord{}, Grants{}, &storev1.GrantsRecord{}},
		{store.ArchivedCredential{}, Archived{}, &storev1.ArchivedCredential{}},
	} {
		rt, jt := reflect.TypeOf(tt.record), reflect.TypeOf(tt.jsonType)
		names := protoNames(tt.message)
		if rt.NumField() != len(names) {
			t.Errorf("%s has %d fields, %s has %d", rt, rt.NumField(), tt.message.ProtoReflect().Descriptor().FullName(), len(names))
		}
		for i := range rt.NumField() {
			f := rt.Field(i)
			jf, ok := jt.FieldByName(f.Name)
			if !ok {
				t.Errorf("%s.%s has no field in %s", rt, f.Name, jt)
				continue
			}
			name, _, _ := strings.Cut(jf.Tag.Get("json"), ",")
			if !names[name] {
				t.Errorf("%s.%s (%q) has no field in %s", rt, f.Name, name, tt.message.ProtoReflect().Descriptor().FullName())
			}
		}
	}
	// Pointer fields of the records are proto3 optional (or messages): nil and set stay apart.
	for _, m := range []proto.Message{&storev1.CredentialRecord{}, &storev1.ServiceRecord{}} {
		fields := m.ProtoReflect().Descriptor().Fields()
		for i := range fields.Len() {
			f := fields.Get(i)
			if f.Kind() == protoreflect.StringKind && (f.Name() == "documentation" || f.Name() == "account") && !f.HasPresence() {
				t.Errorf("%s has no presence: nil and \"\" would decode the same", f.FullName())
			}
		}
	}
}

// TestDecodeErrors: bytes of no known format, and damaged ones, are errors naming the area, never a
// record.
func TestDecodeErrors(t *testing.T) {
	good, err := EncodeCred(&store.CredentialRecord{ID: "c1", Revision: 7, Name: "orders-db", SealedPairs: []byte("sealed")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		raw  []byte
		want string
	}{
		{"empty", nil, "empty value"},
		{"newer format", append([]byte{0x02}, good[1:]...), "unknown record format 0x02"},
		{"bad JSON", []byte(`{"revision":`), "unexpected end of JSON"},
		{"cut protobuf", good[:len(good)-2], "cred_current"},
		{"bad tag", []byte{byte(FormatProto), 0xff}, "cred_current"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodeCred([]byte("cred_current"), tt.raw); err == nil || !strings.Contains(err.Error(), "cred_current") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("DecodeCred = %v, want an error naming the area and %q", err, tt.want)
			}
			if _, err := DecodeCredHead([]byte("cred_current"), tt.raw); err == nil || !strings.Contains(err.Error(), "cred_current") {
				t.Errorf("DecodeCredHead = %v, want an error naming the area", err)
			}
			if _, err := Upgrade(KindCred, []byte("cred_current"), tt.raw); err == nil {
				t.Error("Upgrade: no error")
			}
		})
	}
	if _, err := DecodeService([]byte("svc_current"), []byte("{")); err == nil {
		t.Error("DecodeService of bad JSON: no error")
	}
}

// TestDecodeCredHead: the head of a stored record is its revision and name, whatever the order and
// the other fields around them.
func TestDecodeCredHead(t *testing.T) {
	raw, err := EncodeCred(&store.CredentialRecord{ID: "c1", Revision: 7, Name: "orders-db", SealedPairs: []byte("sealed"), Metadata: map[string]string{"a": "b"},
		ModifiedDate: goldenAt, LastRotationDate: &goldenAt})
	if err != nil {
		t.Fatal(err)
	}
	if head, err := DecodeCredHead([]byte("area"), raw); err != nil || head != (CredHead{Revision: 7, Name: "orders-db"}) {
		t.Errorf("DecodeCredHead = %+v, %v", head, err)
	}
	// Fields in another order than the encoder's (protobuf allows any) and unknown ones.
	m := &storev1.CredentialRecord{Name: "late", Revision: 3}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	reordered := append([]byte{byte(FormatProto)}, b[len(b)-6:]...) // name last: 0x1a 0x04 "late"
	reordered = append(reordered, b[:len(b)-6]...)
	reordered = append(reordered, 0xf8, 0x07, 0x01) // field 127, varint 1
	if head, err := DecodeCredHead([]byte("area"), reordered); err != nil || head != (CredHead{Revision: 3, Name: "late"}) {
		t.Errorf("DecodeCredHead of reordered fields = %+v, %v", head, err)
	}
	if rec, err := DecodeCred([]byte("area"), reordered); err != nil || rec.Revision != 3 || rec.Name != "late" {
		t.Errorf("DecodeCred of reordered fields = %+v, %v", rec, err)
	}
}

// TestCheckRevision is the compare-and-set rule.
func TestCheckRevision(t *testing.T) {
	if err := CheckRevision(1, 1, 2); err != nil {
		t.Errorf("CheckRevision(1, 1, 2) = %v", err)
	}
	if err := CheckRevision(1, 0, 1); err != store.ErrRevisionConflict {
		t.Errorf("CheckRevision(1, 0, 1) = %v, want ErrRevisionConflict", err)
	}
}

// benchRecord is a credential as the service stores it: a few pairs sealed, metadata, times.
func benchRecord() *store.CredentialRecord {
	doc := "orders database, primary"
	return &store.CredentialRecord{
		ID: "0d6a3b7c2f9e4a1b8c5d", Revision: 12, Name: "orders-db", Enabled: true, Documentation: &doc,
		Metadata: map[string]string{"team": "payments", "tier": "1"}, Tags: []string{"prod", "db"},
		Keys: []string{"host", "password", "user"}, SealedPairs: bytes.Repeat([]byte{0xa5}, 256), WrappedKey: bytes.Repeat([]byte{0x5a}, 184),
		ModifiedDate: goldenAt, ModifiedBy: "alice@example.com", LastRotationDate: &goldenAt,
	}
}

func benchFormats(b *testing.B) map[string][]byte {
	raw, err := EncodeCred(benchRecord())
	if err != nil {
		b.Fatal(err)
	}
	js, err := EncodeJSON(KindCred, []byte("area"), raw)
	if err != nil {
		b.Fatal(err)
	}
	return map[string][]byte{"json": js, "protobuf": raw}
}

// BenchmarkDecodeCred: a whole record, JSON (schema version 2) against protobuf.
func BenchmarkDecodeCred(b *testing.B) {
	for _, format := range []string{"json", "protobuf"} {
		raw := benchFormats(b)[format]
		b.Run(format, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := DecodeCred([]byte("area"), raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeCredHead: revision and name only, JSON against protobuf.
func BenchmarkDecodeCredHead(b *testing.B) {
	for _, format := range []string{"json", "protobuf"} {
		raw := benchFormats(b)[format]
		b.Run(format, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeCredHead([]byte("area"), raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncodeCred: JSON (as schema version 2 wrote it) against protobuf.
func BenchmarkEncodeCred(b *testing.B) {
	rec := benchRecord()
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := jsonMarshalCred(rec); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protobuf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := EncodeCred(rec); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestEncodeRefusesNonUTF8: a string that is not UTF-8 fails the encoding (nothing is written)
// instead of storing a record that no protobuf decoder reads back.
func TestEncodeRefusesNonUTF8(t *testing.T) {
	bad := "a\xffb"
	for name, rec := range map[string]*store.CredentialRecord{
		"name":          {ID: "c", Name: bad},
		"documentation": {ID: "c", Documentation: &bad},
		"metadata key":  {ID: "c", Metadata: map[string]string{bad: "v"}},
		"metadata":      {ID: "c", Metadata: map[string]string{"k": bad}},
		"tags":          {ID: "c", Tags: []string{"ok", bad}},
		"keys":          {ID: "c", Keys: []string{bad}},
		"modified_by":   {ID: "c", ModifiedBy: bad},
	} {
		if raw, err := EncodeCred(rec); err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
			t.Errorf("%s: EncodeCred = %x, %v; want an error", name, raw, err)
		}
	}
	if raw, err := EncodeService(&store.ServiceRecord{ID: "s", Credentials: []string{bad}}); err == nil {
		t.Errorf("EncodeService = %x, want an error", raw)
	}
	// Sealed bytes are bytes: anything goes.
	if _, err := EncodeCred(&store.CredentialRecord{ID: "c", SealedPairs: []byte(bad)}); err != nil {
		t.Errorf("EncodeCred of binary sealed pairs: %v", err)
	}
}

// fill sets every field of the struct v points to to a non-zero value, by its type; a type it does
// not know fails t, so a new kind of field gets a value here before it can be forgotten.
func fill(t *testing.T, v reflect.Value) {
	t.Helper()
	at := time.Date(2025, 6, 7, 8, 9, 10, 11, time.UTC)
	for i := range v.NumField() {
		f := v.Field(i)
		switch x := f.Addr().Interface().(type) {
		case *string:
			*x = "v-" + v.Type().Field(i).Name
		case *int32:
			*x = int32(i + 1)
		case *bool:
			*x = true
		case **string:
			s := "p-" + v.Type().Field(i).Name
			*x = &s
		case *map[string]string:
			*x = map[string]string{"k": "v", "": "empty key"}
		case *[]string:
			*x = []string{"a", ""}
		case *[]byte:
			*x = []byte{0, 1, 0xff}
		case *time.Time:
			*x = at.Add(time.Duration(i) * time.Second)
		case **time.Time:
			tt := at.Add(time.Duration(i) * time.Hour)
			*x = &tt
		case **store.CredentialRecord:
			*x = &store.CredentialRecord{}
			fill(t, reflect.ValueOf(*x).Elem())
		case *[]store.ChangeApproval:
			// A filled approval and a zero one: each field of it comes back, and so does its absence.
			*x = make([]store.ChangeApproval, 2)
			fill(t, reflect.ValueOf(&(*x)[0]).Elem())
		default:
			t.Fatalf("fill: %s.%s has type %s: give it a value here", v.Type(), v.Type().Field(i).Name, f.Type())
		}
	}
}

// TestEveryFieldRoundTrips: a record with every field set comes back whole from each encoder, so a
// field added to a record, its JSON type and its message but forgotten by the hand-written wire code
// (wire.go) fails here.
func TestEveryFieldRoundTrips(t *testing.T) {
	var cred store.CredentialRecord
	fill(t, reflect.ValueOf(&cred).Elem())
	raw, err := EncodeCred(&cred)
	if err != nil {
		t.Fatal(err)
	}
	gotCred, err := DecodeCred([]byte("area"), raw)
	if err != nil || !cmp.Equal(&cred, gotCred) {
		t.Errorf("credential: %v, (-want +got)\n%s", err, cmp.Diff(&cred, gotCred))
	}
	var svc store.ServiceRecord
	fill(t, reflect.ValueOf(&svc).Elem())
	raw, err = EncodeService(&svc)
	if err != nil {
		t.Fatal(err)
	}
	gotSvc, err := DecodeService([]byte("area"), raw)
	if err != nil || !cmp.Equal(&svc, gotSvc) {
		t.Errorf("service: %v, (-want +got)\n%s", err, cmp.Diff(&svc, gotSvc))
	}
	var grants store.GrantsRecord
	fill(t, reflect.ValueOf(&grants).Elem())
	raw, err = EncodeGrants(grants)
	if err != nil {
		t.Fatal(err)
	}
	gotGrants, err := DecodeGrants([]byte("area"), raw)
	if err != nil || !cmp.Equal(grants, gotGrants) {
		t.Errorf("grants: %v, (-want +got)\n%s", err, cmp.Diff(grants, gotGrants))
	}
	var archived store.ArchivedCredential
	fill(t, reflect.ValueOf(&archived).Elem())
	rec, err := EncodeCred(archived.Record)
	if err != nil {
		t.Fatal(err)
	}
	raw, err = EncodeArchived(archived.ArchivedAt, rec)
	if err != nil {
		t.Fatal(err)
	}
	gotArchived, err := DecodeArchived([]byte("area"), raw)
	if err != nil || !cmp.Equal(&archived, gotArchived) {
		t.Errorf("archived: %v, (-want +got)\n%s", err, cmp.Diff(&archived, gotArchived))
	}
	var change store.ChangeRequestRecord
	fill(t, reflect.ValueOf(&change).Elem())
	raw, err = EncodeChangeRequest(&change)
	if err != nil {
		t.Fatal(err)
	}
	gotChange, err := DecodeChangeRequest([]byte("area"), raw)
	if err != nil || !cmp.Equal(&change, gotChange) {
		t.Errorf("change request: %v, (-want +got)\n%s", err, cmp.Diff(&change, gotChange))
	}
}
