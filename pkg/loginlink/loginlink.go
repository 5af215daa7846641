// Package loginlink makes and redeems the one-time browser login links of the default local
// configuration, where no identity provider exists and a browser cannot mint kmsauth tokens.
//
// `gantry login` encrypts a ticket {email, random nonce, issue and expiry times} under the user auth
// key (USER_AUTH_KEY) with the key provider, exactly as `gantry token` encrypts a kmsauth user token:
// whoever can mint one could already act as that user with curl, so a link grants nothing new. The
// secrets service decrypts it (AES-GCM: a changed ticket does not open), checks the key and the
// expiry, and claims the nonce in the shared secrets store (UsedNonces), so the link opens one session
// only: across every replica sharing the store and across restarts.
package loginlink

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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

// UsedNonces records the nonces of redeemed tickets where every replica sees them: the secrets
// store (the Store of package services/secrets/store implements it).
type UsedNonces interface {
	// ClaimLoginNonce records nonce as used until expires and reports whether this call recorded it
	// first; of concurrent claims exactly one wins.
	ClaimLoginNonce(ctx context.Context, nonce string, expires time.Time) (bool, error)
}

// ClockSkewMargin is how long a used nonce is kept past its ticket's expiry: a replica whose clock
// lags the one that redeemed the ticket still thinks it valid for that long, and must still find the
// nonce.
const ClockSkewMargin = time.Minute

// Redeemer opens tickets and claims their nonces in a UsedNonces.
type Redeemer struct {
	provider kms.Provider
	keyID    string // canonical id of the user auth key
	to       string
	used     UsedNonces
	now      func() time.Time
}

// NewRedeemer returns a Redeemer of tickets of userAuthKey that records used nonces in used.
//
// It accepts tickets issued before it started, unlike the first version that kept used nonces in
// memory: a record in the store outlives the process, so a restart cannot reopen a used link, and a
// replica started after `gantry login` printed a link must accept it like the others.
func NewRedeemer(ctx context.Context, p kms.Provider, userAuthKey, to string, used UsedNonces) (*Redeemer, error) {
	keyID, err := p.ResolveKeyID(ctx, userAuthKey)
	if err != nil {
		return nil, fmt.Errorf("loginlink: user auth key %q: %w", userAuthKey, err)
	}
	if used == nil {
		return nil, errors.New("loginlink: a store of used nonces is required")
	}
	return &Redeemer{provider: p, keyID: keyID, to: to, used: used, now: time.Now}, nil
}

// Redeem returns the email of a valid, unused ticket and marks it used. Errors wrap ErrInvalid,
// except a key provider or store that cannot be asked (kms.ErrUnavailable, the store's errors such as
// the secrets store's ErrStorage pass through, wrapped).
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
	}
	claimed, err := r.used.ClaimLoginNonce(ctx, t.Nonce, time.UnixMilli(t.Expires).Add(ClockSkewMargin))
	if err != nil {
		return "", fmt.Errorf("loginlink: recording the link as used: %w", err)
	}
	if !claimed {
		return "", fmt.Errorf("%w: already used", ErrInvalid)
	}
	return t.Email, nil
}
