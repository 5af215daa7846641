package jwtkeys_test

import (
	"crypto"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/jwtkeys"
)

func TestSignVerifyRoundTrip(t *testing.T) {
	s := settingsStore(t, "production", "prod-1", 0)
	active, all := publicKeys(t, s, "production")
	tests := []struct {
		name     string
		claims   jwtkeys.Claims
		lifetime time.Duration
		wantLife int64
	}{
		{name: "service with default lifetime", claims: jwtkeys.Claims{IsService: true, Requester: "web-production", User: "web-production"}, wantLife: 3600},
		{name: "user with negative lifetime uses default", claims: jwtkeys.Claims{Requester: "alice@example.com", User: "alice@example.com"}, lifetime: -time.Minute, wantLife: 3600},
		{name: "explicit lifetime", claims: jwtkeys.Claims{IsService: true, Requester: "a", User: "b"}, lifetime: 15 * time.Minute, wantLife: 900},
		{name: "fractional lifetime is truncated", claims: jwtkeys.Claims{Requester: "a"}, lifetime: 1500 * time.Millisecond, wantLife: 1},
		{name: "maximum lifetime", claims: jwtkeys.Claims{User: `quote " and <html>`}, lifetime: 24 * time.Hour, wantLife: 86400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			token, err := s.Sign("production", tt.claims, now, tt.lifetime)
			if err != nil {
				t.Fatal(err)
			}
			wantHeader := map[string]any{"alg": "RS256", "typ": "JWT", "kid": "prod-1"}
			if h := segment(t, token, 0); !reflect.DeepEqual(h, wantHeader) {
				t.Errorf("header = %v, want %v", h, wantHeader)
			}
			if active.Kid != "prod-1" {
				t.Errorf("active kid = %q, want prod-1", active.Kid)
			}
			got, err := jwtkeys.Verify(token, all, now)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			iat := now.Unix()
			want := map[string]any{
				"is_service": tt.claims.IsService,
				"requester":  tt.claims.Requester,
				"user":       tt.claims.User,
				"iat":        json.Number(itoa(iat)),
				"nbf":        json.Number(itoa(iat)),
				"exp":        json.Number(itoa(iat + tt.wantLife)),
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("claims = %#v, want %#v", got, want)
			}
			// The last second of validity still verifies; the one after does not.
			if _, err := jwtkeys.Verify(token, all, now.Add(time.Duration(tt.wantLife)*time.Second-time.Nanosecond)); err != nil {
				t.Errorf("Verify just before exp: %v", err)
			}
			if _, err := jwtkeys.Verify(token, all, now.Add(time.Duration(tt.wantLife)*time.Second)); err == nil {
				t.Error("Verify at exp succeeded")
			}
		})
	}
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

