package userauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/b64url"
)

// minCookieSecretLen is the shortest HMAC key accepted for flow cookies: anything shorter than the
// SHA-256 output would be the weakest link of the signature.
const minCookieSecretLen = 32

// maxCookieLen bounds what is decoded from a request cookie; browsers cap cookies near 4 KiB, so
// anything longer is not one of ours and is rejected before any work is done on it.
const maxCookieLen = 4096

var (
	errCookieMissing = errors.New("flow cookie missing")
	errCookieInvalid = errors.New("flow cookie invalid")
	errCookieExpired = errors.New("flow cookie expired")
)

// cookieSigner seals small JSON payloads into tamper-evident cookie values. The payloads are not
// secret (request IDs, OAuth state, nonce, PKCE verifier are all visible to the browser anyway);
// what matters is that the browser cannot mint or alter them, and that they expire.
type cookieSigner struct {
	key []byte
}

func newCookieSigner(secret []byte) (cookieSigner, error) {
	if len(secret) < minCookieSecretLen {
		return cookieSigner{}, fmt.Errorf("cookie secret must be at least %d bytes, got %d", minCookieSecretLen, len(secret))
	}
	// Derive a dedicated key so the same secret can also serve the caller's session cookies
	// without a value signed by one being accepted by the other.
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("gantry userauth flow cookie v1"))
	return cookieSigner{key: m.Sum(nil)}, nil
}

// sealedPayload wraps the caller's value with its expiry, so expiry is covered by the signature
// rather than trusted from the cookie's own Max-Age, which the browser controls.
type sealedPayload struct {
	Exp int64           `json:"exp"`
	V   json.RawMessage `json:"v"`
}

func (c cookieSigner) mac(name, payload string) []byte {
	m := hmac.New(sha256.New, c.key)
	// The cookie name is part of the MAC so a value issued for one cookie cannot be replayed in
	// another (e.g. a SAML tracker presented as OIDC state).
	m.Write([]byte(name))
	m.Write([]byte{0})
	m.Write([]byte(payload))
	return m.Sum(nil)
}

func (c cookieSigner) seal(name string, v any, exp time.Time) (string, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	body, err := json.Marshal(sealedPayload{Exp: exp.Unix(), V: raw})
	if err != nil {
		return "", err
	}
	payload := base64.RawURLEncoding.EncodeToString(body)
	return payload + "." + base64.RawURLEncoding.EncodeToString(c.mac(name, payload)), nil
}

// open verifies and decodes a value produced by seal for the same cookie name.
func (c cookieSigner) open(name, value string, now time.Time, v any) error {
	if value == "" {
		return errCookieMissing
	}
	if len(value) > maxCookieLen {
		return errCookieInvalid
	}
	payload, sig, ok := strings.Cut(value, ".")
	if !ok {
		return errCookieInvalid
	}
	gotMAC, err := b64url.Decode(sig)
	if err != nil || !hmac.Equal(gotMAC, c.mac(name, payload)) {
		return errCookieInvalid
	}
	body, err := b64url.Decode(payload)
	if err != nil {
		return errCookieInvalid
	}
	var sp sealedPayload
	if err := json.Unmarshal(body, &sp); err != nil {
		return errCookieInvalid
	}
	if !now.Before(time.Unix(sp.Exp, 0)) {
		return errCookieExpired
	}
	if err := json.Unmarshal(sp.V, v); err != nil {
		return errCookieInvalid
	}
	return nil
}

// flowCookie builds one of this package's cookies. secure selects SameSite=None, which the SAML
// tracker needs because the IdP delivers the assertion with a cross-site POST that Lax cookies do
// not accompany; browsers only accept None together with Secure.
func flowCookie(name, value, path string, maxAge time.Duration, secure bool, sameSite http.SameSite) *http.Cookie {
	return &http.Cookie{
		Name:     name,
		Value:    value,
		Path:     path,
		MaxAge:   int(maxAge / time.Second),
		HttpOnly: true,
		Secure:   secure,
		SameSite: sameSite,
	}
}

// expiredCookie tells the browser to drop a flow cookie once its flow is over.
func expiredCookie(name, path string, secure bool, sameSite http.SameSite) *http.Cookie {
	return &http.Cookie{
		Name:     name,
		Value:    "",
		Path:     path,
		MaxAge:   -1,
		HttpOnly: true,
		Secure:   secure,
		SameSite: sameSite,
	}
}
