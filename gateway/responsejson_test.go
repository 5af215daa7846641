package gateway

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// randomText draws strings that exercise every escaping rule: quotes, backslashes, control
// characters, DEL, HTML characters, multi-byte runes, and now and then an invalid UTF-8 byte.
func randomText(r *rand.Rand, invalid bool) string {
	pieces := []string{"a", "Z", "0", " ", "\"", "\\", "\n", "\t", "\r", "\b", "\f", "\x00", "\x01", "\x1f", "\x7f", "<", ">", "&", "é", "日本", "😀", "\u2028", "/"}
	var sb strings.Builder
	for range r.IntN(12) {
		sb.WriteString(pieces[r.IntN(len(pieces))])
	}
	if invalid && r.IntN(8) == 0 {
		sb.WriteString("\xff")
	}
	return sb.String()
}

func randomStrings(r *rand.Rand, invalid bool) []string {
	if r.IntN(3) == 0 {
		return nil
	}
	out := make([]string, r.IntN(4))
	for i := range out {
		out[i] = randomText(r, invalid)
	}
	return out
}

func randomMap(r *rand.Rand, invalid bool) map[string]string {
	if r.IntN(3) == 0 {
		return nil
	}
	m := map[string]string{}
	for range r.IntN(5) {
		m[randomText(r, invalid)] = randomText(r, invalid)
	}
	return m
}

func randomWrapped(r *rand.Rand, invalid bool) *wrapperspb.StringValue {
	if r.IntN(2) == 0 {
		return nil
	}
	return wrapperspb.String(randomText(r, invalid))
}

func randomCredential(r *rand.Rand, invalid bool) *secretsv1.Credential {
	c := &secretsv1.Credential{
		Id: randomText(r, invalid), Name: randomText(r, invalid), CredentialKeys: randomStrings(r, invalid),
		CredentialPairs: randomMap(r, invalid), Metadata: randomMap(r, invalid), Revision: r.Int32() - r.Int32(),
		Enabled: r.IntN(2) == 0, Documentation: randomWrapped(r, invalid), ModifiedDate: randomText(r, invalid),
		ModifiedBy: randomText(r, invalid), Tags: randomStrings(r, invalid), LastDecryptedDate: randomWrapped(r, invalid),
		LastRotationDate: randomWrapped(r, invalid), NextRotationDate: randomWrapped(r, invalid),
	}
	if r.IntN(2) == 0 {
		c.Permissions = map[string]bool{"metadata": r.IntN(2) == 0, "get": true, "update": false}
	}
	if r.IntN(2) == 0 {
		// The typed values, as the secrets service sends them beside their text.
		c.CredentialPairsJson = map[string]string{}
		for k, v := range c.CredentialPairs {
			text, _ := appendJSONString(nil, v)
			c.CredentialPairsJson[k] = []string{string(text), "5432", "-1.5e+20", "true", "null"}[r.IntN(5)]
		}
	}
	return c
}

// restMarshal is protojson's JSON as REST shows it: credential_pairs typed (restPairs).
func restMarshal(o protojson.MarshalOptions, m proto.Message) ([]byte, error) {
	out, err := o.Marshal(m)
	if err != nil {
		return nil, err
	}
	return restPairs(m, out)
}

