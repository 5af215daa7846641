// Package workload verifies the identity a workload (a service, a pod, a CI job) proves without a
// kmsauth token and without the server's keys: a client certificate whose URI SAN is a SPIFFE ID
// spiffe://<trust-domain>/service/<name>, or (jwt.go) a signed JWT of a configured issuer. Each
// verifier returns the service name the credential proves; the caller maps it to its principals.
package workload

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"
)

// ErrRefused marks a credential that was presented and is not accepted; its message says why.
var ErrRefused = errors.New("workload credential refused")

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrRefused}, args...)...)
}

// ServiceName is the syntax of a service name a workload credential may prove: what gantry accepts
// as a kmsauth "from" of a service, without characters that would be ambiguous in a path or a glob.
var ServiceName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// trustDomainSyntax is a SPIFFE trust domain name (lower case).
var trustDomainSyntax = regexp.MustCompile(`^[a-z0-9._-]{1,255}$`)

// SPIFFEID is the URI SAN that names service in trustDomain.
func SPIFFEID(trustDomain, service string) string {
	return "spiffe://" + trustDomain + "/service/" + service
}

// ServiceOfSPIFFEID returns the service a SPIFFE ID of trustDomain names, or "" when it is not one.
// The ID is read as the SPIFFE specification writes it: the trust domain exactly (lower case: the
// spec allows no other), a path with no percent-encoding (RawPath is set when the certificate's
// escaping is not the plain one, as %62 for b), no user, port, query or fragment. Two spellings of
// one identity would otherwise authenticate as one service while a policy or an audit that compares
// the strings sees two.
func ServiceOfSPIFFEID(trustDomain string, u *url.URL) string {
	if u == nil || u.Scheme != "spiffe" || u.Opaque != "" || u.Host != trustDomain || u.User != nil ||
		u.RawPath != "" || strings.Contains(u.String(), "%") ||
		u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.RawFragment != "" || u.Port() != "" {
		return ""
	}
	name, ok := strings.CutPrefix(u.Path, "/service/")
	if !ok || !ServiceName.MatchString(name) {
		return ""
	}
	return name
}

// CertVerifier checks client certificates: chained to one of the roots, valid now, usable for
// client authentication, not revoked, and carrying exactly one SPIFFE ID of the trust domain.
type CertVerifier struct {
	roots       *x509.CertPool
	trustDomain string
	revoked     *RevokedSerials // nil: no revocation list
	now         func() time.Time
}

