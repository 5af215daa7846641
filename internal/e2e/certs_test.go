package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/internal/stacktest"
	"github.com/gantry-dev/gantry/pkg/ca"
	"github.com/gantry-dev/gantry/pkg/ca/acmpcatest"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/settings"
	"github.com/gantry-dev/gantry/services/secrets"
)

// certDomain is the CA name pattern of the suite: service "api" may get api.example.com.
const certDomain = `(?P<service_name>[a-z0-9-]+)\.(?:example\.com|internal)`

// certStack starts the stack with the default local CA, which lets services get certificates for
// <service>.example.com and <service>.internal (and IP SANs), capped at 30 days.
func certStack(t *testing.T, mutate func(*stack.Config)) *testStack {
	return startStack(t, func(c *stack.Config) {
		c.Secrets.Certs.PerCA = map[string]secrets.CASettings{"development": {DomainRegex: certDomain, MaxValidityDays: 30, AllowIP: true}}
		if mutate != nil {
			mutate(c)
		}
	})
}

// asServiceHeader is the Authorization of a service that holds grants (created by the suite's user).
func (s *testStack) asServiceHeader(name string) http.Header {
	s.t.Helper()
	s.call("PUT", "/v1/services/"+name, map[string]any{}).must(s.t, 200)
	return http.Header{"Authorization": {s.basic(name, "service")}, "Content-Type": {"application/json"}}
}

// verifyChain checks the certificate of a response against its certificate_chain for dnsName, and
// returns the leaf.
func verifyChain(t *testing.T, body map[string]any, dnsName string, maxDays int) *x509.Certificate {
	t.Helper()
	leafPEM, _ := body["certificate"].(string)
	chainPEM, _ := body["certificate_chain"].(string)
	leaves, _ := ca.ParseCertificates([]byte(leafPEM))
	chain, _ := ca.ParseCertificates([]byte(chainPEM))
	if len(leaves) != 1 || len(chain) == 0 {
		t.Fatalf("certificate/chain: %d/%d certificates in %v", len(leaves), len(chain), body)
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(chain[len(chain)-1])
	for _, c := range chain[:len(chain)-1] {
		inter.AddCert(c)
	}
	leaf := leaves[0]
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: dnsName, Roots: roots, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("leaf does not verify against certificate_chain: %v", err)
	}
	if leaf.IsCA || leaf.KeyUsage != x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment {
		t.Errorf("leaf CA=%v key usage %b", leaf.IsCA, leaf.KeyUsage)
	}
	if life := leaf.NotAfter.Sub(leaf.NotBefore); life > time.Duration(maxDays)*24*time.Hour+10*time.Minute {
		t.Errorf("lifetime %v over the %d-day cap", life, maxDays)
	}
	return leaf
}

func TestCertificateAuthorities(t *testing.T) {
	s := certStack(t, nil)
	api := s.asServiceHeader("api")

	list := s.do("GET", s.rest+"/v1/cas", "", api).must(t, 200)
	cas := asList(t, list["cas"])
	if len(cas) != 1 {
		t.Fatalf("cas %v", list)
	}
	dev := asMap(t, cas[0])
	checkFields(t, "CA", dev, []string{"ca", "certificate", "certificate_chain", "tags"})
	if dev["ca"] != "development" {
		t.Errorf("ca %v", dev["ca"])
	}

	one := s.do("GET", s.rest+"/v1/cas/development", "", api).must(t, 200)
	checkFields(t, "CA", one, []string{"ca", "certificate", "certificate_chain", "tags"})
	if one["certificate"] != dev["certificate"] || one["certificate_chain"] == "" {
		t.Errorf("GET /v1/cas/development disagrees with the list: %v", one)
	}
	jsonEqual(t, "tags", one["tags"], `{}`)

	missing := s.do("GET", s.rest+"/v1/cas/nope", "", api).must(t, 404)
	if missing["error"] != "Provided CA not found." {
		t.Errorf("404 body %v", missing)
	}
	// Users may not use CAs under the default rules (Confidant's default ACL).
	if r := s.get("/v1/cas"); r.code != 403 {
		t.Errorf("user listing CAs: %d %s", r.code, r.body)
	}

	// The CA survives a restart: same certificate from the data folder.
	s = s.restart()
	again := s.do("GET", s.rest+"/v1/cas/development", "", http.Header{"Authorization": {s.basic("api", "service")}}).must(t, 200)
	if again["certificate"] != one["certificate"] {
		t.Error("the local CA changed across a restart")
	}
}

