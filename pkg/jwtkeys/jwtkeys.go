// Package jwtkeys holds the RSA keys gantry signs Confidant-compatible JSON Web Tokens with, one key
// set per environment (production, staging, ...), signs those tokens and publishes the public halves
// as JWKs so clients can verify them without trusting gantry's TLS alone.
//
// Keys come either from a folder gantry manages itself (Open, Rotate) or from Confidant's
// JWT_CERTIFICATE_AUTHORITIES and JWT_ACTIVE_SIGNING_KEYS settings (FromConfidantSettings), so an
// installation migrating from Confidant keeps issuing tokens its clients already accept.
package jwtkeys

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"regexp"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
)

const (
	// DefaultLifetime is what Confidant gives a token when the caller does not ask for a lifetime.
	DefaultLifetime = 3600 * time.Second
	// MaxLifetime bounds how long a leaked token stays useful; Sign refuses longer lifetimes rather
	// than silently shortening them so a misconfiguration is noticed.
	MaxLifetime = 24 * time.Hour

	// Algorithm is the only JWS algorithm gantry issues or accepts.
	Algorithm = "RS256"

	// minKeyBits keeps keys weaker than what gantry generates out of both signing and verifying.
	minKeyBits = 2048
	// keyBits is the size of generated keys: the size Confidant's documentation uses.
	keyBits = 2048
)

var (
	// ErrUnknownEnvironment is returned for an environment the store has no keys for.
	ErrUnknownEnvironment = errors.New("jwtkeys: unknown environment")
	// ErrNoActiveKey is returned by Sign when an environment is known but none of its keys is the
	// active one, e.g. JWT_ACTIVE_SIGNING_KEYS names a kid whose entry failed to parse.
	ErrNoActiveKey = errors.New("jwtkeys: environment has no active signing key")
	// ErrReadOnly is returned by Rotate for an environment whose keys came from Confidant settings:
	// those are changed by editing the settings, not by gantry.
	ErrReadOnly = errors.New("jwtkeys: environment keys come from settings and cannot be rotated")
)

// environmentName is strict because environment names become file names in a folder store.
var environmentName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Key is one signing key of an environment.
type Key struct {
	ID      string
	Private *rsa.PrivateKey
}

// JWK is the public half of a Key in the JSON Web Key form Confidant's public keys endpoint returns.
type JWK struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	N   string `json:"n"`
	E   string `json:"e"`
	Alg string `json:"alg"`
}

// Claims is what a caller controls in a token; the time claims are derived from Sign's arguments.
type Claims struct {
	IsService bool
	Requester string
	User      string
}

// storedKey keeps the JWK next to the key so publishing does not re-encode it on every request.
type storedKey struct {
	Key
	jwk     JWK
	created time.Time
}

// environment is never modified once it is in a Store's map: Rotate and Merge swap in a new value.
// That lets Sign and PublicKeys use it after releasing the store's lock.
type environment struct {
	active string // kid of the signing key; "" when there is none
	keys   []storedKey
	// path is the key file of a folder-backed environment and "" for one from Confidant settings,
	// which is what makes the latter read-only.
	path string
}

func (e *environment) activeKey() *storedKey {
	if e.active == "" {
		return nil
	}
	for i := range e.keys {
		if e.keys[i].ID == e.active {
			return &e.keys[i]
		}
	}
	return nil
}

// Store holds the keys of a set of environments. It is safe for concurrent use. Make one with Open or
// FromConfidantSettings; the zero value is not usable.
type Store struct {
	mu     sync.RWMutex
	envs   map[string]*environment
	logger *zap.Logger
}

func newStore(logger *zap.Logger) *Store {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Store{envs: map[string]*environment{}, logger: logger}
}

func (s *Store) environment(env string) (*environment, error) {
	s.mu.RLock()
	e, ok := s.envs[env]
	s.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownEnvironment, env)
	}
	return e, nil
}

// Environments returns the names of the environments the store has keys for, sorted so output built
// from it is stable.
func (s *Store) Environments() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Sorted(maps.Keys(s.envs))
}

// PublicKeys returns the public key of env's active signing key and the public keys of all its keys,
// active one included, in the order they were configured or created. Keys that no longer sign stay in
// all so tokens they signed keep verifying until those expire. active is the zero JWK when env has no
// active key.
func (s *Store) PublicKeys(env string) (active JWK, all []JWK, err error) {
	e, err := s.environment(env)
	if err != nil {
		return JWK{}, nil, err
	}
	all = make([]JWK, 0, len(e.keys))
	for _, k := range e.keys {
		all = append(all, k.jwk)
	}
	if k := e.activeKey(); k != nil {
		active = k.jwk
	}
	return active, all, nil
}

