package userauth

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"
)

// testKeyPair is an RSA key and a self-signed certificate for it, in parsed and PEM form.
type testKeyPair struct {
	key     *rsa.PrivateKey
	cert    *x509.Certificate
	certPEM []byte
	keyPEM  []byte
}

var (
	testKeysOnce sync.Once
	testKeys     map[string]*testKeyPair
	testKeysErr  error
)

// keyPair returns a per-binary cached key pair by role; RSA generation dominates test time under
// -race otherwise.
func keyPair(t testing.TB, role string) *testKeyPair {
	t.Helper()
	testKeysOnce.Do(func() {
		testKeys = map[string]*testKeyPair{}
		for _, r := range []string{"sp", "idp", "other-idp", "op", "other-op"} {
			kp, err := newTestKeyPair(r)
			if err != nil {
				testKeysErr = err
				return
			}
			testKeys[r] = kp
		}
	})
	if testKeysErr != nil {
		t.Fatalf("generate keys: %v", testKeysErr)
	}
	kp, ok := testKeys[role]
	if !ok {
		t.Fatalf("no test key for role %q", role)
	}
	return kp
}

func newTestKeyPair(cn string) (*testKeyPair, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &testKeyPair{
		key:     key,
		cert:    cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
	}, nil
}

var testCookieSecret = []byte("0123456789abcdef0123456789abcdef-test-only")

// wantNotAuthenticated fails unless err wraps ErrNotAuthenticated and names the expected reason,
// so a negative case cannot pass by failing for some unrelated reason.
func wantNotAuthenticated(t *testing.T, err error, reason string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got nil error, want ErrNotAuthenticated (%s)", reason)
	}
	if !errors.Is(err, ErrNotAuthenticated) {
		t.Fatalf("error %q does not wrap ErrNotAuthenticated", err)
	}
	if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(reason)) {
		t.Fatalf("error %q does not mention %q", err, reason)
	}
}
