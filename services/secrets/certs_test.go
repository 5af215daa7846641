package secrets

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/acmpca"

	"github.com/gantry-dev/gantry/pkg/audit"
	"github.com/gantry-dev/gantry/pkg/ca"
	"github.com/gantry-dev/gantry/pkg/ca/acmpcatest"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
)

// countingCA counts issuances and, when gate is set, holds each one until the gate closes.
type countingCA struct {
	ca.Authority
	mu   sync.Mutex
	n    int
	gate chan struct{}
}

func (c *countingCA) Issue(ctx context.Context, csr []byte, days int) (ca.Issued, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	if c.gate != nil {
		<-c.gate
	}
	return c.Authority.Issue(ctx, csr, days)
}

func (c *countingCA) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// certService is a Service with only what the certificate routes use, under the default ACL.
func certService(t *testing.T, cfg CertConfig, authorities map[string]ca.Authority) *Service {
	t.Helper()
	certs, err := newCertificates(cfg, authorities)
	if err != nil {
		t.Fatal(err)
	}
	logger := logtest.New(t)
	return &Service{certs: certs, acl: DefaultACL{CertificateAllowed: certs.serviceMayGet}, cfg: Config{Certs: cfg},
		logger: logger, audit: audit.Discard(), now: func() time.Time { return time.Now().UTC() }}
}

func asService(name string) context.Context {
	return WithPrincipal(context.Background(), Principal{Name: name, Type: "service", AuthType: "kms"})
}

// providers returns a local CA and an ACM Private CA (against the in-repo fake), so every test of the
// domain runs against both.
func providers(t *testing.T) map[string]ca.Authority {
	t.Helper()
	local, err := ca.OpenLocal(ca.LocalConfig{Name: "local", Dir: filepath.Join(t.TempDir(), "ca"), Intermediate: true}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := acmpcatest.NewServer()
	t.Cleanup(srv.Close)
	client, err := ca.NewACMClient(context.Background(), ca.ACMClientConfig{Region: acmpcatest.Region, Endpoint: srv.URL()},
		func(o *acmpca.Options) {
			o.Credentials = credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", "")
			o.Retryer = aws.NopRetryer{}
		})
	if err != nil {
		t.Fatal(err)
	}
	acm, err := ca.NewACM(client, ca.ACMConfig{ARN: srv.CreateCA("pca", map[string]string{"team": "infra"}), PollInterval: time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]ca.Authority{"local": local, "pca": acm}
}

func certConfig(names ...string) CertConfig {
	cfg := DefaultCertConfig()
	cfg.CAs = names
	cfg.PerCA = map[string]CASettings{}
	for _, n := range names {
		// A service owns <name>.example.com and <name>.internal, and may ask for IP SANs.
		cfg.PerCA[n] = CASettings{MaxValidityDays: 10, DomainRegex: `(?P<service_name>[a-z-]+)\.(?:example\.com|internal)`, AllowIP: true}
	}
	return cfg
}

// checkIssued verifies the leaf against the returned chain for dnsName, and that key (when given)
// is the leaf's key.
func checkIssued(t *testing.T, got IssuedCertificate, dnsName string, maxDays int) *x509.Certificate {
	t.Helper()
	certs, err := ca.ParseCertificates([]byte(got.Certificate + got.Chain))
	if err != nil || len(certs) < 2 {
		t.Fatalf("certificate + chain: %v, %d certificates", err, len(certs))
	}
	leaf, chain := certs[0], certs[1:]
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(chain[len(chain)-1])
	for _, c := range chain[:len(chain)-1] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: dnsName, Roots: roots, Intermediates: inter}); err != nil {
		t.Fatalf("leaf does not verify against its chain: %v", err)
	}
	if leaf.IsCA || leaf.KeyUsage != x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment ||
		!slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}) {
		t.Errorf("not an end-entity TLS certificate: CA %v, usage %b, ext %v", leaf.IsCA, leaf.KeyUsage, leaf.ExtKeyUsage)
	}
	if life := leaf.NotAfter.Sub(leaf.NotBefore); life > time.Duration(maxDays)*24*time.Hour+10*time.Minute {
		t.Errorf("lifetime %v is over the %d-day cap", life, maxDays)
	}
	if got.Key != "" {
		if _, err := tls.X509KeyPair([]byte(got.Certificate), []byte(got.Key)); err != nil {
			t.Errorf("key does not match the certificate: %v", err)
		}
	}
	return leaf
}

