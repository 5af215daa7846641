// Package b64url decodes unpadded base64url (RFC 4648 §5) strictly: only the one canonical spelling
// of each byte string is accepted. encoding/base64 skips '\r' and '\n' and ignores unused trailing
// bits, so several strings decode to the same bytes; for signatures, cookies and tokens that makes a
// value the server never issued decode as one it did.
package b64url

import (
	"encoding/base64"
	"errors"
)

// ErrNotCanonical is returned for a string that decodes but is not how the bytes are encoded.
var ErrNotCanonical = errors.New("b64url: not the canonical encoding")

// Decode decodes s, which must be exactly base64.RawURLEncoding's encoding of the result.
func Decode(s string) ([]byte, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, err
	}
	if base64.RawURLEncoding.EncodeToString(b) != s {
		return nil, ErrNotCanonical
	}
	return b, nil
}
