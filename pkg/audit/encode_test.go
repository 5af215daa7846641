package audit

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func randomAuditText(r *rand.Rand) string {
	pieces := []string{"a", "Z", "9", " ", "\"", "\\", "\n", "\t", "\r", "\b", "\f", "\x00", "\x1f", "\x7f", "<", ">", "&", "é", "日本", "😀", "\u2028", "\u2029", "\xff", "\xe2\x80", "/"}
	var sb strings.Builder
	for range r.IntN(10) {
		sb.WriteString(pieces[r.IntN(len(pieces))])
	}
	return sb.String()
}

// TestAppendRecordMatchesEncodingJSON: the hand-written encoder writes exactly json.Marshal's bytes,
// on random records (every escaping rule, invalid UTF-8, empty and set omitempty fields, times in
// other zones and with or without nanoseconds).
func TestAppendRecordMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 5000 {
		rec := Record{
			Log: randomAuditText(r), Time: time.Unix(r.Int64N(4e9), r.Int64N(2)*r.Int64N(1e9)).In(time.FixedZone("z", (r.IntN(48)-24)*1800)),
			Service: randomAuditText(r), Outcome: Outcome(randomAuditText(r)), Action: randomAuditText(r), Method: randomAuditText(r),
			Resource: randomAuditText(r), ResourceID: randomAuditText(r), Principal: randomAuditText(r), PrincipalType: randomAuditText(r),
			AuthType: randomAuditText(r), RequestID: randomAuditText(r), ClientAddr: randomAuditText(r),
		}
		if r.IntN(2) == 0 {
			rec.Revision = r.Int32() - r.Int32()
		}
		if r.IntN(2) == 0 {
			rec.Code = randomAuditText(r)
		}
		if r.IntN(2) == 0 {
			rec.Reason = randomAuditText(r)
		}
		if r.IntN(2) == 0 {
			rec.ChangeRequest, rec.Requester = randomAuditText(r), randomAuditText(r)
		}
		for range r.IntN(3) {
			rec.Approvers = append(rec.Approvers, randomAuditText(r))
		}
		if r.IntN(2) == 0 {
			rec.Suppressed = r.Int64() - r.Int64()
		}
		want, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendRecord(nil, &rec); !bytes.Equal(got, want) {
			t.Fatalf("record %d:\nhand-written %s\njson.Marshal %s", i, got, want)
		}
	}
}

func BenchmarkAppendRecord(b *testing.B) {
	rec := Record{Log: Tag, Time: time.Now().UTC(), Service: "secrets", Outcome: Allowed, Action: "get", Method: "/secrets.v1.SecretsService/GetCredential",
		Resource: "credential", ResourceID: "0123456789abcdef0123456789abcdef", Revision: 3, Principal: "alice@example.com", PrincipalType: "user",
		AuthType: "kms", RequestID: "4f3c2a1b-9d8e-4c7b-a6f5-e4d3c2b1a098", ClientAddr: "127.0.0.1"}
	b.Run("hand-written", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = appendRecord(buf[:0], &rec)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(rec); err != nil {
				b.Fatal(err)
			}
		}
	})
}
