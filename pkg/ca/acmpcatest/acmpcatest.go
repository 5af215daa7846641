// Package acmpcatest is an in-memory fake of AWS ACM Private CA that speaks the real wire protocol
// (JSON 1.1 over HTTP, X-Amz-Target: ACMPrivateCA.*), so tests run the production AWS SDK code —
// serialisation, error decoding, pagination and the GetCertificate polling — without an AWS account.
//
// It answers IssueCertificate, GetCertificate, GetCertificateAuthorityCertificate and ListTags. Each
// CA is a subordinate CA under its own root, like a typical ACM hierarchy, so chains are real chains.
// Issued certificates follow ACM's EndEntityCertificate/V1 template. Signatures of requests are not
// checked.
package acmpcatest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/awstest"
)

// The fake's region and account, as they appear in its ARNs.
const (
	Region    = "us-east-1"
	AccountID = "111122223333"
)

const (
	arnPrefix      = "arn:aws:acm-pca:" + Region + ":" + AccountID + ":certificate-authority/"
	targetPrefix   = "ACMPrivateCA."
	defaultTagPage = 50
)

// Server is a running fake ACM PCA endpoint. Its methods are safe for concurrent use.
type Server struct {
	srv                  *httptest.Server
	*awstest.JSONService // dispatch, FailNext and Requests

	mu      sync.Mutex
	cas     map[string]*authority // by ARN
	certs   map[string]*issued    // by certificate ARN
	tokens  map[string]string     // idempotency token + CA ARN → certificate ARN
	pending int
	last    *issued
	tagPage int
}

type authority struct {
	arn  string
	cert *x509.Certificate
	key  crypto.Signer
	root *x509.Certificate
	tags map[string]string
}

type issued struct {
	cert        *x509.Certificate
	chain       string
	pendingLeft int
	validity    int64
	algorithm   string
	template    string
}

// NewServer starts a fake with no CAs. Close it when done.
func NewServer() *Server {
	s := &Server{cas: map[string]*authority{}, certs: map[string]*issued{}, tokens: map[string]string{}, tagPage: defaultTagPage}
	s.JSONService = awstest.NewJSONService(&s.mu, targetPrefix, map[string]awstest.Operation{
		"IssueCertificate":                   s.issueCertificate,
		"GetCertificate":                     s.getCertificate,
		"GetCertificateAuthorityCertificate": s.getCACertificate,
		"ListTags":                           s.listTags,
	})
	s.srv = httptest.NewServer(s.JSONService)
	return s
}

// URL is the endpoint to give the SDK (BaseEndpoint).
func (s *Server) URL() string { return s.srv.URL }

// Close stops the server; later requests fail to connect, as when AWS is unreachable.
func (s *Server) Close() { s.srv.Close() }

// CreateCA adds an active subordinate CA (RSA 2048, under its own root) with tags and returns its
// ARN.
func (s *Server) CreateCA(name string, tags map[string]string) string {
	rootKey := mustRSA()
	root := mustCert(&x509.Certificate{Subject: pkix.Name{CommonName: name + " root"}, IsCA: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}, nil, rootKey, rootKey, 3650)
	key := mustRSA()
	cert := mustCert(&x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}, root, key, rootKey, 1825)
	a := &authority{arn: arnPrefix + newID(), cert: cert, key: key, root: root, tags: map[string]string{}}
	for k, v := range tags {
		a.tags[k] = v
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cas[a.arn] = a
	return a.arn
}

// RootPEM is the root certificate above a CA, to verify issued chains against.
func (s *Server) RootPEM(caARN string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return encode(s.cas[caARN].root)
}

// PendingPolls makes each certificate issued from now on answer RequestInProgressException to its
// first n GetCertificate calls, as ACM does while it signs.
func (s *Server) PendingPolls(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = n
}

// TagPageSize caps the tags in one ListTags answer, to test pagination.
func (s *Server) TagPageSize(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tagPage = n
}

// LastIssued reports the validity (days), signing algorithm and template ARN of the most recent
// IssueCertificate that succeeded for any CA, for tests that check what the client sent.
func (s *Server) LastIssued() (validityDays int64, algorithm, template string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	last := s.last
	if last == nil {
		return 0, "", ""
	}
	return last.validity, last.algorithm, last.template
}

func (s *Server) findCA(arn string) (*authority, *awstest.Error) {
	if !strings.HasPrefix(arn, arnPrefix) {
		return nil, awstest.ClientError("InvalidArnException", "invalid ARN %q", arn)
	}
	a, ok := s.cas[arn]
	if !ok {
		return nil, awstest.ClientError("ResourceNotFoundException", "certificate authority %s does not exist", arn)
	}
	return a, nil
}

var algorithms = map[string]x509.SignatureAlgorithm{
	"SHA256WITHRSA": x509.SHA256WithRSA, "SHA384WITHRSA": x509.SHA384WithRSA, "SHA512WITHRSA": x509.SHA512WithRSA,
}

