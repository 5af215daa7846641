package ca_test

import (
	"crypto/x509/pkix"
	"errors"
	"testing"

	"github.com/gantry-dev/gantry/pkg/ca"
)

// FuzzParseCSR feeds untrusted POST bodies to the CSR parser: it must never panic, and anything it
// refuses must be ErrInvalidCSR (a 400), never another error.
func FuzzParseCSR(f *testing.F) {
	_, good, err := ca.NewKeyAndCSR(ca.KeyRequest{KeyType: ca.KeyECDSA, Subject: pkix.Name{CommonName: "seed"}, DNSNames: []string{"seed.example.com"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nMAA=\n-----END CERTIFICATE REQUEST-----\n"))
	f.Add([]byte("-----BEGIN NEW CERTIFICATE REQUEST-----\n-----END NEW CERTIFICATE REQUEST-----\n"))
	f.Add([]byte("not pem"))
	f.Fuzz(func(t *testing.T, data []byte) {
		csr, err := ca.ParseCSR(data)
		if err != nil && !errors.Is(err, ca.ErrInvalidCSR) {
			t.Fatalf("error %v is not ErrInvalidCSR", err)
		}
		if err == nil && csr == nil {
			t.Fatal("nil CSR without an error")
		}
	})
}