func TestCertificateIssueThroughGateway(t *testing.T) {
	s := certStack(t, nil)
	api := s.asServiceHeader("api")

	t.Run("GET generates the key", func(t *testing.T) {
		q := url.Values{"san": {"api.internal", "10.1.2.3"}, "validity": {"400"}}
		body := s.do("GET", s.rest+"/v1/certificates/development/api.example.com?"+q.Encode(), "", api).must(t, 200)
		checkFields(t, "issued certificate", body, []string{"certificate", "certificate_chain", "key"})
		leaf := verifyChain(t, body, "api.internal", 30)
		if leaf.Subject.CommonName != "api.example.com" || !slices.Equal(leaf.DNSNames, []string{"api.example.com", "api.internal"}) ||
			len(leaf.IPAddresses) != 1 || leaf.IPAddresses[0].String() != "10.1.2.3" {
			t.Errorf("subject %s SANs %v %v", leaf.Subject, leaf.DNSNames, leaf.IPAddresses)
		}
		if _, err := tls.X509KeyPair([]byte(body["certificate"].(string)), []byte(body["key"].(string))); err != nil {
			t.Errorf("key does not match the certificate: %v", err)
		}
		// The chain ends at the CA's own chain: the CA object and the issued chain agree.
		caObj := s.do("GET", s.rest+"/v1/cas/development", "", api).must(t, 200)
		if body["certificate_chain"] != caObj["certificate"].(string)+caObj["certificate_chain"].(string) {
			t.Error("issued chain is not the CA certificate followed by its chain")
		}
	})

	t.Run("GET with an ECDSA key", func(t *testing.T) {
		body := s.do("GET", s.rest+"/v1/certificates/development/api.example.com?key_type=ecdsa&validity=2", "", api).must(t, 200)
		verifyChain(t, body, "api.example.com", 2)
		if block, _ := pem.Decode([]byte(body["key"].(string))); block == nil || block.Type != "EC PRIVATE KEY" {
			t.Errorf("key is not an EC key")
		}
	})

	t.Run("POST signs the client's CSR", func(t *testing.T) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: "api.example.com"}, DNSNames: []string{"api.example.com", "api.internal"},
		}, key)
		if err != nil {
			t.Fatal(err)
		}
		csr := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
		body := s.do("POST", s.rest+"/v1/certificates/development", mustJSON(t, map[string]any{"csr": csr, "validity": 7, "san": []string{"ignored"}}), api).must(t, 200)
		if _, hasKey := body["key"]; hasKey {
			t.Errorf("a key field came back for a client CSR: %v", body)
		}
		checkFields(t, "issued certificate", body, []string{"certificate", "certificate_chain"})
		leaf := verifyChain(t, body, "api.internal", 7)
		if !leaf.PublicKey.(*ecdsa.PublicKey).Equal(&key.PublicKey) {
			t.Error("the certificate is not for the CSR's key")
		}
	})

	t.Run("errors", func(t *testing.T) {
		other := s.asServiceHeader("web")
		tests := []struct {
			name, method, path, body string
			header                   http.Header
			code                     int
			msg                      string
		}{
			{"missing csr", "POST", "/v1/certificates/development", `{"validity": 3}`, api, 400, "csr must be provided in the POST body."},
			{"undecodable csr", "POST", "/v1/certificates/development", `{"csr": "not a csr"}`, api, 400, "csr could not be decoded"},
			{"not JSON", "POST", "/v1/certificates/development", `{"csr": `, api, 400, ""},
			{"bad validity", "GET", "/v1/certificates/development/api.example.com?validity=soon", "", api, 400, ""},
			{"bad san", "GET", "/v1/certificates/development/api.example.com?san=a%20b", "", api, 400, ""},
			{"unknown CA GET", "GET", "/v1/certificates/nope/api.example.com", "", api, 404, "Provided CA not found."},
			{"unknown CA POST", "POST", "/v1/certificates/nope", `{"csr": "x"}`, api, 404, "Provided CA not found."},
			{"another service's name", "GET", "/v1/certificates/development/api.example.com", "", other, 403,
				"web does not have access to get certificate cn api.example.com against ca development"},
			{"a user", "GET", "/v1/certificates/development/api.example.com", "", http.Header{}, 403, ""},
			{"no credentials", "GET", "/v1/certificates/development/api.example.com", "", http.Header{"Authorization": {""}}, 401, ""},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := s.do(tt.method, s.rest+tt.path, tt.body, tt.header)
				body := r.must(t, tt.code)
				msg, _ := body["error"].(string)
				if msg == "" || (tt.msg != "" && msg != tt.msg) {
					t.Errorf("error %q, want %q", msg, tt.msg)
				}
				if tt.code == 403 && body["reference"] != "api.example.com" {
					t.Errorf("403 without the reference: %v", body)
				}
			})
		}
	})
}

