package workload

import (
	"context"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/workload/workloadtest"
)

// FuzzDecodeChain: a forwarded chain header either decodes to certificates that encode back to the
// same header, or is refused with ErrRefused; it never panics, whatever the bytes.
func FuzzDecodeChain(f *testing.F) {
	ca := newTestCA(f, "seed")
	leaf := ca.leaf(f, 1, epoch.Add(time.Hour), x509.ExtKeyUsageClientAuth, "spiffe://gantry.local/service/orders")
	for _, s := range []string{EncodeChain([]*x509.Certificate{leaf, ca.cert}), "", ",", "!!", "AAAA", strings.Repeat("AA==,", 9)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		chain, err := DecodeChain(s)
		if err != nil {
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("%q: error %v is not a refusal", s, err)
			}
			return
		}
		if again, err := DecodeChain(EncodeChain(chain)); err != nil || len(again) != len(chain) {
			t.Fatalf("%q: decoded chain does not round-trip: %v", s, err)
		}
	})
}

// FuzzJWTVerify: any bearer value is either a refusal (ErrRefused) or a token of the in-test issuer
// that maps to its service; it never panics and is never an error that would answer 503.
func FuzzJWTVerify(f *testing.F) {
	is := workloadtest.New(f)
	jwks := filepath.Join(f.TempDir(), "jwks.json")
	if err := os.WriteFile(jwks, is.JWKS(), 0o600); err != nil {
		f.Fatal(err)
	}
	now := time.Now()
	v, err := NewJWTVerifier(JWTConfig{
		Issuers:  []IssuerConfig{{Name: "c", Kind: KindKubernetes, Issuer: is.URL, Audiences: []string{"gantry"}, JWKSFile: jwks}},
		Mappings: []Mapping{{Issuer: "c", Namespace: "shop", ServiceAccount: "orders", Service: "orders"}},
		Now:      func() time.Time { return now },
	})
	if err != nil {
		f.Fatal(err)
	}
	good := is.Sign(f, workloadtest.KidEC, is.KubernetesClaims("shop", "orders", "gantry", now, time.Hour))
	for _, s := range []string{good, is.Sign(f, workloadtest.KidRSA, is.KubernetesClaims("shop", "orders", "gantry", now, time.Hour)),
		"a.b.c", "..", "eyJhbGciOiJub25lIn0.e30.", strings.Replace(good, ".", "..", 1), good + "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := v.Verify(context.Background(), s)
		if err != nil {
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("%q: error %v is not a refusal", s, err)
			}
			return
		}
		if id.Service != "orders" {
			t.Fatalf("%q verified as %+v", s, id)
		}
	})
}
