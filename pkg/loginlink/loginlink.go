// Package loginlink makes and redeems the one-time browser login links of the default local
// configuration, where no identity provider exists and a browser cannot mint kmsauth tokens.
//
// `gantry login` encrypts a ticket {email, random nonce, issue and expiry times} under the user auth
// key (USER_AUTH_KEY) with the key provider, exactly as `gantry token` encrypts a kmsauth user token:
// whoever can mint one could already act as that user with curl, so a link grants nothing new. The
// secrets service decrypts it (AES-GCM: a changed ticket does not open), checks the key, the expiry
// and the issue time, and records the nonce so the link opens one session only.
package loginlink

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/b64url"
	"github.com/gantry-dev/gantry/pkg/kms"
)

// MaxLifetime bounds a link's validity: it is meant to be clicked right after it was printed.
const MaxLifetime = 15 * time.Minute

// DefaultLifetime is the validity `gantry login` gives a link.
const DefaultLifetime = 5 * time.Minute

// maxTicketLen bounds what Redeem decodes (a ticket is a few hundred bytes).
const maxTicketLen = 2048

// ErrInvalid is every refusal; the reason is in the wrapped text, never the ticket itself.
var ErrInvalid = errors.New("loginlink: invalid login link")

type ticket struct {
	Email   string `json:"e"`
	Nonce   string `json:"n"`
	IssuedM int64  `json:"i"` // unix milliseconds
	Expires int64  `json:"x"` // unix milliseconds
}

// encryptionContext binds a ciphertext to this use, so no other ciphertext of the user auth key (a
// kmsauth token) can pass for a ticket, and to the server's kmsauth name.
func encryptionContext(to string) map[string]string {
	return map[string]string{"purpose": "gantry login link", "to": to}
}

// Mint returns a ticket for email, valid for lifetime from now, encrypted under keyID.
func Mint(ctx context.Context, p kms.Provider, keyID, to, email string, lifetime time.Duration, now time.Time) (string, error) {
	email = strings.ToLower(strings.TrimSpace(email))
	if email == "" {
		return "", errors.New("loginlink: the user's email is required")
	}
	if lifetime <= 0 || lifetime > MaxLifetime {
		return "", fmt.Errorf("loginlink: lifetime %s is not between 0 and %s", lifetime, MaxLifetime)
	}
	nonce, err := p.GenerateRandom(ctx, 16)
	if err != nil {
		return "", err
	}
	plain, _ := json.Marshal(ticket{Email: email, Nonce: base64.RawURLEncoding.EncodeToString(nonce),
		IssuedM: now.UnixMilli(), Expires: now.Add(lifetime).UnixMilli()})
	ct, err := p.Encrypt(ctx, keyID, plain, encryptionContext(to))
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(ct), nil
}

// Redeemer opens tickets and remembers the nonces it accepted until they expire.
type Redeemer struct {
	provider kms.Provider
	keyID    string // canonical id of the user auth key
	to       string
	// notBefore refuses tickets issued before this process started: the used nonces live in memory,
	// so a link redeemed before a restart must not open a second session after it.
	notBefore time.Time
	now       func() time.Time

	mu   sync.Mutex
	used map[string]int64 // nonce → expiry (unix ms)
}

// NewRedeemer returns a Redeemer that accepts tickets of userAuthKey issued from now on.
func NewRedeemer(ctx context.Context, p kms.Provider, userAuthKey, to string) (*Redeemer, error) {
	keyID, err := p.ResolveKeyID(ctx, userAuthKey)
	if err != nil {
		return nil, fmt.Errorf("loginlink: user auth key %q: %w", userAuthKey, err)
	}
	return &Redeemer{provider: p, keyID: keyID, to: to, notBefore: time.Now(), now: time.Now, used: map[string]int64{}}, nil
}

// Redeem returns the email of a valid, unused ticket and marks it used. Errors wrap ErrInvalid,
// except a key provider that cannot be asked (kms.ErrUnavailable and the like pass through).
func (r *Redeemer) Redeem(ctx context.Context, raw string) (string, error) {
	if len(raw) > maxTicketLen {
		return "", fmt.Errorf("%w: too long", ErrInvalid)
	}
	ct, err := b64url.Decode(raw)
	if err != nil || len(ct) == 0 {
		return "", fmt.Errorf("%w: not a login link code", ErrInvalid)
	}
	plain, keyID, err := r.provider.Decrypt(ctx, ct, encryptionContext(r.to))
	if errors.Is(err, kms.ErrUnavailable) {
		return "", err
	}
	if err != nil || keyID != r.keyID {
		return "", fmt.Errorf("%w: not made with this server's user auth key", ErrInvalid)
	}
	var t ticket
	if err := json.Unmarshal(plain, &t); err != nil || t.Email == "" || t.Nonce == "" {
		return "", fmt.Errorf("%w: malformed", ErrInvalid)
	}
	now := r.now().UnixMilli()
	switch {
	case now >= t.Expires:
		return "", fmt.Errorf("%w: expired", ErrInvalid)
	case t.Expires-t.IssuedM > MaxLifetime.Milliseconds():
		return "", fmt.Errorf("%w: valid for longer than %s", ErrInvalid, MaxLifetime)
	case t.IssuedM < r.notBefore.UnixMilli():
		return "", fmt.Errorf("%w: made before the server started", ErrInvalid)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for n, exp := range r.used {
		if now >= exp {
			delete(r.used, n)
		}
	}
	if _, ok := r.used[t.Nonce]; ok {
		return "", fmt.Errorf("%w: already used", ErrInvalid)
	}
	r.used[t.Nonce] = t.Expires
	return t.Email, nil
}