// TestCertificatesFromACMPrivateCA runs the whole stack against the in-repo ACM Private CA fake with
// the production SDK client, configured the way Confidant is.
func TestCertificatesFromACMPrivateCA(t *testing.T) {
	fake := acmpcatest.NewServer()
	t.Cleanup(fake.Close)
	arn := fake.CreateCA("prod", map[string]string{"team": "infra"})
	fake.PendingPolls(2)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "example-secret")
	t.Setenv("AWS_SESSION_TOKEN", "")
	s := startStack(t, func(c *stack.Config) {
		env := map[string]string{"CA_TYPE": "aws_acm_pca", "ACM_PRIVATE_CAS": "prod", "ACM_PRIVATE_CA_ARN_PROD": arn,
			"ACM_PRIVATE_CA_DOMAIN_REGEX_PROD": certDomain, "ACM_PRIVATE_CA_MAX_VALIDITY_DAYS_PROD": "14"}
		if err := settings.New(c.Secrets.Settings()).Load(settings.MapLookup(env)); err != nil {
			t.Fatal(err)
		}
		c.Secrets.AWSRegion = acmpcatest.Region
		c.Secrets.Certs.ACMEndpoint = fake.URL()
	})
	api := s.asServiceHeader("api")
	prod := s.do("GET", s.rest+"/v1/cas/prod", "", api).must(t, 200)
	jsonEqual(t, "tags", prod["tags"], `{"team":"infra"}`)
	if prod["certificate_chain"] != fake.RootPEM(arn) {
		t.Errorf("CA chain is not the fake's root")
	}
	body := s.do("GET", s.rest+"/v1/certificates/prod/api.example.com?validity=90", "", api).must(t, 200)
	verifyChain(t, body, "api.example.com", 14)
	if days, _, _ := fake.LastIssued(); days != 14 {
		t.Errorf("IssueCertificate asked for %d days, want the 14-day cap", days)
	}
	fake.FailNext(1, 400, "AccessDeniedException") // not retried by the SDK
	if r := s.do("GET", s.rest+"/v1/cas/prod", "", api); r.code != 503 {
		t.Errorf("ACM refusing: %d %s, want 503", r.code, r.body)
	}
}

// TestBadCertificateSettingStopsStartup checks that a bad CA setting stops the stack before it
// serves or writes anything, naming the setting.
func TestBadCertificateSettingStopsStartup(t *testing.T) {
	cfg := stacktest.Config(t)
	cfg.Secrets.Certs.PerCA = map[string]secrets.CASettings{"development": {DomainRegex: `[a-z]+`}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := stack.Start(ctx, cfg, logtest.New(t))
	if err == nil {
		cancel()
		_ = st.Wait()
		t.Fatal("the stack started with a domain pattern lacking service_name")
	}
	if !strings.Contains(err.Error(), "ACM_PRIVATE_CA_DOMAIN_REGEX_DEVELOPMENT") {
		t.Errorf("error %v does not name ACM_PRIVATE_CA_DOMAIN_REGEX_DEVELOPMENT", err)
	}
	if _, err := os.Stat(cfg.DataDir); err == nil {
		t.Error("a refused configuration created the data folder")
	}
}

// TestCertificateNamesMustBeTheCallersInFull: through the gateway, a service gets no certificate for a
// name that only starts like its own, a wildcard, another service's name as a SAN, or an IP where the
// CA does not allow IPs (Confidant matched the CN's start only).
func TestCertificateNamesMustBeTheCallersInFull(t *testing.T) {
	s := startStack(t, func(c *stack.Config) {
		c.Secrets.Certs.PerCA = map[string]secrets.CASettings{"development": {DomainRegex: certDomain, MaxValidityDays: 30}}
	})
	api := s.asServiceHeader("api")
	for _, path := range []string{
		"/v1/certificates/development/api.example.com.evil.org",
		"/v1/certificates/development/%2A.example.com",
		"/v1/certificates/development/api.example.com?san=web.example.com",
		"/v1/certificates/development/api.example.com?san=10.0.0.1",
	} {
		if r := s.do("GET", s.rest+path, "", api); r.code != http.StatusForbidden {
			t.Errorf("GET %s: %d %s, want 403", path, r.code, r.body)
		}
	}
	s.do("GET", s.rest+"/v1/certificates/development/api.example.com?san=api.internal", "", api).must(t, 200)
}
