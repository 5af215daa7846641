package jwtkeys_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest/observer"

	"github.com/gantry-dev/gantry/pkg/jwtkeys"
)

func encryptedPKCS1PEM(t testing.TB, key *rsa.PrivateKey, passphrase string) string {
	t.Helper()
	//lint:ignore SA1019 Confidant deployments use legacy PEM encryption; the test must produce it.
	block, err := x509.EncryptPEMBlock(rand.Reader, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key), []byte(passphrase), x509.PEMCipherAES256)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(block))
}

func TestFromConfidantSettings(t *testing.T) {
	key0, key1, key2 := testKey(t, 0), testKey(t, 1), testKey(t, 2)
	crt0, crt1, crt2 := selfSignedPEM(t, key0), selfSignedPEM(t, key1), selfSignedPEM(t, key2)
	pass, wrongPass := "correct horse", "battery staple"
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalPKCS8PrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	ecPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER}))

	// The production entries, in order; keep says whether the entry must survive parsing.
	entries := []struct {
		name  string
		entry any
		keep  bool
	}{
		{name: "PKCS#1 with certificate", entry: entry(crt0, pkcs1PEM(key0), nil, "pkcs1"), keep: true},
		{name: "PKCS#8 with certificate", entry: entry(crt1, pkcs8PEM(t, key1), nil, "pkcs8"), keep: true},
		{name: "encrypted with passphrase", entry: entry(crt2, encryptedPKCS1PEM(t, key2, pass), &pass, "encrypted"), keep: true},
		{name: "encrypted with wrong passphrase", entry: entry(crt2, encryptedPKCS1PEM(t, key2, pass), &wrongPass, "wrong-pass")},
		{name: "encrypted with null passphrase", entry: entry(crt2, encryptedPKCS1PEM(t, key2, pass), nil, "null-pass")},
		{name: "garbage key", entry: entry(crt0, "not a key", nil, "garbage-key")},
		{name: "garbage certificate", entry: entry("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", pkcs1PEM(key0), nil, "bad-crt")},
		{name: "certificate for another key", entry: entry(crt1, pkcs1PEM(key0), nil, "mismatched-crt")},
		{name: "no kid", entry: entry(crt0, pkcs1PEM(key0), nil, "")},
		{name: "duplicate kid", entry: entry(crt1, pkcs1PEM(key1), nil, "pkcs1")},
		{name: "not an object", entry: 42},
		{name: "1024-bit key", entry: entry("", pkcs1PEM(small), nil, "small")},
		{name: "EC key", entry: entry("", ecPEM, nil, "ecdsa")},
		{name: "encrypted PKCS#8", entry: entry("", "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n", &pass, "pkcs8-encrypted")},
	}
	var production []any
	var wantKids []string
	for _, e := range entries {
		production = append(production, e.entry)
		if e.keep {
			wantKids = append(wantKids, e.entry.(map[string]any)["kid"].(string))
		}
	}
	auth := authorities(t, map[string][]any{
		"production":   production,
		"staging":      {entry(crt0, pkcs1PEM(key0), nil, "stg-1")},
		"dev":          {entry("", pkcs8PEM(t, key1), nil, "dev-1")},
		"bad env/name": {entry(crt0, pkcs1PEM(key0), nil, "x")},
	})
	// "qa" is not a list, which only JSON written by hand can express.
	raw, err := base64.StdEncoding.DecodeString(auth)
	if err != nil {
		t.Fatal(err)
	}
	auth = base64.StdEncoding.EncodeToString([]byte(strings.Replace(string(raw), "{", `{"qa":{"kid":"q"},`, 1)))
	active := `{"production": "encrypted", "staging": "missing-kid", "ghost": "g"}`

	logger, logs := observedLogger()
	s, err := jwtkeys.FromConfidantSettings(auth, active, logger)
	if err != nil {
		t.Fatal(err)
	}
	assertNoSecrets(t, logs, pass, wrongPass)

	if got, want := s.Environments(), []string{"dev", "production", "staging"}; !slices.Equal(got, want) {
		t.Errorf("Environments = %v, want %v", got, want)
	}
	prodActive, prodAll := publicKeys(t, s, "production")
	if got := kids(prodAll); !slices.Equal(got, wantKids) {
		t.Errorf("production kids = %v, want %v", got, wantKids)
	}
	if want := (jwtkeys.JWK{Kty: "RSA", Kid: "pkcs1", N: base64.RawURLEncoding.EncodeToString(key0.N.Bytes()), E: "AQAB", Alg: "RS256"}); len(prodAll) == 0 || prodAll[0] != want {
		t.Errorf("first production JWK = %+v, want %+v", prodAll, want)
	}
	if prodActive.Kid != "encrypted" || prodActive.N != base64.RawURLEncoding.EncodeToString(key2.N.Bytes()) {
		t.Errorf("production active = %+v, want the decrypted key", prodActive)
	}

	t.Run("entries", func(t *testing.T) {
		warnings := logs.FilterMessage("skipping JWT key entry").All()
		skipped := 0
		for idx, e := range entries {
			t.Run(e.name, func(t *testing.T) {
				warned := slices.ContainsFunc(warnings, func(w observer.LoggedEntry) bool {
					return w.ContextMap()["environment"] == "production" && w.ContextMap()["index"] == int64(idx)
				})
				if e.keep == warned {
					t.Errorf("keep = %v but warned = %v", e.keep, warned)
				}
			})
			if !e.keep {
				skipped++
			}
		}
		if len(warnings) != skipped {
			t.Errorf("got %d skip warnings, want %d", len(warnings), skipped)
		}
	})

	t.Run("sign", func(t *testing.T) {
		tests := []struct {
			env    string
			wantIs error
		}{
			{env: "production"},
			{env: "staging", wantIs: jwtkeys.ErrNoActiveKey}, // active kid names no entry
			{env: "dev", wantIs: jwtkeys.ErrNoActiveKey},     // no active kid at all
			{env: "ghost", wantIs: jwtkeys.ErrUnknownEnvironment},
			{env: "qa", wantIs: jwtkeys.ErrUnknownEnvironment},
		}
		for _, tt := range tests {
			t.Run(tt.env, func(t *testing.T) {
				token, err := s.Sign(tt.env, jwtkeys.Claims{IsService: true, Requester: "svc", User: "svc"}, now, 0)
				if tt.wantIs != nil {
					if !errors.Is(err, tt.wantIs) {
						t.Fatalf("Sign = %q, %v, want %v", token, err, tt.wantIs)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if _, err := jwtkeys.Verify(token, prodAll, now); err != nil {
					t.Fatal(err)
				}
				if _, err := jwtkeys.Verify(token, []jwtkeys.JWK{prodAll[0]}, now); err == nil {
					t.Error("token verified without the active key")
				}
			})
		}
	})

	t.Run("public keys of an environment without active key", func(t *testing.T) {
		active, all := publicKeys(t, s, "staging")
		if active != (jwtkeys.JWK{}) || !slices.Equal(kids(all), []string{"stg-1"}) {
			t.Errorf("staging keys = %+v %+v, want no active and stg-1", active, all)
		}
		if _, _, err := s.PublicKeys("ghost"); !errors.Is(err, jwtkeys.ErrUnknownEnvironment) {
			t.Errorf("PublicKeys(ghost) err = %v, want ErrUnknownEnvironment", err)
		}
	})
}

func TestFromConfidantSettingsErrors(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		name        string
		authorities string
		active      string
		wantErr     string // "" means an empty store and no error
	}{
		{name: "both empty"},
		{name: "whitespace only", authorities: " \n", active: "\t"},
		{name: "bad base64", authorities: "not base64!", wantErr: "JWT_CERTIFICATE_AUTHORITIES"},
		{name: "base64 without padding", authorities: base64.RawStdEncoding.EncodeToString([]byte(`{"a":[]}`)), wantErr: "JWT_CERTIFICATE_AUTHORITIES"},
		{name: "not JSON", authorities: b64("{"), wantErr: "JWT_CERTIFICATE_AUTHORITIES"},
		{name: "JSON list", authorities: b64(`[1]`), wantErr: "JWT_CERTIFICATE_AUTHORITIES"},
		{name: "active not JSON", active: "production=abc", wantErr: "JWT_ACTIVE_SIGNING_KEYS"},
		{name: "active not strings", active: `{"production": 1}`, wantErr: "JWT_ACTIVE_SIGNING_KEYS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := jwtkeys.FromConfidantSettings(tt.authorities, tt.active, nil)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if envs := s.Environments(); len(envs) != 0 {
					t.Errorf("Environments = %v, want none", envs)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to name %s", err, tt.wantErr)
			}
		})
	}
}