func TestCertificateRoutes(t *testing.T) {
	authorities := providers(t)
	s := certService(t, certConfig("local", "pca"), authorities)
	for _, caName := range []string{"local", "pca"} {
		t.Run(caName, func(t *testing.T) {
			api := asService("api")

			view, err := s.GetCA(api, caName)
			if err != nil || view.Name != caName || !strings.Contains(view.Certificate, "BEGIN CERTIFICATE") || view.Chain == "" {
				t.Fatalf("GetCA: %+v, %v", view, err)
			}

			got, err := s.GetCertificate(api, CertificateRequest{CA: caName, CN: "api.example.com", SANs: []string{"api.internal", "10.0.0.1"}, ValidityDays: 400})
			if err != nil {
				t.Fatal(err)
			}
			leaf := checkIssued(t, got, "api.internal", 10)
			if !slices.Equal(leaf.DNSNames, []string{"api.example.com", "api.internal"}) || len(leaf.IPAddresses) != 1 {
				t.Errorf("SANs %v %v", leaf.DNSNames, leaf.IPAddresses)
			}
			if got.Key == "" || !strings.HasPrefix(got.Key, "-----BEGIN RSA PRIVATE KEY-----") {
				t.Errorf("key %.40q, want PKCS#1 RSA", got.Key)
			}
			ec, err := s.GetCertificate(api, CertificateRequest{CA: caName, CN: "api.example.com", ValidityDays: 3, KeyType: ca.KeyECDSA})
			if err != nil {
				t.Fatal(err)
			}
			checkIssued(t, ec, "api.example.com", 3)

			// The client's CSR: CN and SANs come from it; no key comes back.
			_, csr, _ := ca.NewKeyAndCSR(ca.KeyRequest{KeyType: ca.KeyECDSA, Subject: pkix.Name{CommonName: "api.example.com"}, DNSNames: []string{"api.example.com"}})
			signed, err := s.IssueCertificate(api, caName, string(csr), 0)
			if err != nil {
				t.Fatal(err)
			}
			if signed.Key != "" {
				t.Error("a key came back for a client CSR")
			}
			checkIssued(t, signed, "api.example.com", 10)

			// Services get only the names their CA's pattern gives them; users none by default.
			_, other, _ := ca.NewKeyAndCSR(ca.KeyRequest{KeyType: ca.KeyECDSA, Subject: pkix.Name{CommonName: "web.example.com"}})
			user := WithPrincipal(context.Background(), Principal{Name: "alice", Type: "user"})
			for name, call := range map[string]func() error{
				"other service GET": func() error {
					_, err := s.GetCertificate(api, CertificateRequest{CA: caName, CN: "web.example.com"})
					return err
				},
				"pattern not at start": func() error {
					_, err := s.GetCertificate(api, CertificateRequest{CA: caName, CN: "x.api.example.com"})
					return err
				},
				"other service POST": func() error { _, err := s.IssueCertificate(api, caName, string(other), 0); return err },
				"user GET": func() error {
					_, err := s.GetCertificate(user, CertificateRequest{CA: caName, CN: "api.example.com"})
					return err
				},
				"user CA": func() error { _, err := s.GetCA(user, caName); return err },
			} {
				var denied *deniedError
				if err := call(); !errors.As(err, &denied) {
					t.Errorf("%s: %v, want denied", name, err)
				}
			}
		})
	}
}

func TestCertificateBadInput(t *testing.T) {
	s := certService(t, certConfig("local", "pca"), providers(t))
	api := asService("api")
	_, noCN, _ := ca.NewKeyAndCSR(ca.KeyRequest{KeyType: ca.KeyECDSA, DNSNames: []string{"api.example.com"}})
	tests := map[string]struct {
		call func() error
		want any
	}{
		"unknown CA GET":  {func() error { _, err := s.GetCertificate(api, CertificateRequest{CA: "nope", CN: "a"}); return err }, &notFoundError{}},
		"unknown CA POST": {func() error { _, err := s.IssueCertificate(api, "nope", "x", 0); return err }, &notFoundError{}},
		"unknown CA":      {func() error { _, err := s.GetCA(api, "nope"); return err }, &notFoundError{}},
		"missing csr":     {func() error { _, err := s.IssueCertificate(api, "local", " ", 0); return err }, &invalidError{}},
		"undecodable csr": {func() error {
			_, err := s.IssueCertificate(api, "local", "-----BEGIN CERTIFICATE REQUEST-----\nAA==\n-----END CERTIFICATE REQUEST-----", 0)
			return err
		}, &invalidError{}},
		"csr without CN": {func() error { _, err := s.IssueCertificate(api, "local", string(noCN), 0); return err }, &invalidError{}},
		"negative days": {func() error {
			_, err := s.GetCertificate(api, CertificateRequest{CA: "local", CN: "api.example.com", ValidityDays: -1})
			return err
		}, &invalidError{}},
		"bad san": {func() error {
			_, err := s.GetCertificate(api, CertificateRequest{CA: "local", CN: "api.example.com", SANs: []string{"a b"}})
			return err
		}, &invalidError{}},
		"bad key type": {func() error {
			_, err := s.GetCertificate(api, CertificateRequest{CA: "local", CN: "api.example.com", KeyType: "dsa"})
			return err
		}, &invalidError{}},
		"empty cn":        {func() error { _, err := s.GetCertificate(api, CertificateRequest{CA: "local", CN: ""}); return err }, &invalidError{}},
		"control char cn": {func() error { _, err := s.GetCertificate(api, CertificateRequest{CA: "local", CN: "a\nb"}); return err }, &invalidError{}},
		"too long cn": {func() error {
			_, err := s.GetCertificate(api, CertificateRequest{CA: "local", CN: strings.Repeat("a", 65)})
			return err
		}, &invalidError{}},
		"too many sans": {func() error {
			_, err := s.GetCertificate(api, CertificateRequest{CA: "local", CN: "api.example.com", SANs: make([]string, 101)})
			return err
		}, &invalidError{}},
	}
	for name, tt := range tests {
		err := tt.call()
		switch tt.want.(type) {
		case *notFoundError:
			var nf *notFoundError
			if !errors.As(err, &nf) || nf.msg != "Provided CA not found." {
				t.Errorf("%s: %v, want Provided CA not found.", name, err)
			}
		case *invalidError:
			var inv *invalidError
			if !errors.As(err, &inv) {
				t.Errorf("%s: %v, want invalid", name, err)
			}
		}
	}
}