// TestResponseJSONMatchesProtojson: the hand-written encoders write what protojson writes with the
// gateway's options (credential_pairs typed by restPairs), value for value, on random credentials and services; where protojson refuses a
// message (a string that is not UTF-8) so does the marshaler, with protojson's own error.
func TestResponseJSONMatchesProtojson(t *testing.T) {
	m := requestMarshaler{&runtime.JSONPb{MarshalOptions: protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}}}
	slow := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}
	r := rand.New(rand.NewPCG(1, 2))
	fast := 0
	for i := range 3000 {
		invalid := i%3 == 0
		var got, want []byte
		var gotErr, wantErr error
		var isFast bool
		if i%2 == 0 {
			c := randomCredential(r, invalid)
			_, isFast = fastResponseJSON(c)
			got, gotErr = m.Marshal(c)
			want, wantErr = restMarshal(slow, c)
		} else {
			s := &secretsv1.Service{Id: randomText(r, invalid), Revision: r.Int32(), Enabled: r.IntN(2) == 0,
				ModifiedDate: randomText(r, invalid), ModifiedBy: randomText(r, invalid), Account: randomWrapped(r, invalid)}
			for range r.IntN(4) {
				s.Credentials = append(s.Credentials, randomCredential(r, invalid))
			}
			if r.IntN(10) == 0 {
				s.BlindCredentials = []*secretsv1.BlindCredential{{Id: "b"}}
			}
			if r.IntN(2) == 0 {
				s.Permissions = map[string]bool{"get": true}
			}
			_, isFast = fastResponseJSON(s)
			got, gotErr = m.Marshal(s)
			want, wantErr = restMarshal(slow, s)
		}
		if isFast {
			fast++
		}
		if (gotErr != nil) != (wantErr != nil) {
			t.Fatalf("message %d: error %v, protojson %v", i, gotErr, wantErr)
		}
		if wantErr != nil {
			continue
		}
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("message %d: not JSON: %v\n%s", i, err, got)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("message %d differs:\nhand-written %s\nprotojson    %s", i, got, want)
		}
	}
	if fast < 1500 {
		t.Fatalf("only %d of 3000 messages took the hand-written path", fast)
	}
}

func BenchmarkResponseJSON(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	s := &secretsv1.Service{Id: "svc", Revision: 3, Enabled: true, ModifiedDate: "2026-11-26T00:00:00+00:00", ModifiedBy: "alice"}
	for range 10 {
		c := randomCredential(r, false)
		s.Credentials = append(s.Credentials, c)
	}
	m := requestMarshaler{&runtime.JSONPb{MarshalOptions: protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}}}
	b.Run("hand-written", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := m.Marshal(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protojson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := m.JSONPb.Marshal(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestCredentialPairsTyped: REST shows credential_pairs with their JSON types and never
// credential_pairs_json, through the hand-written encoders and through protojson's rewritten JSON.
func TestCredentialPairsTyped(t *testing.T) {
	m := requestMarshaler{&runtime.JSONPb{MarshalOptions: protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}}}
	cred := func() *secretsv1.Credential {
		return &secretsv1.Credential{Id: "c1",
			CredentialPairs:     map[string]string{"password": "s3cr3t", "port": "5432", "debug": "true", "maybe": "", "big": "12345678901234567890"},
			CredentialPairsJson: map[string]string{"password": `"s3cr3t"`, "port": "5432", "debug": "true", "maybe": "null", "big": "12345678901234567890"}}
	}
	const want = `"credential_pairs":{"big":12345678901234567890,"debug":true,"maybe":null,"password":"s3cr3t","port":5432}`
	for name, msg := range map[string]proto.Message{
		"credential":      cred(),
		"service":         &secretsv1.Service{Id: "s", Credentials: []*secretsv1.Credential{cred()}},
		"service (blind)": &secretsv1.Service{Id: "s", Credentials: []*secretsv1.Credential{cred()}, BlindCredentials: []*secretsv1.BlindCredential{{Id: "b"}}},
		"list":            &secretsv1.ListCredentialsResponse{Credentials: []*secretsv1.Credential{cred(), {Id: "c2"}}},
	} {
		out, err := m.Marshal(msg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		s := strings.ReplaceAll(string(out), " ", "")
		if !strings.Contains(s, want) || strings.Contains(s, "credential_pairs_json") {
			t.Errorf("%s: %s", name, out)
		}
	}
	bad := cred()
	bad.CredentialPairsJson["port"] = `{"a":1}`
	if out, err := m.Marshal(&secretsv1.Service{Id: "s", Credentials: []*secretsv1.Credential{bad}}); err == nil {
		t.Errorf("an object as a value was written: %s", out)
	}
}
