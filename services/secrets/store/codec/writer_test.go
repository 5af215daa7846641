package codec

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/services/secrets/store"
)

// TestWriterFormats: Writer{FormatJSON} writes exactly the committed JSON of schema version 2 (what a
// version 2 build reads), Writer{} and Writer{FormatProto} exactly the current golden bytes.
func TestWriterFormats(t *testing.T) {
	cred, empty, svc, grants := goldenRecords()
	for _, tt := range []struct {
		name   string
		format Format
		ext    string
	}{{"json", FormatJSON, "json"}, {"proto", FormatProto, "bin"}, {"zero", 0, "bin"}} {
		t.Run(tt.name, func(t *testing.T) {
			w := Writer{Format: tt.format}
			want := func(name string) []byte {
				raw, err := os.ReadFile(filepath.Join("testdata", name+"."+tt.ext))
				if err != nil {
					t.Fatal(err)
				}
				return raw
			}
			// The archived golden record wraps the credential as encoded in the same format, and
			// as the other format too: the record inside is rewritten in w's format.
			protoCred, err := EncodeCred(cred)
			if err != nil {
				t.Fatal(err)
			}
			jsonCred := want("credential")
			if tt.ext == "bin" {
				jsonCred, _ = os.ReadFile(filepath.Join("testdata", "credential.json"))
			}
			for name, encode := range map[string]func() ([]byte, error){
				"credential":       func() ([]byte, error) { return w.EncodeCred(cred) },
				"credential-empty": func() ([]byte, error) { return w.EncodeCred(empty) },
				"service":          func() ([]byte, error) { return w.EncodeService(svc) },
				"grants":           func() ([]byte, error) { return w.EncodeGrants(grants) },
			} {
				got, err := encode()
				if err != nil || !bytes.Equal(got, want(name)) {
					t.Errorf("%s = %q, %v; want %q", name, got, err, want(name))
				}
			}
			for from, record := range map[string][]byte{"json": jsonCred, "proto": protoCred} {
				got, err := w.EncodeArchived(goldenAt.UTC(), record)
				if err != nil {
					t.Fatalf("archived from %s: %v", from, err)
				}
				if tt.ext == "bin" || from == "json" {
					// From JSON the record keeps its zone, as version 2 wrapped it unchanged.
					if !bytes.Equal(got, want("archived")) {
						t.Errorf("archived from %s = %q; want %q", from, got, want("archived"))
					}
				}
				if f, err := FormatOf(nil, got); err != nil || f != w.formatOrProto() {
					t.Errorf("archived from %s: format %q, %v; want %q", from, f, err, w.formatOrProto())
				}
				a, err := DecodeArchived(nil, got)
				if err != nil || !a.Record.ModifiedDate.Equal(cred.ModifiedDate) || a.Record.Name != cred.Name {
					t.Errorf("archived from %s decodes as %+v, %v", from, a, err)
				}
			}
		})
	}
}

func (w Writer) formatOrProto() Format {
	if w.Format == 0 {
		return FormatProto
	}
	return w.Format
}

// TestWriterRefuses: the JSON writer refuses strings that are not UTF-8 as the protobuf one does (a
// write is answered the same before and after a store's move to protobuf), and an unknown format
// writes nothing.
func TestWriterRefuses(t *testing.T) {
	bad := "a\xffb"
	w := Writer{Format: FormatJSON}
	if raw, err := w.EncodeCred(&store.CredentialRecord{ID: "c", Tags: []string{bad}}); err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
		t.Errorf("EncodeCred = %q, %v; want an error", raw, err)
	}
	if raw, err := w.EncodeService(&store.ServiceRecord{ID: "s", ModifiedBy: bad}); err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
		t.Errorf("EncodeService = %q, %v; want an error", raw, err)
	}
	other := Writer{Format: 'x'}
	if raw, err := other.EncodeCred(&store.CredentialRecord{ID: "c"}); err == nil {
		t.Errorf("EncodeCred in format 'x' = %q, want an error", raw)
	}
	if raw, err := other.EncodeGrants(store.GrantsRecord{}); err == nil {
		t.Errorf("EncodeGrants in format 'x' = %q, want an error", raw)
	}
}