func TestConcurrentIdenticalRequestsIssueOnce(t *testing.T) {
	authorities := providers(t)
	counting := &countingCA{Authority: authorities["local"], gate: make(chan struct{})}
	s := certService(t, certConfig("local"), map[string]ca.Authority{"local": counting})
	const callers = 8
	var joined sync.WaitGroup
	joined.Add(callers)
	s.certs.joined = joined.Done

	results := make([]IssuedCertificate, callers)
	errs := make([]error, callers)
	var done sync.WaitGroup
	for i := range callers {
		done.Go(func() {
			results[i], errs[i] = s.GetCertificate(asService("api"), CertificateRequest{CA: "local", CN: "api.example.com", ValidityDays: 5})
		})
	}
	// Every caller is in the one flight before the (held) issuance may finish.
	joined.Wait()
	close(counting.gate)
	done.Wait()
	for i := range callers {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if results[i] != results[0] {
			t.Errorf("caller %d got another certificate", i)
		}
	}
	if n := counting.count(); n != 1 {
		t.Errorf("%d issuances for %d identical concurrent requests, want 1", n, callers)
	}
}

func TestCertificateCache(t *testing.T) {
	authorities := providers(t)
	counting := &countingCA{Authority: authorities["pca"]}
	cfg := certConfig("pca")
	settings := cfg.PerCA["pca"]
	settings.UseCache, settings.CacheSize = true, 2
	cfg.PerCA["pca"] = settings
	s := certService(t, cfg, map[string]ca.Authority{"pca": counting})
	api := asService("api")
	get := func(days int, sans ...string) IssuedCertificate {
		t.Helper()
		got, err := s.GetCertificate(api, CertificateRequest{CA: "pca", CN: "api.example.com", SANs: sans, ValidityDays: days})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	first := get(5, "api.internal", "api.example.com")
	if again := get(5, "api.example.com", "api.internal"); again != first || counting.count() != 1 {
		t.Errorf("same request (SANs in another order) issued again: %d issuances", counting.count())
	}
	if get(6) == first || counting.count() != 2 {
		t.Error("another validity came from the cache")
	}
	get(7) // evicts the oldest of the two entries
	get(5, "api.example.com", "api.internal")
	if counting.count() != 4 {
		t.Errorf("%d issuances, want 4 after eviction", counting.count())
	}
}

func TestCertConfigEnvAndValidate(t *testing.T) {
	env := map[string]string{
		"CA_TYPE": "aws_acm_pca", "ACM_PRIVATE_CAS": "prod,my-ca",
		"ACM_PRIVATE_CA_ARN_PROD": "arn:aws:acm-pca:us-east-1:1:certificate-authority/x", "ACM_PRIVATE_CA_MAX_VALIDITY_DAYS_PROD": "30",
		"ACM_PRIVATE_CA_DOMAIN_REGEX_PROD":          `(?P<service_name>\w+)\.prod`,
		"ACM_PRIVATE_CA_CERTIFICATE_USE_CACHE_PROD": "true", "ACM_PRIVATE_CA_ARN_MY_CA": "arn:aws:acm-pca:us-east-1:1:certificate-authority/y",
	}
	cfg := DefaultConfig()
	if err := loadEnv(&cfg, env); err != nil {
		t.Fatal(err)
	}
	prod := cfg.Certs.Settings("prod")
	if !slices.Equal(cfg.Certs.CAs, []string{"prod", "my-ca"}) || prod.MaxValidityDays != 30 || !prod.UseCache ||
		prod.CacheSize != DefaultCertCacheSize || cfg.Certs.Settings("my-ca").ARN == "" || cfg.Certs.Settings("my-ca").MaxValidityDays != 120 {
		t.Errorf("loaded %+v", cfg.Certs)
	}

	bad := map[string]map[string]string{
		"CA_TYPE":                 {"CA_TYPE": "custom_ca"},
		"ACM_PRIVATE_CA_ARN_PROD": {"CA_TYPE": "aws_acm_pca", "ACM_PRIVATE_CAS": "prod"},
		"ACM_PRIVATE_CA_MAX_VALIDITY_DAYS_DEVELOPMENT": {"ACM_PRIVATE_CA_MAX_VALIDITY_DAYS_DEVELOPMENT": "-3"},
		"ACM_PRIVATE_CA_DOMAIN_REGEX_DEVELOPMENT":      {"ACM_PRIVATE_CA_DOMAIN_REGEX_DEVELOPMENT": `[a-z]+\.example\.com`},
		"ACM_PRIVATE_CA_KEY_SIZE_DEVELOPMENT":          {"ACM_PRIVATE_CA_KEY_SIZE_DEVELOPMENT": "1024"},
		"GANTRY_CA_KEY_FILE_DEVELOPMENT":               {"GANTRY_CA_CERT_FILE_DEVELOPMENT": "/x.pem"},
		"ACM_PRIVATE_CAS (env)":                        {"ACM_PRIVATE_CAS": "../etc"},
	}
	for setting, env := range bad {
		cfg := DefaultConfig()
		err := loadEnv(&cfg, env)
		if err == nil || !strings.Contains(err.Error(), setting) {
			t.Errorf("%v: error %v does not name %s", env, err, setting)
		}
	}
}

func TestCertificateKeyTypeSetting(t *testing.T) {
	cfg := certConfig("local", "pca")
	cfg.KeyType = ca.KeyECDSA // -cert-key-type=ecdsa
	pca := cfg.PerCA["pca"]
	pca.KeyType = ca.KeyRSA // GANTRY_CA_KEY_TYPE_PCA=rsa
	cfg.PerCA["pca"] = pca
	s := certService(t, cfg, providers(t))
	for caName, want := range map[string]string{"local": "EC PRIVATE KEY", "pca": "RSA PRIVATE KEY"} {
		got, err := s.GetCertificate(asService("api"), CertificateRequest{CA: caName, CN: "api.example.com"})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(got.Key, "-----BEGIN "+want+"-----") {
			t.Errorf("%s: key %.40q, want %s", caName, got.Key, want)
		}
		checkIssued(t, got, "api.example.com", 10)
	}
}

// TestServiceCertificateNamesMustMatchInFull: the domain rule matches the CN and every SAN in full, for
// the caller's own name, and wildcard and IP names need the CA's permission (Confidant matched the CN's
// start only and ignored SANs).
func TestServiceCertificateNamesMustMatchInFull(t *testing.T) {
	cfg := certConfig("local")
	settings := cfg.PerCA["local"]
	settings.AllowIP = false
	cfg.PerCA["local"] = settings
	local := map[string]ca.Authority{"local": providers(t)["local"]}
	s := certService(t, cfg, local)
	api := asService("api")
	for _, tc := range []struct {
		name string
		cn   string
		sans []string
	}{
		{"suffix after the domain", "api.example.com.evil.org", nil},
		{"wildcard CN", "*.example.com", nil},
		{"another service's name as SAN", "api.example.com", []string{"billing.example.com"}},
		{"foreign SAN", "api.example.com", []string{"evil.org"}},
		{"IP SAN without permission", "api.example.com", []string{"10.0.0.1"}},
		{"prefix before the name", "x.api.example.com", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.GetCertificate(api, CertificateRequest{CA: "local", CN: tc.cn, SANs: tc.sans}); err == nil {
				t.Fatalf("issued %s %v", tc.cn, tc.sans)
			} else if _, denied := err.(*deniedError); !denied {
				t.Fatalf("err = %v, want an access denial", err)
			}
		})
	}
	if _, err := s.GetCertificate(api, CertificateRequest{CA: "local", CN: "api.example.com", SANs: []string{"api.internal"}}); err != nil {
		t.Fatalf("own names: %v", err)
	}
	// A CA that allows them hands out wildcard and IP names.
	settings.AllowIP, settings.AllowWildcard = true, true
	settings.DomainRegex = `(?:\*\.)?(?P<service_name>[a-z-]+)\.example\.com`
	cfg.PerCA["local"] = settings
	s = certService(t, cfg, local)
	if _, err := s.GetCertificate(api, CertificateRequest{CA: "local", CN: "*.api.example.com", SANs: []string{"10.0.0.1"}}); err != nil {
		t.Fatalf("wildcard and IP where allowed: %v", err)
	}
}
