package internaltls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/secretfile"
)

// Files of the generated PKI, in its folder.
const (
	caCertFile = "ca.crt"
	caKeyFile  = "ca.key"
	lockFile   = ".lock"
)

// Lifetimes of generated certificates. A leaf within renewBefore of its end is issued again at start.
const (
	caLifetime   = 10 * 365 * 24 * time.Hour
	leafLifetime = 2 * 365 * 24 * time.Hour
	renewBefore  = 30 * 24 * time.Hour
)

// leaf describes one generated certificate.
type leaf struct {
	file  string // base name: <file>.crt and <file>.key
	name  string
	usage []x509.ExtKeyUsage
	local bool // also valid for localhost and the loopback addresses
}

// Key usages of a leaf that serves and dials, and of one that only dials.
var (
	serverUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	clientUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
)

var leaves = []leaf{
	{file: "gateway", name: DefaultGatewayName, usage: serverUsage, local: true},
	{file: "service", name: DefaultServerName, usage: serverUsage, local: true},
	{file: "client", name: ClientName, usage: clientUsage},
}

// pki is the generated material a process uses.
type pki struct {
	pool             *x509.CertPool
	gateway, service tls.Certificate
}

// ensurePKI loads the PKI in dir, creating the CA and any missing or expiring leaf first. An
// exclusive lock on dir/.lock makes concurrent starts on one folder agree on one CA.
func ensurePKI(dir string, logger *zap.Logger) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return nil, fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()

	ca, caKey, err := ensureCA(dir, logger)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	out := &pki{pool: pool}
	for _, l := range leaves {
		pair, err := ensureLeaf(dir, l, ca, caKey, pool, logger)
		if err != nil {
			return nil, err
		}
		switch l.file {
		case "gateway":
			out.gateway = pair
		case "service":
			out.service = pair
		}
	}
	return out, nil
}

func ensureCA(dir string, logger *zap.Logger) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPath, keyPath := filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile)
	_, certErr := os.Stat(certPath)
	_, keyErr := os.Stat(keyPath)
	if errors.Is(certErr, os.ErrNotExist) && errors.Is(keyErr, os.ErrNotExist) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		now := time.Now()
		tmpl := &x509.Certificate{
			SerialNumber: serial(), Subject: pkix.Name{CommonName: "gantry internal CA", Organization: []string{"gantry"}},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(caLifetime),
			IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			return nil, nil, err
		}
		if err := writeKey(keyPath, key); err != nil {
			return nil, nil, err
		}
		if err := writeCert(certPath, der); err != nil {
			return nil, nil, err
		}
		logger.Info("created the internal gRPC CA", zap.String("dir", dir))
	}
	pair, err := loadPair(certPath, keyPath, nil)
	if err != nil {
		return nil, nil, err
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || !pair.Leaf.IsCA {
		return nil, nil, fmt.Errorf("%s: not a CA certificate with an ECDSA key", certPath)
	}
	return pair.Leaf, key, nil
}

func ensureLeaf(dir string, l leaf, ca *x509.Certificate, caKey *ecdsa.PrivateKey, pool *x509.CertPool, logger *zap.Logger) (tls.Certificate, error) {
	certPath, keyPath := filepath.Join(dir, l.file+".crt"), filepath.Join(dir, l.file+".key")
	_, certErr := os.Stat(certPath)
	_, keyErr := os.Stat(keyPath)
	missing := errors.Is(certErr, os.ErrNotExist) && errors.Is(keyErr, os.ErrNotExist)
	if !missing {
		pair, err := loadPair(certPath, keyPath, pool)
		if err == nil && time.Until(pair.Leaf.NotAfter) > renewBefore {
			return pair, nil
		}
		if err != nil && !errors.Is(err, errExpired) {
			return tls.Certificate{}, err
		}
		logger.Info("renewing an internal gRPC certificate", zap.String("file", certPath))
	}
	return issueLeaf(dir, l, ca, caKey, pool)
}

