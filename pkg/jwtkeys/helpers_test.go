package jwtkeys_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gantry-dev/gantry/pkg/jwtkeys"
)

// now is a fixed signing time so expected claims are exact.
var now = time.Unix(1_700_000_000, 0)

var (
	keysOnce sync.Once
	keys     [3]*rsa.PrivateKey
	keysErr  error
)

// testKey returns one of a few keys generated once per test binary: 2048-bit generation is slow
// under -race, and most tests only need some valid key.
func testKey(t testing.TB, i int) *rsa.PrivateKey {
	t.Helper()
	keysOnce.Do(func() {
		for j := range keys {
			if keys[j], keysErr = rsa.GenerateKey(rand.Reader, 2048); keysErr != nil {
				return
			}
		}
	})
	if keysErr != nil {
		t.Fatal(keysErr)
	}
	return keys[i]
}

func pkcs1PEM(key *rsa.PrivateKey) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
}

func pkcs8PEM(t testing.TB, key *rsa.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

func selfSignedPEM(t testing.TB, key *rsa.PrivateKey) string {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "gantry jwt test"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// authorities encodes a JWT_CERTIFICATE_AUTHORITIES value the way Confidant operators do.
func authorities(t testing.TB, envs map[string][]any) string {
	t.Helper()
	data, err := json.Marshal(envs)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(data)
}

func entry(crt, key string, passphrase *string, kid string) map[string]any {
	return map[string]any{"crt": crt, "key": key, "passphrase": passphrase, "kid": kid}
}

// settingsStore returns a store with one environment whose single key, testKey(keyIndex), is active.
func settingsStore(t testing.TB, env, kid string, keyIndex int) *jwtkeys.Store {
	t.Helper()
	key := testKey(t, keyIndex)
	auth := authorities(t, map[string][]any{env: {entry(selfSignedPEM(t, key), pkcs1PEM(key), nil, kid)}})
	s, err := jwtkeys.FromConfidantSettings(auth, fmt.Sprintf(`{%q: %q}`, env, kid), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func publicKeys(t testing.TB, s *jwtkeys.Store, env string) (jwtkeys.JWK, []jwtkeys.JWK) {
	t.Helper()
	active, all, err := s.PublicKeys(env)
	if err != nil {
		t.Fatal(err)
	}
	return active, all
}

func kids(keys []jwtkeys.JWK) []string {
	var out []string
	for _, k := range keys {
		out = append(out, k.Kid)
	}
	return out
}

// segment decodes part i (0 header, 1 payload) of a token without verifying it.
func segment(t testing.TB, token string, i int) map[string]any {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token %q does not have three parts", token)
	}
	data, err := base64.RawURLEncoding.DecodeString(parts[i])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func encodeSegment(t testing.TB, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(data)
}

// observedLogger records log entries so tests can check warnings and that no key material is logged.
func observedLogger() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	return zap.New(core), logs
}

// assertNoSecrets fails if any log entry contains a PEM marker or one of the given secrets.
func assertNoSecrets(t testing.TB, logs *observer.ObservedLogs, secrets ...string) {
	t.Helper()
	for _, e := range logs.All() {
		text := fmt.Sprint(e.Message, e.ContextMap())
		for _, s := range append([]string{"PRIVATE KEY", "-----BEGIN"}, secrets...) {
			if strings.Contains(text, s) {
				t.Errorf("log entry %q contains secret material %q", text, s)
			}
		}
	}
}
