package codec

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/services/secrets"
)

// TestStoredFormat pins the stored bytes: existing bbolt files and etcd prefixes hold them, so any
// change here needs a schema version change of both adapters.
func TestStoredFormat(t *testing.T) {
	at := time.Date(2024, 3, 4, 5, 6, 7, 123456789, time.FixedZone("UTC+1", 3600))
	doc, account := "the db", "prod"
	cred, err := EncodeCred(&secrets.CredentialRecord{
		ID: "c1", Revision: 2, Name: "DB", Enabled: true, Documentation: &doc,
		Metadata: map[string]string{"team": "infra"}, Tags: []string{"prod"}, Keys: []string{"password"},
		SealedPairs: []byte{1, 0, 0xff}, WrappedKey: []byte("wk"), ModifiedDate: at, ModifiedBy: "alice",
		LastRotationDate: &at,
	})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := EncodeService(&secrets.ServiceRecord{ID: "s1", Revision: 1, Enabled: true, Account: &account,
		Credentials: []string{"c1"}, ModifiedDate: at, ModifiedBy: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	grants, err := EncodeGrants(secrets.GrantsRecord{Encrypt: true, Created: at.UTC()})
	if err != nil {
		t.Fatal(err)
	}
	archived, err := EncodeArchived(at.UTC(), []byte(`{"id":"c1"}`))
	if err != nil {
		t.Fatal(err)
	}
	empty, err := EncodeCred(&secrets.CredentialRecord{ID: "c2", Revision: 1, Name: "x", Metadata: map[string]string{}, Tags: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, got, want string }{
		{"credential", string(cred), `{"id":"c1","revision":2,"name":"DB","enabled":true,"documentation":"the db","metadata":{"team":"infra"},"tags":["prod"],"keys":["password"],"sealed_pairs":"AQD/","wrapped_key":"d2s=","modified_date":"2024-03-04T05:06:07.123456789+01:00","modified_by":"alice","last_rotation_date":"2024-03-04T05:06:07.123456789+01:00"}`},
		{"empty collections", string(empty), `{"id":"c2","revision":1,"name":"x","enabled":false,"modified_date":"0001-01-01T00:00:00Z","modified_by":""}`},
		{"service", string(svc), `{"id":"s1","revision":1,"enabled":true,"account":"prod","credentials":["c1"],"modified_date":"2024-03-04T05:06:07.123456789+01:00","modified_by":"bob"}`},
		{"grants", string(grants), `{"encrypt":true,"decrypt":false,"created":"2024-03-04T04:06:07.123456789Z"}`},
		{"archived", string(archived), `{"archived_at":"2024-03-04T04:06:07.123456789Z","record":{"id":"c1"}}`},
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
	if TokenCredentials != 0xc1 || TokenAllServiceRevisions != 0xc6 {
		t.Errorf("token kinds %#x..%#x, want 0xc1..0xc6", TokenCredentials, TokenAllServiceRevisions)
	}
}

// TestDecodeRoundTrip: decoding gives back the record, and empty collections come back nil.
func TestDecodeRoundTrip(t *testing.T) {
	raw, err := EncodeCred(&secrets.CredentialRecord{ID: "c1", Revision: 1, Name: "n", Tags: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := DecodeCred([]byte("area"), raw)
	if err != nil || rec.ID != "c1" || rec.Tags != nil {
		t.Errorf("DecodeCred = %+v, %v", rec, err)
	}
	if _, err := DecodeService([]byte("svc_current"), []byte("{")); err == nil {
		t.Error("DecodeService of bad JSON: no error")
	}
	if err := CheckRevision(1, 1, 2); err != nil {
		t.Errorf("CheckRevision(1, 1, 2) = %v", err)
	}
	if err := CheckRevision(1, 0, 1); err != secrets.ErrRevisionConflict {
		t.Errorf("CheckRevision(1, 0, 1) = %v, want ErrRevisionConflict", err)
	}
}

// TestDecodeCredHead: the head of a stored record is its revision and name, and bad JSON is an
// error naming the area, as for the whole record.
func TestDecodeCredHead(t *testing.T) {
	raw, err := EncodeCred(&secrets.CredentialRecord{ID: "c1", Revision: 7, Name: "orders-db", SealedPairs: []byte("sealed"), Metadata: map[string]string{"a": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if head, err := DecodeCredHead([]byte("area"), raw); err != nil || head != (CredHead{Revision: 7, Name: "orders-db"}) {
		t.Errorf("DecodeCredHead = %+v, %v", head, err)
	}
	if _, err := DecodeCredHead([]byte("cred_current"), []byte(`{"revision":`)); err == nil || !strings.Contains(err.Error(), "cred_current") {
		t.Errorf("DecodeCredHead of bad JSON = %v, want an error naming the area", err)
	}
}