// issueLeaf issues l's certificate and key into dir, replacing what is there.
func issueLeaf(dir string, l leaf, ca *x509.Certificate, caKey *ecdsa.PrivateKey, pool *x509.CertPool) (tls.Certificate, error) {
	certPath, keyPath := filepath.Join(dir, l.file+".crt"), filepath.Join(dir, l.file+".key")
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	notAfter := now.Add(leafLifetime)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: l.name, Organization: []string{"gantry"}},
		NotBefore: now.Add(-time.Hour), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: l.usage, DNSNames: []string{l.name},
	}
	if l.local {
		tmpl.DNSNames = append(tmpl.DNSNames, "localhost")
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := writeKey(keyPath, key); err != nil {
		return tls.Certificate{}, err
	}
	if err := writeCert(certPath, der); err != nil {
		return tls.Certificate{}, err
	}
	return loadPair(certPath, keyPath, pool)
}

var errExpired = errors.New("certificate expired or not yet valid")

// loadPair reads a key pair, refusing a key file other users can read, a key that does not match
// its certificate, a certificate out of its validity period and, with pool, one the CA did not sign.
func loadPair(certPath, keyPath string, pool *x509.CertPool) (tls.Certificate, error) {
	if err := secretfile.CheckPrivate(keyPath); err != nil {
		return tls.Certificate{}, err
	}
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s, %s: %w", certPath, keyPath, err)
	}
	leafCert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s: %w", certPath, err)
	}
	pair.Leaf = leafCert
	now := time.Now()
	if now.Before(leafCert.NotBefore) || now.After(leafCert.NotAfter) {
		return pair, fmt.Errorf("%s: %w (valid %s to %s)", certPath, errExpired, leafCert.NotBefore.Format(time.RFC3339), leafCert.NotAfter.Format(time.RFC3339))
	}
	if pool != nil {
		inter := x509.NewCertPool()
		for _, der := range pair.Certificate[1:] {
			if c, err := x509.ParseCertificate(der); err == nil {
				inter.AddCert(c)
			}
		}
		if _, err := leafCert.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			return tls.Certificate{}, fmt.Errorf("%s is not signed by the internal CA: %w", certPath, err)
		}
	}
	return pair, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writeFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

func writeCert(path string, der []byte) error {
	// Certificates are public, but everything in the data folder is 0600.
	return writeFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
}

// writeFile replaces path atomically: a reader never sees half a file.
func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// CheckDir checks, read-only, the generated TLS material in dir as Load would meet it, for the offline
// gantry check: a CA that is there must load (key mode 0600, a CA certificate with an ECDSA key, in
// its validity period); a leaf that is there must load with its key (mode 0600) and be signed by that
// CA (an expired leaf passes: the start renews it); a leaf without its CA is refused (the start would
// make a new CA that did not sign it). A folder, CA or leaf that is not there passes: the start makes
// it. It never creates or writes a file, and returns what passed.
func CheckDir(dir string) (string, error) {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return "none yet; gantry creates the internal CA and certificates at start", nil
	}
	certPath, keyPath := filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile)
	_, certErr := os.Stat(certPath)
	_, keyErr := os.Stat(keyPath)
	var pool *x509.CertPool
	if !errors.Is(certErr, os.ErrNotExist) || !errors.Is(keyErr, os.ErrNotExist) {
		pair, err := loadPair(certPath, keyPath, nil)
		if err != nil {
			return "", err
		}
		if _, ok := pair.PrivateKey.(*ecdsa.PrivateKey); !ok || !pair.Leaf.IsCA {
			return "", fmt.Errorf("%s: not a CA certificate with an ECDSA key", certPath)
		}
		pool = x509.NewCertPool()
		pool.AddCert(pair.Leaf)
	}
	for _, l := range leaves {
		certPath, keyPath := filepath.Join(dir, l.file+".crt"), filepath.Join(dir, l.file+".key")
		_, certErr := os.Stat(certPath)
		_, keyErr := os.Stat(keyPath)
		if errors.Is(certErr, os.ErrNotExist) && errors.Is(keyErr, os.ErrNotExist) {
			continue
		}
		if pool == nil {
			return "", fmt.Errorf("%s exists but the internal CA (%s) does not: gantry would make a new CA that did not sign it; restore the CA from the backup of this folder", certPath, filepath.Join(dir, caCertFile))
		}
		if _, err := loadPair(certPath, keyPath, pool); err != nil && !errors.Is(err, errExpired) {
			return "", err
		}
	}
	return "the CA and certificates load, keys mode 0600", nil
}
