// Package kmsauth implements Lyft's kmsauth tokens (versions 1 and 2), the service-to-service and
// user-to-service authentication Confidant and its python client speak: a caller encrypts a small
// validity window with a KMS key it may use, binding who it is and whom it calls as the encryption
// context; the server decrypts it, and the key that decrypted it says what the caller may be.
package kmsauth

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/kms"
)

// TimeFormat is the layout of not_before and not_after.
const TimeFormat = "20060102T150405Z"

// backdate is how far before "now" a generated token starts, as python-kmsauth does, to absorb clock
// skew between client and server.
const backdate = 3 * time.Minute

// Validation failures. All of them mean "not authenticated"; ErrUnavailable means the KMS could not
// be asked and the caller should retry.
var (
	ErrInvalidUsername = errors.New("kmsauth: invalid username")
	ErrInvalidToken    = errors.New("kmsauth: invalid token")
	ErrExpired         = errors.New("kmsauth: token expired or not yet valid")
	ErrLifetime        = errors.New("kmsauth: token lifetime exceeds the maximum")
	ErrUserType        = errors.New("kmsauth: user type not allowed")
	ErrVersion         = errors.New("kmsauth: token version not allowed")
	ErrWrongKey        = errors.New("kmsauth: token encrypted with a key not allowed for this user type")
	ErrUnavailable     = errors.New("kmsauth: key service unavailable")
)

// Username is the kmsauth "from" identity: version 2 is "2/<user_type>/<from>", version 1 a bare
// "<from>" (always a service).
type Username struct {
	Version  int
	UserType string
	From     string
}

// ParseUsername parses a v1 or v2 username.
func ParseUsername(s string) (Username, error) {
	parts := strings.Split(s, "/")
	switch len(parts) {
	case 1:
		if !validName(parts[0]) {
			return Username{}, fmt.Errorf("%w: empty or malformed name", ErrInvalidUsername)
		}
		return Username{Version: 1, UserType: "service", From: parts[0]}, nil
	case 3:
		v, err := strconv.Atoi(parts[0])
		if err != nil || v < 2 {
			return Username{}, fmt.Errorf("%w: version %q is not an integer of at least 2", ErrInvalidUsername, parts[0])
		}
		if !validName(parts[1]) || !validName(parts[2]) {
			return Username{}, fmt.Errorf("%w: empty or malformed user type or name", ErrInvalidUsername)
		}
		return Username{Version: v, UserType: parts[1], From: parts[2]}, nil
	}
	return Username{}, fmt.Errorf("%w: want <from> or <version>/<user_type>/<from>", ErrInvalidUsername)
}