// Merge adds other's environments to s. Where both have an environment, other's replaces s's, except
// that keys from Confidant settings are never replaced by folder-backed ones: settings are the
// operator's explicit choice, a folder is only a default. Both stores share the merged keys
// afterwards, so rotate an environment through one of them only.
func (s *Store) Merge(other *Store) {
	if other == nil || other == s {
		return
	}
	// Copy other's map before locking s so two opposite concurrent merges cannot deadlock.
	other.mu.RLock()
	incoming := maps.Clone(other.envs)
	other.mu.RUnlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	for name, e := range incoming {
		if cur, ok := s.envs[name]; ok && cur.path == "" && e.path != "" {
			continue
		}
		s.envs[name] = e
	}
}

type tokenHeader struct {
	Alg string `json:"alg"`
	Typ string `json:"typ"`
	Kid string `json:"kid"`
}

// tokenClaims lists the claims in the order and with the names Confidant uses.
type tokenClaims struct {
	IsService bool   `json:"is_service"`
	Requester string `json:"requester"`
	User      string `json:"user"`
	Iat       int64  `json:"iat"`
	Nbf       int64  `json:"nbf"`
	Exp       int64  `json:"exp"`
}

// Sign issues an RS256 token for claims with env's active key, valid from now for lifetime (whole
// seconds; DefaultLifetime when lifetime is not positive).
func (s *Store) Sign(env string, claims Claims, now time.Time, lifetime time.Duration) (string, error) {
	switch {
	case lifetime <= 0:
		lifetime = DefaultLifetime
	case lifetime > MaxLifetime:
		return "", fmt.Errorf("jwtkeys: token lifetime %s exceeds the maximum of %s", lifetime, MaxLifetime)
	case lifetime < time.Second:
		// Token times are whole seconds, so this would be a token that expires as it is issued.
		return "", fmt.Errorf("jwtkeys: token lifetime %s is shorter than one second", lifetime)
	}
	if now.IsZero() {
		return "", errors.New("jwtkeys: signing time is not set")
	}
	e, err := s.environment(env)
	if err != nil {
		return "", err
	}
	key := e.activeKey()
	if key == nil {
		return "", fmt.Errorf("%w: %q", ErrNoActiveKey, env)
	}

	header, err := json.Marshal(tokenHeader{Alg: Algorithm, Typ: "JWT", Kid: key.ID})
	if err != nil {
		return "", fmt.Errorf("jwtkeys: encoding token header: %w", err)
	}
	iat := now.Unix()
	payload, err := json.Marshal(tokenClaims{
		IsService: claims.IsService,
		Requester: claims.Requester,
		User:      claims.User,
		Iat:       iat,
		Nbf:       iat,
		Exp:       iat + int64(lifetime/time.Second),
	})
	if err != nil {
		return "", fmt.Errorf("jwtkeys: encoding token claims: %w", err)
	}
	signingInput := b64.EncodeToString(header) + "." + b64.EncodeToString(payload)
	digest := sha256.Sum256([]byte(signingInput))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key.Private, crypto.SHA256, digest[:])
	if err != nil {
		return "", fmt.Errorf("jwtkeys: signing token for environment %q with key %q: %w", env, key.ID, err)
	}
	return signingInput + "." + b64.EncodeToString(sig), nil
}

// b64 is the encoding of every JWS and JWK field. Strict rejects non-zero padding bits, so each value
// has exactly one encoding and a token cannot be altered without changing what it decodes to.
var b64 = base64.RawURLEncoding.Strict()

// newStoredKey prepares a key for use: Precompute before the key is shared makes signing faster and
// means concurrent Sign calls never need to fill in anything.
func newStoredKey(kid string, priv *rsa.PrivateKey, created time.Time) (storedKey, error) {
	if kid == "" {
		return storedKey{}, errors.New("empty kid")
	}
	if bits := priv.N.BitLen(); bits < minKeyBits {
		return storedKey{}, fmt.Errorf("key %q is %d bits, at least %d are required", kid, bits, minKeyBits)
	}
	if err := priv.Validate(); err != nil {
		return storedKey{}, fmt.Errorf("key %q is invalid: %w", kid, err)
	}
	priv.Precompute()
	return storedKey{
		Key:     Key{ID: kid, Private: priv},
		jwk:     publicJWK(kid, &priv.PublicKey),
		created: created,
	}, nil
}

func publicJWK(kid string, pub *rsa.PublicKey) JWK {
	return JWK{
		Kty: "RSA",
		Kid: kid,
		N:   b64.EncodeToString(pub.N.Bytes()),
		E:   b64.EncodeToString(big.NewInt(int64(pub.E)).Bytes()),
		Alg: Algorithm,
	}
}

func validateEnvironment(env string) error {
	if !environmentName.MatchString(env) {
		return fmt.Errorf("jwtkeys: invalid environment name %q: want 1 to 64 letters, digits, '.', '_' or '-'", env)
	}
	return nil
}
