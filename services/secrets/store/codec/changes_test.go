package codec

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	storev1 "github.com/gantry-dev/gantry/proto/secretsstore/v1"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// goldenChange is a change request with every field set, its times in a zone (goldenAt), so that a
// lossy encoding shows.
func goldenChange() *store.ChangeRequestRecord {
	decided := goldenAt.Add(2 * time.Hour)
	return &store.ChangeRequestRecord{
		ID: "01J9Z3K4M5N6P7Q8R9S0T1V2W3", Version: 3, Action: "update",
		ResourceType: "credential", ResourceID: "c1", ResourceName: "DB", BaseRevision: 2,
		Status: store.ChangeApplied, RequestedBy: "user:alice@example.com", Reason: "rotate the password",
		Created: goldenAt, Expires: goldenAt.Add(24 * time.Hour), Required: 2,
		Approvals: []store.ChangeApproval{
			{By: "user:bob@example.com", At: goldenAt.Add(time.Hour), Via: "api"},
			{By: "user:carol@example.com", At: decided, Via: "slack:T1/U2"},
		},
		DecidedBy: "user:carol@example.com", DecidedAt: &decided, DecisionReason: "looks right",
		AppliedRevision: 3, Change: []byte(`{"keys":["password"]}`), Summary: []byte("password changed"),
		SealedPairs: []byte{1, 0, 0xff}, WrappedKey: []byte("wk"),
		Team: "T1", Bot: "B1", Channel: "C1", NoticeChannel: "C1", NoticeTS: "1712345678.000100", NoticedStatus: store.ChangePending,
	}
}

// snake is the protobuf field name of a Go field name, as records.proto names them: ResourceID is
// resource_id, NoticeTS notice_ts.
func snake(name string) string {
	r := []rune(name)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) {
			if i > 0 && (unicode.IsLower(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1])) {
				b.WriteByte('_')
			}
			c = unicode.ToLower(c)
		}
		b.WriteRune(c)
	}
	return b.String()
}

// protoType describes a message field as its Go record field should map to it.
func protoType(fd protoreflect.FieldDescriptor) string {
	kind := fd.Kind().String()
	if fd.Kind() == protoreflect.MessageKind {
		kind = string(fd.Message().FullName())
	}
	if fd.IsList() {
		return "repeated " + kind
	}
	return kind
}

// TestChangeMessagesMatchRecords is TestMessagesMatchRecords for the change requests, which have no
// JSON type to name their fields: every field of store.ChangeRequestRecord and store.ChangeApproval
// has the field of its snake-case name in the message, of the matching type, and the message has
// no other. A field added to the record but not to the message fails here instead of being
// silently dropped.
func TestChangeMessagesMatchRecords(t *testing.T) {
	if got := snake("ResourceID") + " " + snake("NoticeTS") + " " + snake("ID"); got != "resource_id notice_ts id" {
		t.Fatalf("snake = %q", got)
	}
	for _, tt := range []struct {
		record  any
		message proto.Message
	}{
		{store.ChangeRequestRecord{}, &storev1.ChangeRequestRecord{}},
		{store.ChangeApproval{}, &storev1.ChangeApproval{}},
	} {
		rt := reflect.TypeOf(tt.record)
		desc := tt.message.ProtoReflect().Descriptor()
		if rt.NumField() != desc.Fields().Len() {
			t.Errorf("%s has %d fields, %s has %d", rt, rt.NumField(), desc.FullName(), desc.Fields().Len())
		}
		for i := range rt.NumField() {
			f := rt.Field(i)
			fd := desc.Fields().ByName(protoreflect.Name(snake(f.Name)))
			if fd == nil {
				t.Errorf("%s.%s (%q) has no field in %s", rt, f.Name, snake(f.Name), desc.FullName())
				continue
			}
			var want string
			switch f.Type {
			case reflect.TypeFor[string]():
				want = "string"
			case reflect.TypeFor[int32]():
				want = "int32"
			case reflect.TypeFor[[]byte]():
				want = "bytes"
			case reflect.TypeFor[time.Time](), reflect.TypeFor[*time.Time]():
				want = "google.protobuf.Timestamp" // a message: nil and set stay apart
			case reflect.TypeFor[[]store.ChangeApproval]():
				want = "repeated secretsstore.v1.ChangeApproval"
			default:
				t.Fatalf("%s.%s has type %s: say here which protobuf type it is stored as", rt, f.Name, f.Type)
			}
			if got := protoType(fd); got != want {
				t.Errorf("%s.%s is %s in %s, want %s", rt, f.Name, got, desc.FullName(), want)
			}
		}
	}
}

// TestChangeRequestGolden: the committed bytes of a change request (TestStoredFormat pins them)
// decode into the record they were made from, times in UTC.
func TestChangeRequestGolden(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "change-request.bin"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeChangeRequest([]byte("area"), raw)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(goldenChange(), got); d != "" {
		t.Errorf("(-want +got)\n%s", d)
	}
	for name, at := range map[string]time.Time{"created": got.Created, "expires": got.Expires, "decided_at": *got.DecidedAt, "approval": got.Approvals[0].At} {
		if at.Location() != time.UTC {
			t.Errorf("%s in %s, want UTC", name, at.Location())
		}
	}
}

