package jwtkeys

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strings"
	"time"
)

// maxTokenLen bounds the work an untrusted token can cause; gantry's tokens are well under 1 KiB.
const maxTokenLen = 16 << 10

// Verify checks token the way a careful client should and returns its claims. It accepts only RS256
// (never "none" or an HMAC algorithm, whose "secret" an attacker could take from a published public
// key), requires the header's kid to name one of keys, checks the signature with that key and
// requires nbf <= now < exp, both claims being present integers. There is no clock-skew leeway: a
// caller wanting some passes a shifted now.
//
// Numbers in the returned claims are json.Number so integer times come back exactly.
func Verify(token string, keys []JWK, now time.Time) (map[string]any, error) {
	if len(token) > maxTokenLen {
		return nil, fmt.Errorf("jwtkeys: token is longer than %d bytes", maxTokenLen)
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, errors.New("jwtkeys: token does not have three dot-separated parts")
	}
	headerJSON, err := b64.DecodeString(parts[0])
	if err != nil {
		return nil, fmt.Errorf("jwtkeys: token header: %w", err)
	}
	// A map rather than a struct: encoding/json matches struct fields case-insensitively, and a strict
	// verifier should not read "ALG" as "alg".
	var fields map[string]json.RawMessage
	if err := DecodeJSONObject(headerJSON, &fields); err != nil {
		return nil, fmt.Errorf("jwtkeys: token header: %w", err)
	}
	var header struct{ alg, kid string }
	if err := headerString(fields, "alg", &header.alg); err != nil {
		return nil, err
	}
	if header.alg != Algorithm {
		return nil, fmt.Errorf("jwtkeys: token algorithm %q is not %s", header.alg, Algorithm)
	}
	if _, ok := fields["typ"]; ok {
		var typ string
		if err := headerString(fields, "typ", &typ); err != nil {
			return nil, err
		}
		if !strings.EqualFold(typ, "JWT") {
			return nil, fmt.Errorf("jwtkeys: token type %q is not JWT", typ)
		}
	}
	if _, ok := fields["crit"]; ok {
		// RFC 7515 requires rejecting critical extensions the verifier does not understand: all of them.
		return nil, errors.New("jwtkeys: token header has critical extensions")
	}
	if err := headerString(fields, "kid", &header.kid); err != nil {
		return nil, err
	}
	if header.kid == "" {
		return nil, errors.New("jwtkeys: token header has no kid")
	}
	var jwk *JWK
	for i := range keys {
		if keys[i].Kid == header.kid {
			jwk = &keys[i]
			break
		}
	}
	if jwk == nil {
		return nil, fmt.Errorf("jwtkeys: token kid %q is not one of the given keys", header.kid)
	}
	pub, err := jwk.publicKey()
	if err != nil {
		return nil, err
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil {
		return nil, fmt.Errorf("jwtkeys: token signature: %w", err)
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], sig); err != nil {
		return nil, fmt.Errorf("jwtkeys: token signature does not verify with key %q", header.kid)
	}

	// Only now is the payload trusted enough to parse.
	payloadJSON, err := b64.DecodeString(parts[1])
	if err != nil {
		return nil, fmt.Errorf("jwtkeys: token payload: %w", err)
	}
	var claims map[string]any
	if err := DecodeJSONObject(payloadJSON, &claims); err != nil {
		return nil, fmt.Errorf("jwtkeys: token payload: %w", err)
	}
	nbf, err := timeClaim(claims, "nbf")
	if err != nil {
		return nil, err
	}
	exp, err := timeClaim(claims, "exp")
	if err != nil {
		return nil, err
	}
	// Unix truncates towards the past, so "now >= nbf" and "now < exp" hold exactly for whole seconds.
	t := now.Unix()
	if t < nbf {
		return nil, fmt.Errorf("jwtkeys: token is not valid before %s", time.Unix(nbf, 0).UTC().Format(time.RFC3339))
	}
	if t >= exp {
		return nil, fmt.Errorf("jwtkeys: token expired at %s", time.Unix(exp, 0).UTC().Format(time.RFC3339))
	}
	return claims, nil
}

// DecodeJSONObject decodes exactly one JSON object, keeping numbers exact, and rejects anything after
// it so the signed bytes and the meaning taken from them cannot differ (a JWT's header and claims,
// gantry's own or a workload issuer's).
func DecodeJSONObject(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 || bytes.TrimSpace(data)[0] != '{' {
		return errors.New("not a JSON object")
	}
	if err := NoDuplicateNames(data); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON object")
	}
	return nil
}

// NoDuplicateNames refuses JSON in which an object, at any depth, names a member twice. RFC 7515 and
// 7519 let a parser reject such a JWT or take the last member; parsers that take different ones (a
// proxy the first, gantry the last) read one signed token two ways, so gantry rejects it.
func NoDuplicateNames(data []byte) error {
	type frame struct {
		names     map[string]bool // nil for an array
		expectKey bool
	}
	var stack []*frame
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if name, ok := tok.(string); ok && top != nil && top.names != nil && top.expectKey {
			if top.names[name] {
				return fmt.Errorf("member %q named twice", name)
			}
			top.names[name], top.expectKey = true, false
			continue
		}
		// A value (of the enclosing object, whose next token is then a name again) or a delimiter.
		if top != nil && top.names != nil {
			top.expectKey = true
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{names: map[string]bool{}, expectKey: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
	}
}

// headerString reads a header field that must be a string; a missing field reads as "".
func headerString(fields map[string]json.RawMessage, name string, v *string) error {
	raw, ok := fields[name]
	if !ok {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil || bytes.Equal(raw, []byte("null")) {
		return fmt.Errorf("jwtkeys: token header %s is not a string", name)
	}
	return nil
}

func timeClaim(claims map[string]any, name string) (int64, error) {
	v, ok := claims[name]
	if !ok {
		return 0, fmt.Errorf("jwtkeys: token has no %s claim", name)
	}
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("jwtkeys: token claim %s is not a number", name)
	}
	i, err := n.Int64()
	if err != nil {
		return 0, fmt.Errorf("jwtkeys: token claim %s is not an integer number of seconds", name)
	}
	return i, nil
}

func (k *JWK) publicKey() (*rsa.PublicKey, error) {
	if k.Kty != "RSA" {
		return nil, fmt.Errorf("jwtkeys: key %q has type %q, not RSA", k.Kid, k.Kty)
	}
	// alg is optional in a JWK, but when present it must allow this use.
	if k.Alg != "" && k.Alg != Algorithm {
		return nil, fmt.Errorf("jwtkeys: key %q is for %q, not %s", k.Kid, k.Alg, Algorithm)
	}
	n, err := b64.DecodeString(k.N)
	if err != nil {
		return nil, fmt.Errorf("jwtkeys: key %q modulus: %w", k.Kid, err)
	}
	e, err := b64.DecodeString(k.E)
	if err != nil {
		return nil, fmt.Errorf("jwtkeys: key %q exponent: %w", k.Kid, err)
	}
	pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n)}
	if bits := pub.N.BitLen(); bits < minKeyBits {
		return nil, fmt.Errorf("jwtkeys: key %q is %d bits, at least %d are required", k.Kid, bits, minKeyBits)
	}
	exp := new(big.Int).SetBytes(e)
	// Small odd exponents only: what every RSA library produces, and what crypto/rsa accepts.
	if exp.BitLen() > 31 || exp.Int64() < 3 || exp.Bit(0) == 0 {
		return nil, fmt.Errorf("jwtkeys: key %q has an unsupported exponent", k.Kid)
	}
	pub.E = int(exp.Int64())
	return pub, nil
}