func (s *Server) issueCertificate(body []byte) (any, *awstest.Error) {
	var in struct {
		CertificateAuthorityArn string
		Csr                     []byte
		SigningAlgorithm        string
		TemplateArn             string
		IdempotencyToken        string
		Validity                *struct {
			Type  string
			Value int64
		}
	}
	if e := awstest.Decode(body, &in); e != nil {
		return nil, e
	}
	a, e := s.findCA(in.CertificateAuthorityArn)
	if e != nil {
		return nil, e
	}
	alg, ok := algorithms[in.SigningAlgorithm]
	if !ok {
		return nil, awstest.ClientError("ValidationException", "SigningAlgorithm %q is not valid for an RSA CA", in.SigningAlgorithm)
	}
	if in.Validity == nil || in.Validity.Type != "DAYS" || in.Validity.Value < 1 {
		return nil, awstest.ClientError("ValidationException", "Validity must be a positive number of DAYS (this fake supports DAYS only)")
	}
	if len(in.IdempotencyToken) > 36 {
		return nil, awstest.ClientError("ValidationException", "IdempotencyToken must be at most 36 characters")
	}
	if in.IdempotencyToken != "" {
		if arn, ok := s.tokens[in.CertificateAuthorityArn+"/"+in.IdempotencyToken]; ok {
			return struct{ CertificateArn string }{arn}, nil
		}
	}
	block, _ := pem.Decode(in.Csr)
	if block == nil {
		return nil, awstest.ClientError("MalformedCSRException", "the CSR is not PEM")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil || csr.CheckSignature() != nil {
		return nil, awstest.ClientError("MalformedCSRException", "the CSR cannot be parsed or its signature is wrong")
	}
	now := time.Now()
	notAfter := now.Add(time.Duration(in.Validity.Value) * 24 * time.Hour)
	if notAfter.After(a.cert.NotAfter) {
		return nil, awstest.ClientError("ValidationException", "the validity exceeds the CA's")
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: csr.Subject, NotBefore: now.Add(-time.Minute), NotAfter: notAfter,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:              csr.DNSNames, IPAddresses: csr.IPAddresses, EmailAddresses: csr.EmailAddresses, URIs: csr.URIs,
		SignatureAlgorithm: alg,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, csr.PublicKey, a.key)
	if err != nil {
		return nil, awstest.ClientError("MalformedCSRException", "cannot sign: %v", err)
	}
	leaf, _ := x509.ParseCertificate(der)
	arn := a.arn + "/certificate/" + hex.EncodeToString(serial.Bytes())
	s.last = &issued{cert: leaf, chain: encode(a.cert) + encode(a.root), pendingLeft: s.pending,
		validity: in.Validity.Value, algorithm: in.SigningAlgorithm, template: in.TemplateArn}
	s.certs[arn] = s.last
	if in.IdempotencyToken != "" {
		s.tokens[in.CertificateAuthorityArn+"/"+in.IdempotencyToken] = arn
	}
	return struct{ CertificateArn string }{arn}, nil
}

func (s *Server) getCertificate(body []byte) (any, *awstest.Error) {
	var in struct{ CertificateArn, CertificateAuthorityArn string }
	if e := awstest.Decode(body, &in); e != nil {
		return nil, e
	}
	if _, e := s.findCA(in.CertificateAuthorityArn); e != nil {
		return nil, e
	}
	c, ok := s.certs[in.CertificateArn]
	if !ok || !strings.HasPrefix(in.CertificateArn, in.CertificateAuthorityArn+"/") {
		return nil, awstest.ClientError("ResourceNotFoundException", "certificate %s does not exist", in.CertificateArn)
	}
	if c.pendingLeft > 0 {
		c.pendingLeft--
		return nil, awstest.ClientError("RequestInProgressException", "the certificate is being issued")
	}
	return struct{ Certificate, CertificateChain string }{encode(c.cert), c.chain}, nil
}

func (s *Server) getCACertificate(body []byte) (any, *awstest.Error) {
	var in struct{ CertificateAuthorityArn string }
	if e := awstest.Decode(body, &in); e != nil {
		return nil, e
	}
	a, e := s.findCA(in.CertificateAuthorityArn)
	if e != nil {
		return nil, e
	}
	return struct{ Certificate, CertificateChain string }{encode(a.cert), encode(a.root)}, nil
}

func (s *Server) listTags(body []byte) (any, *awstest.Error) {
	var in struct {
		CertificateAuthorityArn string
		MaxResults              int
		NextToken               string
	}
	if e := awstest.Decode(body, &in); e != nil {
		return nil, e
	}
	a, e := s.findCA(in.CertificateAuthorityArn)
	if e != nil {
		return nil, e
	}
	keys := make([]string, 0, len(a.tags))
	for k := range a.tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	start := 0
	if in.NextToken != "" {
		n, err := strconv.Atoi(in.NextToken)
		if err != nil || n < 0 || n > len(keys) {
			return nil, awstest.ClientError("InvalidNextTokenException", "bad NextToken")
		}
		start = n
	}
	size := s.tagPage
	if in.MaxResults > 0 && in.MaxResults < size {
		size = in.MaxResults
	}
	end := min(start+size, len(keys))
	type tag struct{ Key, Value string }
	out := struct {
		Tags      []tag
		NextToken string `json:",omitempty"`
	}{Tags: []tag{}}
	for _, k := range keys[start:end] {
		out.Tags = append(out.Tags, tag{k, a.tags[k]})
	}
	if end < len(keys) {
		out.NextToken = strconv.Itoa(end)
	}
	return out, nil
}

func encode(c *x509.Certificate) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}))
}

func mustRSA() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
}

func mustCert(tmpl, parent *x509.Certificate, key, parentKey crypto.Signer, days int) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	tmpl.SerialNumber = serial
	tmpl.BasicConstraintsValid = true
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(time.Duration(days) * 24 * time.Hour)
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		panic(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		panic(err)
	}
	return c
}

func newID() string {
	var b [16]byte
	rand.Read(b[:])
	sum := sha256.Sum256(b[:])
	h := hex.EncodeToString(sum[:16])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