// CertConfig configures a CertVerifier.
type CertConfig struct {
	// CAPEM are the PEM certificates of the CAs whose certificates identify workloads (issuing CAs
	// and their roots): a chain must end at one of them.
	CAPEM []byte
	// TrustDomain is the host of the accepted SPIFFE IDs.
	TrustDomain string
	// RevokedFile, when set, lists revoked serial numbers (see RevokedSerials).
	RevokedFile string
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// NewCertVerifier returns a verifier for cfg.
func NewCertVerifier(cfg CertConfig) (*CertVerifier, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cfg.CAPEM) {
		return nil, errors.New("workload: no PEM CA certificate to trust client certificates with")
	}
	if !trustDomainSyntax.MatchString(strings.ToLower(cfg.TrustDomain)) {
		return nil, fmt.Errorf("workload: trust domain %q is not a SPIFFE trust domain (letters, digits, '.', '-', '_')", cfg.TrustDomain)
	}
	v := &CertVerifier{roots: pool, trustDomain: strings.ToLower(cfg.TrustDomain), now: cfg.Now}
	if v.now == nil {
		v.now = time.Now
	}
	if cfg.RevokedFile != "" {
		v.revoked = &RevokedSerials{File: cfg.RevokedFile}
		if _, err := v.revoked.load(); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// Pool is the certificate pool of the trusted CAs, for a TLS listener's ClientCAs.
func (v *CertVerifier) Pool() *x509.CertPool { return v.roots }

// TrustDomain is the trust domain of accepted SPIFFE IDs.
func (v *CertVerifier) TrustDomain() string { return v.trustDomain }

// Verify checks a presented chain (leaf first; the others are intermediates the client sent) and
// returns the service the leaf names. Every refusal wraps ErrRefused and says why in words a client
// can act on; none quotes more of the certificate than its serial number and names.
func (v *CertVerifier) Verify(chain []*x509.Certificate) (string, error) {
	if len(chain) == 0 {
		return "", refused("no client certificate")
	}
	leaf := chain[0]
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	now := v.now()
	if now.After(leaf.NotAfter) {
		return "", refused("client certificate %s expired at %s: renew it before it expires (gantry certs renew), or issue a new one",
			serialHex(leaf.SerialNumber), leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(leaf.NotBefore) {
		return "", refused("client certificate %s is not valid before %s", serialHex(leaf.SerialNumber), leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: v.roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return "", refused("client certificate %s is not issued by a CA trusted for workloads: %v", serialHex(leaf.SerialNumber), err)
	}
	if v.revoked != nil {
		revoked, err := v.revoked.Contains(leaf.SerialNumber)
		if err != nil {
			// A list that cannot be read refuses: a revocation must not be lost to a bad edit.
			return "", fmt.Errorf("workload: revocation list: %w", err)
		}
		if revoked {
			return "", refused("client certificate %s is revoked", serialHex(leaf.SerialNumber))
		}
	}
	service := ""
	for _, u := range leaf.URIs {
		if u.Scheme != "spiffe" {
			continue
		}
		name := ServiceOfSPIFFEID(v.trustDomain, u)
		if name == "" {
			return "", refused("client certificate %s names %s, not spiffe://%s/service/<name>", serialHex(leaf.SerialNumber), u, v.trustDomain)
		}
		if service != "" && service != name {
			return "", refused("client certificate %s names more than one service", serialHex(leaf.SerialNumber))
		}
		service = name
	}
	if service == "" {
		return "", refused("client certificate %s has no URI SAN spiffe://%s/service/<name>", serialHex(leaf.SerialNumber), v.trustDomain)
	}
	return service, nil
}

func serialHex(n *big.Int) string {
	if n == nil {
		return "?"
	}
	return fmt.Sprintf("%x", n)
}

// EncodeChain is the gateway's form of a verified client chain in one metadata value: the DER of
// each certificate, leaf first, in standard base64, joined by commas.
func EncodeChain(chain []*x509.Certificate) string {
	parts := make([]string, len(chain))
	for i, c := range chain {
		parts[i] = base64.StdEncoding.EncodeToString(c.Raw)
	}
	return strings.Join(parts, ",")
}

// maxChain bounds a forwarded chain: no real chain is longer.
const maxChain = 8

// DecodeChain parses EncodeChain's form.
func DecodeChain(s string) ([]*x509.Certificate, error) {
	parts := strings.Split(s, ",")
	if len(parts) > maxChain {
		return nil, refused("client certificate chain of %d certificates is too long", len(parts))
	}
	out := make([]*x509.Certificate, 0, len(parts))
	for _, p := range parts {
		der, err := base64.StdEncoding.DecodeString(strings.TrimSpace(p))
		if err != nil {
			return nil, refused("forwarded client certificate is not base64")
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, refused("forwarded client certificate does not parse")
		}
		out = append(out, c)
	}
	return out, nil
}

// RevokedSerials is a revocation list an operator edits: one serial number per line, in hex as
// `openssl x509 -serial` prints it (with or without "serial=" and colons); # starts a comment. The
// file is read at every check and parsed again whenever its content changes (its SHA-256), so a
// revocation counts from the next request on, without a restart, however the file was replaced: a
// copy that keeps the size and modification time (cp -p, rsync -t) is seen too. It is a few lines;
// reading it costs microseconds beside the certificate's verification.
type RevokedSerials struct {
	File string

	mu      sync.Mutex
	digest  [sha256.Size]byte
	serials map[string]bool
}

// Contains reports whether serial is listed.
func (r *RevokedSerials) Contains(serial *big.Int) (bool, error) {
	set, err := r.load()
	if err != nil {
		return false, err
	}
	return set[serialHex(serial)], nil
}

func (r *RevokedSerials) load() (map[string]bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	data, err := os.ReadFile(r.File)
	if err != nil {
		return nil, err
	}
	digest := sha256.Sum256(data)
	if r.serials != nil && digest == r.digest {
		return r.serials, nil
	}
	set := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		line = strings.TrimPrefix(strings.ToLower(line), "serial=")
		line = strings.ReplaceAll(line, ":", "")
		v, ok := new(big.Int).SetString(line, 16)
		if !ok {
			return nil, fmt.Errorf("%s line %d: %q is not a hex serial number", r.File, n, line)
		}
		set[serialHex(v)] = true
	}
	r.serials, r.digest = set, digest
	return set, nil
}