// TestChangeRequestNilAndEmpty: what comes back nil and what stays set, as for the other records:
// empty collections come back nil, a set DecidedAt stays set even to the zero time, absent times
// are zero.
func TestChangeRequestNilAndEmpty(t *testing.T) {
	zero := time.Time{}
	before1970 := time.Date(1969, 12, 31, 23, 59, 59, 1, time.UTC)
	for _, tt := range []struct {
		name     string
		in, want *store.ChangeRequestRecord
	}{
		{"nil everything", &store.ChangeRequestRecord{ID: "r"}, &store.ChangeRequestRecord{ID: "r"}},
		{"empty collections", &store.ChangeRequestRecord{ID: "r", Approvals: []store.ChangeApproval{}, Change: []byte{}, Summary: []byte{},
			SealedPairs: []byte{}, WrappedKey: []byte{}}, &store.ChangeRequestRecord{ID: "r"}},
		{"decided at the zero time", &store.ChangeRequestRecord{ID: "r", DecidedAt: &zero}, &store.ChangeRequestRecord{ID: "r", DecidedAt: &zero}},
		{"an empty approval", &store.ChangeRequestRecord{ID: "r", Approvals: []store.ChangeApproval{{}}},
			&store.ChangeRequestRecord{ID: "r", Approvals: []store.ChangeApproval{{}}}},
		{"before 1970", &store.ChangeRequestRecord{ID: "r", Created: before1970, DecidedAt: &before1970},
			&store.ChangeRequestRecord{ID: "r", Created: before1970, DecidedAt: &before1970}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := EncodeChangeRequest(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeChangeRequest([]byte("area"), raw)
			if err != nil {
				t.Fatal(err)
			}
			// cmp, unlike the conformance suite, tells nil from empty.
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("(-want +got)\n%s", d)
			}
		})
	}
}

// TestChangeRequestOwnsItsMemory: a decoded change request shares no byte with what it was decoded
// from (a bbolt value is only valid inside its transaction).
func TestChangeRequestOwnsItsMemory(t *testing.T) {
	raw, err := EncodeChangeRequest(goldenChange())
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeChangeRequest([]byte("area"), raw)
	if err != nil {
		t.Fatal(err)
	}
	for i := range raw {
		raw[i] = 0xee
	}
	if d := cmp.Diff(goldenChange(), got); d != "" {
		t.Errorf("after overwriting the stored bytes: (-want +got)\n%s", d)
	}
}

// TestChangeRequestDecodeErrors: bytes of no known format, a JSON value (no gantry writes one) and
// damaged ones are errors naming the area, never a record.
func TestChangeRequestDecodeErrors(t *testing.T) {
	good, err := EncodeChangeRequest(goldenChange())
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
		{"JSON", []byte(`{"id":"r","version":1}`), "JSON"},
		{"cut protobuf", good[:len(good)-2], "change_requests"},
		{"bad tag", []byte{byte(FormatProto), 0xff}, "change_requests"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if rec, err := DecodeChangeRequest([]byte("change_requests"), tt.raw); err == nil || !strings.Contains(err.Error(), "change_requests") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("DecodeChangeRequest = %+v, %v; want an error naming the area and %q", rec, err, tt.want)
			}
		})
	}
}

// TestChangeRequestRefusesNonUTF8: a string that is not UTF-8 fails the encoding (nothing is
// written); opaque bytes are bytes.
func TestChangeRequestRefusesNonUTF8(t *testing.T) {
	bad := "a\xffb"
	for name, rec := range map[string]*store.ChangeRequestRecord{
		"reason":          {ID: "r", Reason: bad},
		"notice_ts":       {ID: "r", NoticeTS: bad},
		"approval by":     {ID: "r", Approvals: []store.ChangeApproval{{By: "ok"}, {By: bad}}},
		"approval via":    {ID: "r", Approvals: []store.ChangeApproval{{Via: bad}}},
		"decision_reason": {ID: "r", DecisionReason: bad},
	} {
		if raw, err := EncodeChangeRequest(rec); err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
			t.Errorf("%s: EncodeChangeRequest = %x, %v; want an error", name, raw, err)
		}
	}
	if _, err := EncodeChangeRequest(&store.ChangeRequestRecord{ID: "r", Change: []byte(bad), SealedPairs: []byte(bad)}); err != nil {
		t.Errorf("EncodeChangeRequest of binary change and sealed pairs: %v", err)
	}
	if raw, err := EncodeChangeRequest(nil); err == nil {
		t.Errorf("EncodeChangeRequest(nil) = %x, want an error", raw)
	}
}

// TestWriterChangeRequestsAlwaysProto: every Writer, the JSON one of schema version 2 included,
// writes a change request in the current format, byte for byte what EncodeChangeRequest writes; an
// unknown format writes nothing.
func TestWriterChangeRequestsAlwaysProto(t *testing.T) {
	want, err := EncodeChangeRequest(goldenChange())
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []Format{0, FormatProto, FormatJSON} {
		got, err := Writer{Format: format}.EncodeChangeRequest(goldenChange())
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("Writer{%q}.EncodeChangeRequest = %x, %v; want %x", format, got, err, want)
		}
	}
	if raw, err := (Writer{Format: 'x'}).EncodeChangeRequest(goldenChange()); err == nil {
		t.Errorf("EncodeChangeRequest in format 'x' = %x, want an error", raw)
	}
}
