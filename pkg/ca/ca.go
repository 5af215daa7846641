// Package ca issues X.509 certificates from certificate authorities behind one small interface, with
// two providers: a local CA whose keys live in files (the default, so certificates work with no cloud
// account) and AWS ACM Private CA through aws-sdk-go-v2. It also holds the helpers both sides of an
// issuance need: parsing a client's CSR, and generating a key pair and CSR for a server-side request.
//
// The package knows no service: validity caps, access control and caching belong to the caller.
package ca

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"time"
)

var (
	// ErrInvalidCSR: the certificate signing request is missing, not PEM, not parsable, or its
	// signature does not verify. Callers answer 400.
	ErrInvalidCSR = errors.New("ca: invalid certificate signing request")
	// ErrUnavailable: the CA backend cannot issue right now (AWS error, timeout). Callers answer 503.
	ErrUnavailable = errors.New("ca: certificate authority unavailable")
)

// Authority is one certificate authority.
type Authority interface {
	// Info returns the CA's certificate, the chain above it and its tags.
	Info(ctx context.Context) (Info, error)
	// Issue signs a PEM CSR for validityDays (> 0; the caller applies its cap). The subject and the
	// subject alternative names come from the CSR; the leaf is an end-entity certificate for TLS
	// servers and clients.
	Issue(ctx context.Context, csrPEM []byte, validityDays int) (Issued, error)
}

// Info describes a CA.
type Info struct {
	// Certificate is the PEM certificate of the issuing CA.
	Certificate string
	// Chain is the PEM chain above the CA certificate, up to the root; empty for a root CA.
	Chain string
	// Tags are the CA's tags (ACM PCA); empty for a local CA.
	Tags map[string]string
}

// Issued is a signed certificate.
type Issued struct {
	// Certificate is the PEM leaf.
	Certificate string
	// Chain is the PEM chain from the issuing CA up to the root, so a verifier needs only the leaf
	// and this.
	Chain string
}

// Key types of server-generated key pairs.
const (
	KeyRSA   = "rsa"
	KeyECDSA = "ecdsa"
)

// DefaultRSABits is the size of server-generated RSA keys, as in Confidant.
const DefaultRSABits = 2048

// maxCSRBytes bounds what ParseCSR reads; a real CSR is a few kilobytes.
const maxCSRBytes = 64 << 10

// ParseCSR decodes a PEM certificate signing request and checks its self-signature, so nobody can
// get a certificate for a key they do not hold.
func ParseCSR(data []byte) (*x509.CertificateRequest, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrInvalidCSR)
	}
	if len(data) > maxCSRBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalidCSR, maxCSRBytes)
	}
	block, _ := pem.Decode(data)
	if block == nil || (block.Type != "CERTIFICATE REQUEST" && block.Type != "NEW CERTIFICATE REQUEST") {
		return nil, fmt.Errorf("%w: no PEM CERTIFICATE REQUEST block", ErrInvalidCSR)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidCSR, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: signature: %v", ErrInvalidCSR, err)
	}
	return csr, nil
}

// KeyRequest describes a server-generated key pair and its CSR.
type KeyRequest struct {
	// KeyType is KeyRSA (default) or KeyECDSA (P-256).
	KeyType string
	// RSABits is the RSA key size; 0 means DefaultRSABits.
	RSABits int
	// Subject of the CSR; its CommonName is the certificate's CN.
	Subject pkix.Name
	// DNSNames and IPAddresses are the subject alternative names.
	DNSNames    []string
	IPAddresses []net.IP
	// URIs are URI subject alternative names (a workload's SPIFFE ID).
	URIs []*url.URL
}

// NewKeyAndCSR generates a private key and a CSR signed by it. The key is PEM in the traditional
// OpenSSL form (PKCS#1 "RSA PRIVATE KEY" or SEC 1 "EC PRIVATE KEY"), which is what Confidant returns
// and what most TLS stacks read.
func NewKeyAndCSR(req KeyRequest) (keyPEM, csrPEM []byte, err error) {
	var (
		signer crypto.Signer
		block  *pem.Block
	)
	switch req.KeyType {
	case "", KeyRSA:
		bits := req.RSABits
		if bits == 0 {
			bits = DefaultRSABits
		}
		k, err := rsa.GenerateKey(rand.Reader, bits)
		if err != nil {
			return nil, nil, err
		}
		signer, block = k, &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}
	case KeyECDSA:
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return nil, nil, err
		}
		signer, block = k, &pem.Block{Type: "EC PRIVATE KEY", Bytes: der}
	default:
		return nil, nil, fmt.Errorf("ca: key type %q is not %s or %s", req.KeyType, KeyRSA, KeyECDSA)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: req.Subject, DNSNames: req.DNSNames, IPAddresses: req.IPAddresses, URIs: req.URIs,
	}, signer)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(block), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// leafTemplate is the end-entity certificate a CSR asks for: subject and SANs copied from the CSR,
// not a CA, usable for TLS server and client authentication (the uses ACM PCA's
// EndEntityCertificate template and Confidant's custom CA give).
func leafTemplate(csr *x509.CertificateRequest, notBefore, notAfter time.Time) (*x509.Certificate, error) {
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	return &x509.Certificate{
		SerialNumber:          serial,
		Subject:               csr.Subject,
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		BasicConstraintsValid: true,
		IsCA:                  false,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:              csr.DNSNames,
		IPAddresses:           csr.IPAddresses,
		EmailAddresses:        csr.EmailAddresses,
		URIs:                  csr.URIs,
	}, nil
}

// randomSerial is a positive 128-bit serial: unpredictable, as the CA/Browser baseline asks.
func randomSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}

// encodeCerts PEM-encodes certificates in order.
func encodeCerts(certs ...*x509.Certificate) string {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return string(out)
}

// ParseCertificates decodes every PEM CERTIFICATE block of data, in order.
func ParseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, c)
	}
	return certs, nil
}