func TestSignErrors(t *testing.T) {
	s := settingsStore(t, "production", "prod-1", 0)
	key := testKey(t, 0)
	inactive, err := jwtkeys.FromConfidantSettings(
		authorities(t, map[string][]any{"staging": {entry("", pkcs1PEM(key), nil, "stg-1")}}), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		store    *jwtkeys.Store
		env      string
		now      time.Time
		lifetime time.Duration
		wantIs   error
		wantErr  string
	}{
		{name: "unknown environment", store: s, env: "staging", now: now, wantIs: jwtkeys.ErrUnknownEnvironment},
		{name: "no active key", store: inactive, env: "staging", now: now, wantIs: jwtkeys.ErrNoActiveKey},
		{name: "lifetime above 24h", store: s, env: "production", now: now, lifetime: 24*time.Hour + time.Second, wantErr: "exceeds the maximum"},
		{name: "sub-second lifetime", store: s, env: "production", now: now, lifetime: 500 * time.Millisecond, wantErr: "shorter than one second"},
		{name: "zero time", store: s, env: "production", wantErr: "signing time is not set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			token, err := tt.store.Sign(tt.env, jwtkeys.Claims{User: "u"}, tt.now, tt.lifetime)
			if err == nil {
				t.Fatalf("Sign = %q, want an error", token)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("err = %v, want %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestVerifyRejects(t *testing.T) {
	s := settingsStore(t, "production", "prod-1", 0)
	other := settingsStore(t, "staging", "stg-1", 1)
	_, prodKeys := publicKeys(t, s, "production")
	_, stagingKeys := publicKeys(t, other, "staging")
	token, err := s.Sign("production", jwtkeys.Claims{IsService: true, Requester: "web", User: "web"}, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(token, ".")
	header := segment(t, token, 0)
	payload := segment(t, token, 1)

	with := func(m map[string]any, k string, v any) map[string]any {
		c := map[string]any{}
		for kk, vv := range m {
			c[kk] = vv
		}
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	// signWith signs arbitrary header and payload with the production key, to show that a valid
	// signature alone does not make Verify accept bad claims.
	signWith := func(h, p map[string]any) string {
		input := encodeSegment(t, h) + "." + encodeSegment(t, p)
		digest := sha256.Sum256([]byte(input))
		sig, err := rsa.SignPKCS1v15(rand.Reader, testKey(t, 0), crypto.SHA256, digest[:])
		if err != nil {
			t.Fatal(err)
		}
		return input + "." + base64.RawURLEncoding.EncodeToString(sig)
	}
	hs256 := func() string {
		h := with(header, "alg", "HS256")
		input := encodeSegment(t, h) + "." + parts[1]
		// The classic confusion attack: the public key's modulus used as the HMAC secret.
		mac := hmac.New(sha256.New, []byte(prodKeys[0].N))
		mac.Write([]byte(input))
		return input + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
	}
	tamperedPayload := encodeSegment(t, with(payload, "user", "admin"))
	swappedKey := []jwtkeys.JWK{{Kty: "RSA", Kid: "prod-1", N: stagingKeys[0].N, E: stagingKeys[0].E, Alg: "RS256"}}

	tests := []struct {
		name    string
		token   string
		keys    []jwtkeys.JWK
		now     time.Time
		wantErr string // "" means the token must verify
	}{
		{name: "valid", token: token, keys: prodKeys, now: now},
		{name: "valid among several keys", token: token, keys: append(append([]jwtkeys.JWK{}, stagingKeys...), prodKeys...), now: now},
		{name: "valid re-signed claims", token: signWith(header, payload), keys: prodKeys, now: now},
		{name: "tampered payload", token: parts[0] + "." + tamperedPayload + "." + parts[2], keys: prodKeys, now: now, wantErr: "signature does not verify"},
		{name: "tampered signature", token: parts[0] + "." + parts[1] + "." + parts[2][:10] + flip(parts[2][10]) + parts[2][11:], keys: prodKeys, now: now, wantErr: "signature"},
		{name: "wrong key set", token: token, keys: stagingKeys, now: now, wantErr: "not one of the given keys"},
		{name: "no keys", token: token, now: now, wantErr: "not one of the given keys"},
		{name: "right kid wrong key", token: token, keys: swappedKey, now: now, wantErr: "signature does not verify"},
		{name: "expired", token: token, keys: prodKeys, now: now.Add(time.Hour), wantErr: "expired"},
		{name: "long expired", token: token, keys: prodKeys, now: now.Add(48 * time.Hour), wantErr: "expired"},
		{name: "not yet valid", token: token, keys: prodKeys, now: now.Add(-time.Nanosecond), wantErr: "not valid before"},
		{name: "alg none", token: encodeSegment(t, with(header, "alg", "none")) + "." + parts[1] + ".", keys: prodKeys, now: now, wantErr: `algorithm "none"`},
		{name: "alg none keeping signature", token: encodeSegment(t, with(header, "alg", "none")) + "." + parts[1] + "." + parts[2], keys: prodKeys, now: now, wantErr: `algorithm "none"`},
		{name: "alg HS256", token: hs256(), keys: prodKeys, now: now, wantErr: `algorithm "HS256"`},
		{name: "alg upper-cased key", token: signWith(map[string]any{"ALG": "RS256", "kid": "prod-1"}, payload), keys: prodKeys, now: now, wantErr: `algorithm ""`},
		{name: "alg not a string", token: signWith(with(header, "alg", 1), payload), keys: prodKeys, now: now, wantErr: "alg is not a string"},
		{name: "missing kid", token: signWith(with(header, "kid", nil), payload), keys: prodKeys, now: now, wantErr: "no kid"},
		{name: "wrong typ", token: signWith(with(header, "typ", "JWE"), payload), keys: prodKeys, now: now, wantErr: "type"},
		{name: "critical extension", token: signWith(with(header, "crit", []string{"exp"}), payload), keys: prodKeys, now: now, wantErr: "critical"},
		{name: "missing exp", token: signWith(header, with(payload, "exp", nil)), keys: prodKeys, now: now, wantErr: "no exp"},
		{name: "missing nbf", token: signWith(header, with(payload, "nbf", nil)), keys: prodKeys, now: now, wantErr: "no nbf"},
		{name: "string exp", token: signWith(header, with(payload, "exp", "9999999999")), keys: prodKeys, now: now, wantErr: "exp is not a number"},
		{name: "fractional exp", token: signWith(header, with(payload, "exp", 1.7e9+0.5)), keys: prodKeys, now: now, wantErr: "not an integer"},
		{name: "key for another alg", token: token, keys: []jwtkeys.JWK{withAlg(prodKeys[0], "RS512")}, now: now, wantErr: "not RS256"},
		{name: "two parts", token: parts[0] + "." + parts[1], keys: prodKeys, now: now, wantErr: "three"},
		{name: "four parts", token: token + ".x", keys: prodKeys, now: now, wantErr: "three"},
		{name: "padded signature", token: token + "==", keys: prodKeys, now: now, wantErr: "signature"},
		{name: "empty", keys: prodKeys, now: now, wantErr: "three"},
		{name: "header not an object", token: encodeSegment(t, []string{"RS256"}) + "." + parts[1] + "." + parts[2], keys: prodKeys, now: now, wantErr: "not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			claims, err := jwtkeys.Verify(tt.token, tt.keys, tt.now)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if claims["user"] != "web" {
					t.Errorf("user claim = %v, want web", claims["user"])
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Verify err = %v (claims %v), want it to contain %q", err, claims, tt.wantErr)
			}
		})
	}
}

func withAlg(k jwtkeys.JWK, alg string) jwtkeys.JWK {
	k.Alg = alg
	return k
}

// flip changes one base64url character into another valid one.
func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}

func TestConcurrentSign(t *testing.T) {
	s, err := jwtkeys.Open(t.TempDir(), []string{"production"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, perGoroutine = 8, 10
	tokens := make(chan string, goroutines*perGoroutine)
	errs := make(chan error, goroutines*perGoroutine+2)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perGoroutine {
				token, err := s.Sign("production", jwtkeys.Claims{IsService: g%2 == 0, Requester: "r", User: "u"}, now.Add(time.Duration(i)*time.Second), 0)
				if err != nil {
					errs <- err
					continue
				}
				tokens <- token
				if _, _, err := s.PublicKeys("production"); err != nil {
					errs <- err
				}
			}
		})
	}
	// Rotating while signing is what a live server does; the race detector checks it is safe.
	wg.Go(func() {
		if _, err := s.Rotate("production"); err != nil {
			errs <- err
		}
		_ = s.Environments()
	})
	wg.Wait()
	close(tokens)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	_, all := publicKeys(t, s, "production")
	if len(all) != 2 {
		t.Fatalf("got %d keys after one rotation, want 2", len(all))
	}
	n := 0
	for token := range tokens {
		n++
		if _, err := jwtkeys.Verify(token, all, now.Add(time.Minute)); err != nil {
			t.Errorf("token %d: %v", n, err)
		}
	}
	if n != goroutines*perGoroutine {
		t.Errorf("got %d tokens, want %d", n, goroutines*perGoroutine)
	}
}

func FuzzVerify(f *testing.F) {
	s := settingsStore(f, "production", "prod-1", 0)
	_, keys := publicKeys(f, s, "production")
	token, err := s.Sign("production", jwtkeys.Claims{IsService: true, Requester: "web", User: "web"}, now, 0)
	if err != nil {
		f.Fatal(err)
	}
	if _, err := jwtkeys.Verify(token, keys, now); err != nil {
		f.Fatalf("seed token does not verify: %v", err)
	}
	parts := strings.Split(token, ".")
	f.Add(token)
	f.Add(parts[0] + "." + parts[1] + ".")
	f.Add("eyJhbGciOiJub25lIn0.e30.")
	f.Add("..")
	f.Add("")
	f.Fuzz(func(t *testing.T, token string) {
		claims, err := jwtkeys.Verify(token, keys, now)
		if err == nil {
			// Whatever got through must carry the validity window Verify promises to have checked.
			if _, ok := claims["exp"].(json.Number); !ok {
				t.Fatalf("Verify accepted %q without a numeric exp: %v", token, claims)
			}
		}
	})
}
