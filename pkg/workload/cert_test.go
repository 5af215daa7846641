package workload

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var epoch = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t testing.TB, name string) testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: epoch.Add(-time.Hour),
		NotAfter: epoch.Add(365 * 24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return testCA{cert, key}
}

func (ca testCA) pem() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
}

func (ca testCA) leaf(t testing.TB, serial int64, notAfter time.Time, eku x509.ExtKeyUsage, uris ...string) *x509.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"}, NotBefore: epoch.Add(-time.Hour),
		NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{eku}}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c
}

// TestCertVerifier: the service of a good certificate, and a refusal (ErrRefused, a message that says
// why) for every other case: expired, not yet valid, another CA, server-only usage, revoked (the
// list read again after an edit), another trust domain, no SPIFFE ID, two services, a bad path.
func TestCertVerifier(t *testing.T) {
	ca, other := newTestCA(t, "workloads"), newTestCA(t, "other")
	revoked := filepath.Join(t.TempDir(), "revoked")
	if err := os.WriteFile(revoked, []byte("# none yet\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := NewCertVerifier(CertConfig{CAPEM: ca.pem(), TrustDomain: "gantry.local", RevokedFile: revoked, Now: func() time.Time { return epoch }})
	if err != nil {
		t.Fatal(err)
	}
	valid := epoch.Add(24 * time.Hour)
	good := ca.leaf(t, 0xabc, valid, x509.ExtKeyUsageClientAuth, "spiffe://gantry.local/service/orders")
	if got, err := v.Verify([]*x509.Certificate{good}); err != nil || got != "orders" {
		t.Fatalf("good certificate: %q, %v", got, err)
	}
	cases := []struct {
		name string
		cert *x509.Certificate
		want string
	}{
		{"expired", ca.leaf(t, 2, epoch.Add(-time.Minute), x509.ExtKeyUsageClientAuth, "spiffe://gantry.local/service/orders"), "expired at"},
		{"other CA", other.leaf(t, 3, valid, x509.ExtKeyUsageClientAuth, "spiffe://gantry.local/service/orders"), "not issued by a CA trusted"},
		{"server only", ca.leaf(t, 4, valid, x509.ExtKeyUsageServerAuth, "spiffe://gantry.local/service/orders"), "not issued by a CA trusted"},
		{"other trust domain", ca.leaf(t, 5, valid, x509.ExtKeyUsageClientAuth, "spiffe://evil.example/service/orders"), "not spiffe://gantry.local/service/<name>"},
		{"no spiffe id", ca.leaf(t, 6, valid, x509.ExtKeyUsageClientAuth), "no URI SAN"},
		{"two services", ca.leaf(t, 7, valid, x509.ExtKeyUsageClientAuth, "spiffe://gantry.local/service/orders", "spiffe://gantry.local/service/billing"), "more than one service"},
		{"not a service path", ca.leaf(t, 8, valid, x509.ExtKeyUsageClientAuth, "spiffe://gantry.local/ns/default/sa/orders"), "not spiffe://"},
		{"dotdot name", ca.leaf(t, 9, valid, x509.ExtKeyUsageClientAuth, "spiffe://gantry.local/service/a/b"), "not spiffe://"},
		// SPIFFE IDs have one spelling: no percent-encoding, a lower-case trust domain (issue 40).
		{"percent-encoded name", ca.leaf(t, 10, valid, x509.ExtKeyUsageClientAuth, "spiffe://gantry.local/service/%6frders"), "not spiffe://"},
		{"upper-case trust domain", ca.leaf(t, 11, valid, x509.ExtKeyUsageClientAuth, "spiffe://GANTRY.LOCAL/service/orders"), "not spiffe://"},
		{"encoded slash", ca.leaf(t, 12, valid, x509.ExtKeyUsageClientAuth, "spiffe://gantry.local/service/a%2Fb"), "not spiffe://"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := v.Verify([]*x509.Certificate{c.cert})
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a refusal saying %q", err, c.want)
			}
		})
	}
	// Revoked from the next call on, with openssl's "serial=" form, without a restart.
	if err := os.WriteFile(revoked, []byte("serial=0ABC # orders, key leaked\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(time.Second)
	_ = os.Chtimes(revoked, now, now) // a same-second rewrite of the same size must still be seen
	if _, err := v.Verify([]*x509.Certificate{good}); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("revoked certificate: %v", err)
	}
	// A list replaced by one of the same size and modification time (cp -p, rsync -t) is seen too:
	// the content decides (issue 40). "serial=0ABC" and "serial=0ABD" have one size.
	billing := ca.leaf(t, 0xabd, valid, x509.ExtKeyUsageClientAuth, "spiffe://gantry.local/service/billing")
	if _, err := v.Verify([]*x509.Certificate{billing}); err != nil {
		t.Fatalf("billing before its revocation: %v", err)
	}
	info, err := os.Stat(revoked)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(revoked, []byte("serial=0ABD # orders, key leaked\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(revoked, info.ModTime(), info.ModTime()); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify([]*x509.Certificate{billing}); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("revoked by a list of the same size and time: %v", err)
	}
	if got, err := v.Verify([]*x509.Certificate{good}); err != nil || got != "orders" {
		t.Fatalf("orders, no longer listed: %q, %v", got, err)
	}
	// A revocation list that no longer parses refuses every certificate, as an error (not a pass).
	if err := os.WriteFile(revoked, []byte("not hex\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.Chtimes(revoked, now.Add(time.Second), now.Add(time.Second))
	if _, err := v.Verify([]*x509.Certificate{good}); err == nil || errors.Is(err, ErrRefused) {
		t.Fatalf("broken revocation list: %v, want an error that is not a refusal", err)
	}
}

// TestChainRoundTrip: the gateway's header form decodes to the same certificates, and a chain longer
// than any real one or not base64 is refused.
func TestChainRoundTrip(t *testing.T) {
	ca := newTestCA(t, "workloads")
	leaf := ca.leaf(t, 1, epoch.Add(time.Hour), x509.ExtKeyUsageClientAuth, "spiffe://gantry.local/service/orders")
	got, err := DecodeChain(EncodeChain([]*x509.Certificate{leaf, ca.cert}))
	if err != nil || len(got) != 2 || !got[0].Equal(leaf) || !got[1].Equal(ca.cert) {
		t.Fatalf("round trip: %v, %v", got, err)
	}
	long := strings.Repeat(EncodeChain([]*x509.Certificate{leaf})+",", maxChain) + EncodeChain([]*x509.Certificate{leaf})
	if _, err := DecodeChain(long); !errors.Is(err, ErrRefused) {
		t.Fatalf("long chain: %v", err)
	}
	if _, err := DecodeChain("!!"); !errors.Is(err, ErrRefused) {
		t.Fatalf("bad base64: %v", err)
	}
}
