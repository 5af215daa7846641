package confidant

import (
	"bytes"
	"encoding/base64"
	"testing"
)

// TestBinaryValue: a BinaryAttribute written by PynamoDB before 6 holds the base64 text of its
// bytes; one written by PynamoDB 6 (legacy_encoding=False) the bytes themselves, which a KMS
// ciphertext never spells as base64 text.
func TestBinaryValue(t *testing.T) {
	blob := []byte{0x01, 0x02, 0x02, 0x00, 0x78, 0xfe, 0x10, 0x3c} // how an AWS KMS ciphertext starts
	for name, c := range map[string]struct{ in, want []byte }{
		"PynamoDB 5":       {[]byte(base64.StdEncoding.EncodeToString(blob)), blob},
		"PynamoDB 6":       {blob, blob},
		"not padded":       {[]byte("QUJD"), []byte("ABC")},
		"empty":            {nil, nil},
		"text then binary": {[]byte("QUJD\x00"), []byte("QUJD\x00")},
	} {
		if got := binaryValue(c.in); !bytes.Equal(got, c.want) {
			t.Errorf("%s: binaryValue(%q) = %q, want %q", name, c.in, got, c.want)
		}
	}
}
