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
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/secretfile"
)

// Files of a generated local CA, inside LocalConfig.Dir.
const (
	localCertFile  = "ca.crt"    // the issuing CA
	localKeyFile   = "ca.key"    // its key, 0600
	localChainFile = "chain.pem" // the certificates above it (the root), absent for a root CA
	localRootKey   = "root.key"  // the root's key when an intermediate issues, 0600
)

// Lifetimes of generated CA certificates. The root outlives the intermediate so the intermediate can
// be re-issued under the same trust anchor.
const (
	localRootLifetime         = 10 * 365 * 24 * time.Hour
	localIntermediateLifetime = 5 * 365 * 24 * time.Hour
	// clockSkew backdates certificates so a peer whose clock is slightly behind accepts them.
	clockSkew = 5 * time.Minute
)

// LocalConfig configures a local CA: either configured PEM files, or a CA generated into Dir on first
// start and loaded from there afterwards.
type LocalConfig struct {
	// Name is the CA's friendly name; it goes into generated subjects and logs.
	Name string
	// Dir holds the generated CA (created 0700). Ignored when CertFile is set.
	Dir string
	// CertFile and KeyFile are a configured issuing CA certificate and its unencrypted private key
	// (PKCS#1, SEC 1 or PKCS#8 PEM); ChainFile, optional, holds the certificates above it up to the
	// root.
	CertFile, KeyFile, ChainFile string
	// Intermediate makes a generated CA two-level: a self-signed root and an intermediate that
	// issues, so certificate chains are real chains. Without it the root issues directly.
	Intermediate bool
}

// Local is a CA whose key is in a file. It is safe for concurrent use.
type Local struct {
	cert  *x509.Certificate
	key   crypto.Signer
	chain []*x509.Certificate // above cert, up to the root
	now   func() time.Time
}

var _ Authority = (*Local)(nil)

// OpenLocal loads the configured or previously generated CA, generating it when Dir holds none.
func OpenLocal(cfg LocalConfig, logger *zap.Logger) (*Local, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	if cfg.CertFile != "" || cfg.KeyFile != "" {
		if cfg.CertFile == "" || cfg.KeyFile == "" {
			return nil, errors.New("ca: a configured local CA needs both a certificate file and a key file")
		}
		return loadLocal(cfg.CertFile, cfg.KeyFile, cfg.ChainFile)
	}
	if cfg.Dir == "" {
		return nil, errors.New("ca: local CA has neither files nor a folder")
	}
	certPath := filepath.Join(cfg.Dir, localCertFile)
	if _, err := os.Stat(certPath); err == nil {
		chain := filepath.Join(cfg.Dir, localChainFile)
		if _, err := os.Stat(chain); errors.Is(err, os.ErrNotExist) {
			chain = ""
		}
		return loadLocal(certPath, filepath.Join(cfg.Dir, localKeyFile), chain)
	}
	l, err := generateLocal(cfg)
	if err != nil {
		return nil, fmt.Errorf("ca: generate local CA %q: %w", cfg.Name, err)
	}
	logger.Info("generated a local certificate authority", zap.String("ca", cfg.Name), zap.String("dir", cfg.Dir),
		zap.Bool("intermediate", cfg.Intermediate), zap.String("subject", l.cert.Subject.String()))
	return l, nil
}

func loadLocal(certFile, keyFile, chainFile string) (*Local, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	certs, err := ParseCertificates(certPEM)
	if err != nil || len(certs) == 0 {
		return nil, fmt.Errorf("ca: %s holds no PEM certificate (%v)", certFile, err)
	}
	cert := certs[0]
	if !cert.IsCA {
		return nil, fmt.Errorf("ca: the certificate in %s is not a CA certificate", certFile)
	}
	if err := secretfile.CheckPrivate(keyFile); err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	key, err := parsePrivateKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("ca: %s: %w", keyFile, err)
	}
	if !publicKeysEqual(key.Public(), cert.PublicKey) {
		return nil, fmt.Errorf("ca: the key in %s does not belong to the certificate in %s", keyFile, certFile)
	}
	// Certificates after the first in the certificate file are chain too, as in a full-chain file.
	chain := certs[1:]
	if chainFile != "" {
		data, err := os.ReadFile(chainFile)
		if err != nil {
			return nil, fmt.Errorf("ca: %w", err)
		}
		more, err := ParseCertificates(data)
		if err != nil {
			return nil, fmt.Errorf("ca: %s: %w", chainFile, err)
		}
		chain = append(chain, more...)
	}
	return &Local{cert: cert, key: key, chain: chain, now: time.Now}, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	eq, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(b)
}

func parsePrivateKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM private key")
	}
	if block.Headers["Proc-Type"] != "" {
		return nil, errors.New("encrypted private keys are not supported; decrypt it first")
	}
	switch block.Type {
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(block.Bytes)
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, err
		}
		signer, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("unsupported private key type %T", k)
		}
		return signer, nil
	}
	return nil, fmt.Errorf("unsupported PEM block %q (want a private key)", block.Type)
}

// generateLocal creates the CA files. Keys are ECDSA P-256: quick to generate on first start, and
// they sign RSA and ECDSA leaves alike.
func generateLocal(cfg LocalConfig) (*Local, error) {
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	now := time.Now()
	rootKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	root, err := caCertificate(pkix.Name{Organization: []string{"gantry"}, CommonName: "gantry " + cfg.Name + " root CA"},
		now, localRootLifetime, rootKey, nil, nil, !cfg.Intermediate)
	if err != nil {
		return nil, err
	}
	l := &Local{cert: root, key: rootKey, now: time.Now}
	if cfg.Intermediate {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		inter, err := caCertificate(pkix.Name{Organization: []string{"gantry"}, CommonName: "gantry " + cfg.Name + " CA"},
			now, localIntermediateLifetime, key, root, rootKey, true)
		if err != nil {
			return nil, err
		}
		if err := writeKey(filepath.Join(cfg.Dir, localRootKey), rootKey); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(cfg.Dir, localChainFile), []byte(encodeCerts(root)), 0o644); err != nil {
			return nil, err
		}
		l = &Local{cert: inter, key: key, chain: []*x509.Certificate{root}, now: time.Now}
	}
	if err := writeKey(filepath.Join(cfg.Dir, localKeyFile), l.key.(*ecdsa.PrivateKey)); err != nil {
		return nil, err
	}
	// The certificate is written last: its presence is what marks the CA as complete on next start.
	if err := os.WriteFile(filepath.Join(cfg.Dir, localCertFile), []byte(encodeCerts(l.cert)), 0o644); err != nil {
		return nil, err
	}
	return l, nil
}

// caCertificate makes a CA certificate for key, self-signed when parent is nil. leafIssuer limits the
// path length to 0: it signs only end-entity certificates.
func caCertificate(subject pkix.Name, now time.Time, lifetime time.Duration, key *ecdsa.PrivateKey,
	parent *x509.Certificate, parentKey crypto.Signer, leafIssuer bool) (*x509.Certificate, error) {
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               subject,
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(lifetime),
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            1,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	if leafIssuer {
		tmpl.MaxPathLen, tmpl.MaxPathLenZero = 0, true
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// writeKey writes a private key readable by its owner only, refusing to overwrite one.
func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := pem.Encode(f, &pem.Block{Type: "EC PRIVATE KEY", Bytes: der}); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// Info implements Authority.
func (l *Local) Info(context.Context) (Info, error) {
	return Info{Certificate: encodeCerts(l.cert), Chain: encodeCerts(l.chain...), Tags: map[string]string{}}, nil
}

// Issue implements Authority. The leaf never outlives the CA certificate.
func (l *Local) Issue(_ context.Context, csrPEM []byte, validityDays int) (Issued, error) {
	if validityDays < 1 {
		return Issued{}, fmt.Errorf("ca: validity must be at least 1 day, got %d", validityDays)
	}
	csr, err := ParseCSR(csrPEM)
	if err != nil {
		return Issued{}, err
	}
	if k, ok := csr.PublicKey.(*rsa.PublicKey); ok && k.N.BitLen() < 2048 {
		return Issued{}, fmt.Errorf("%w: RSA keys must have at least 2048 bits", ErrInvalidCSR)
	}
	now := l.now()
	notAfter := now.Add(time.Duration(validityDays) * 24 * time.Hour)
	if notAfter.After(l.cert.NotAfter) {
		notAfter = l.cert.NotAfter
	}
	tmpl, err := leafTemplate(csr, now.Add(-clockSkew), notAfter)
	if err != nil {
		return Issued{}, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, l.cert, csr.PublicKey, l.key)
	if err != nil {
		return Issued{}, fmt.Errorf("ca: sign: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return Issued{}, err
	}
	return Issued{Certificate: encodeCerts(leaf), Chain: encodeCerts(append([]*x509.Certificate{l.cert}, l.chain...)...)}, nil
}
