package b64url

import (
	"encoding/base64"
	"testing"
)

func TestDecodeAcceptsOnlyTheCanonicalSpelling(t *testing.T) {
	value := []byte("gantry signs this \xff\x00")
	good := base64.RawURLEncoding.EncodeToString(value)
	if got, err := Decode(good); err != nil || string(got) != string(value) {
		t.Fatalf("Decode(%q) = %q, %v", good, got, err)
	}
	// Each of these decodes with encoding/base64 to the same bytes (or a prefix), and must not here.
	for _, bad := range []string{good[:4] + "\n" + good[4:], good + "\r", good[:len(good)-1] + "x", good + "=", "a"} {
		if got, err := Decode(bad); err == nil {
			t.Errorf("Decode(%q) = %q, want an error", bad, got)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add("AAAA")
	f.Add("AA\nAA")
	f.Fuzz(func(t *testing.T, s string) {
		b, err := Decode(s)
		if err == nil && base64.RawURLEncoding.EncodeToString(b) != s {
			t.Fatalf("Decode(%q) accepted a non-canonical spelling", s)
		}
	})
}