func validName(s string) bool {
	return s != "" && len(s) <= 256 && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// String renders the username as a client sends it.
func (u Username) String() string {
	if u.Version < 2 {
		return u.From
	}
	return fmt.Sprintf("%d/%s/%s", u.Version, u.UserType, u.From)
}

// EncryptionContext is the context a token of this username addressed to `to` is bound to.
func (u Username) EncryptionContext(to string) map[string]string {
	c := map[string]string{"to": to, "from": u.From}
	if u.Version > 1 {
		c["user_type"] = u.UserType
	}
	return c
}

type window struct {
	NotBefore string `json:"not_before"`
	NotAfter  string `json:"not_after"`
}

// Generate mints a token for u to call `to`, valid from now-3min for lifetime, encrypted under keyID.
func Generate(ctx context.Context, provider kms.Provider, keyID string, u Username, to string, lifetime time.Duration, now time.Time) (string, error) {
	if lifetime <= backdate {
		return "", fmt.Errorf("kmsauth: lifetime must be longer than %v", backdate)
	}
	start := now.UTC().Add(-backdate)
	plain, _ := json.Marshal(window{NotBefore: start.Format(TimeFormat), NotAfter: start.Add(lifetime).Format(TimeFormat)})
	blob, err := provider.Encrypt(ctx, keyID, plain, u.EncryptionContext(to))
	if err != nil {
		return "", fmt.Errorf("kmsauth: encrypt token: %w", err)
	}
	return base64.StdEncoding.EncodeToString(blob), nil
}

// Identity is an authenticated caller.
type Identity struct {
	Username
	// Account is the account of the scoped key that decrypted the token, or "".
	Account string
}

// Config configures a Validator. Key references may be aliases, ids or ARNs; they are resolved once.
type Config struct {
	// To is the server's own name (Confidant's AUTH_CONTEXT).
	To string
	// AuthKey validates service tokens; ScopedAuthKeys too, and also give the caller an account.
	AuthKey        string
	ScopedAuthKeys map[string]string
	// UserAuthKey validates user tokens.
	UserAuthKey string
	// MaxLifetime bounds not_after - not_before (Confidant's AUTH_TOKEN_MAX_LIFETIME).
	MaxLifetime time.Duration
	// MinVersion and MaxVersion bound the token version.
	MinVersion, MaxVersion int
	// UserTypes lists the accepted user types (KMS_AUTH_USER_TYPES).
	UserTypes []string
	// CacheSize bounds the cache of validated tokens.
	CacheSize int
}

// Validator checks tokens. It is safe for concurrent use.
type Validator struct {
	cfg         Config
	kms         kms.Provider
	serviceKeys map[string]string // canonical key id → account ("" for AUTH_KEY)
	userKey     string
	now         func() time.Time

	mu    sync.Mutex
	order *list.List
	cache map[[32]byte]*list.Element
}

type cached struct {
	key                 [32]byte
	identity            Identity
	notBefore, notAfter time.Time
}

// NewValidator resolves the configured keys and returns a validator.
func NewValidator(ctx context.Context, provider kms.Provider, cfg Config) (*Validator, error) {
	if cfg.To == "" {
		return nil, errors.New("AUTH_CONTEXT: must be set (the name services address their tokens to)")
	}
	if cfg.MinVersion < 1 || cfg.MaxVersion < cfg.MinVersion {
		return nil, fmt.Errorf("KMS_MINIMUM_TOKEN_VERSION/KMS_MAXIMUM_TOKEN_VERSION: invalid range %d..%d", cfg.MinVersion, cfg.MaxVersion)
	}
	if cfg.CacheSize < 1 {
		cfg.CacheSize = 4096
	}
	v := &Validator{cfg: cfg, kms: provider, serviceKeys: map[string]string{}, now: time.Now,
		order: list.New(), cache: map[[32]byte]*list.Element{}}
	resolve := func(setting, ref string) (string, error) {
		id, err := provider.ResolveKeyID(ctx, ref)
		if err != nil {
			return "", fmt.Errorf("%s %q: %w", setting, ref, err)
		}
		return id, nil
	}
	if cfg.AuthKey != "" {
		id, err := resolve("AUTH_KEY", cfg.AuthKey)
		if err != nil {
			return nil, err
		}
		v.serviceKeys[id] = ""
	}
	for ref, account := range cfg.ScopedAuthKeys {
		id, err := resolve("SCOPED_AUTH_KEYS", ref)
		if err != nil {
			return nil, err
		}
		v.serviceKeys[id] = account
	}
	if cfg.UserAuthKey != "" {
		id, err := resolve("USER_AUTH_KEY", cfg.UserAuthKey)
		if err != nil {
			return nil, err
		}
		v.userKey = id
	}
	return v, nil
}

// keyBuffers hold the bytes a cache key hashes, so a cached token costs no allocation to look up.
var keyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// cacheKey is the SHA-256 of everything a token was validated for: the token, the sender, the
// receiver, the user type and the token version, NUL-separated (none of them holds a NUL).
func cacheKey(token string, u Username, to string) [32]byte {
	bp := keyBuffers.Get().(*[]byte)
	b := append((*bp)[:0], token...)
	b = append(append(b, 0), u.From...)
	b = append(append(b, 0), to...)
	b = append(append(b, 0), u.UserType...)
	b = strconv.AppendInt(append(b, 0), int64(u.Version), 10)
	key := sha256.Sum256(b)
	if cap(b) <= 16<<10 {
		*bp = b[:0]
		keyBuffers.Put(bp)
	}
	return key
}

// Validate authenticates a username and token.
func (v *Validator) Validate(ctx context.Context, username, token string) (*Identity, error) {
	u, err := ParseUsername(username)
	if err != nil {
		return nil, err
	}
	if u.Version < v.cfg.MinVersion || u.Version > v.cfg.MaxVersion {
		return nil, fmt.Errorf("%w: %d not in %d..%d", ErrVersion, u.Version, v.cfg.MinVersion, v.cfg.MaxVersion)
	}
	if !slices.Contains(v.cfg.UserTypes, u.UserType) {
		return nil, fmt.Errorf("%w: %q", ErrUserType, u.UserType)
	}
	if token == "" || len(token) > 8192 {
		return nil, fmt.Errorf("%w: empty or oversized", ErrInvalidToken)
	}
	key := cacheKey(token, u, v.cfg.To)
	now := v.now().UTC()
	if c, ok := v.lookup(key); ok {
		if now.Before(c.notBefore) || !now.Before(c.notAfter) {
			return nil, ErrExpired
		}
		id := c.identity
		return &id, nil
	}
	blob, err := base64.StdEncoding.DecodeString(token)
	if err != nil {
		return nil, fmt.Errorf("%w: not base64", ErrInvalidToken)
	}
	plain, keyID, err := v.kms.Decrypt(ctx, blob, u.EncryptionContext(v.cfg.To))
	switch {
	case errors.Is(err, kms.ErrUnavailable):
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("%w: does not decrypt for this user and context", ErrInvalidToken)
	}
	id := Identity{Username: u}
	if u.UserType == "user" {
		if keyID != v.userKey || v.userKey == "" {
			return nil, ErrWrongKey
		}
	} else {
		account, ok := v.serviceKeys[keyID]
		if !ok {
			return nil, ErrWrongKey
		}
		id.Account = account
	}
	var w window
	if err := json.Unmarshal(plain, &w); err != nil {
		return nil, fmt.Errorf("%w: payload is not a validity window", ErrInvalidToken)
	}
	notBefore, err1 := time.Parse(TimeFormat, w.NotBefore)
	notAfter, err2 := time.Parse(TimeFormat, w.NotAfter)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("%w: missing or malformed not_before/not_after", ErrInvalidToken)
	}
	// The whole span counts, days included (the reference implementation only compared the
	// seconds-of-day part, which let multi-day tokens through).
	if notAfter.Sub(notBefore) > v.cfg.MaxLifetime {
		return nil, ErrLifetime
	}
	if now.Before(notBefore) || !now.Before(notAfter) {
		return nil, ErrExpired
	}
	v.store(&cached{key: key, identity: id, notBefore: notBefore, notAfter: notAfter})
	return &id, nil
}

func (v *Validator) lookup(key [32]byte) (*cached, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	el, ok := v.cache[key]
	if !ok {
		return nil, false
	}
	v.order.MoveToFront(el)
	return el.Value.(*cached), true
}

func (v *Validator) store(c *cached) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.cache[c.key]; ok {
		return
	}
	v.cache[c.key] = v.order.PushFront(c)
	for v.order.Len() > v.cfg.CacheSize {
		oldest := v.order.Back()
		v.order.Remove(oldest)
		delete(v.cache, oldest.Value.(*cached).key)
	}
}
