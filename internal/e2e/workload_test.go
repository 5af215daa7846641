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
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/internaltls"
	"github.com/gantry-dev/gantry/pkg/wirekeys"
	"github.com/gantry-dev/gantry/pkg/workload"
	"github.com/gantry-dev/gantry/pkg/workload/workloadtest"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// workloadStack is a stack whose REST listener serves TLS (so callers can present client
// certificates), with a revoked-serials file; requests go to https:// through a client trusting the
// listener's CA.
type workloadStack struct {
	*testStack
	edgeCA  string // PEM file of the REST listener's CA
	revoked string // the -workload-cert-revoked-file
	// cluster is a Kubernetes service-account issuer (namespace shop: service accounts api and other
	// are services api and other), ci a GitHub-Actions-style issuer (repository acme/api on main is
	// service api); both trusted through the -workload-identity-file.
	cluster, ci *workloadtest.Issuer
	trail       *auditTrail
}

func startWorkloadStack(t *testing.T, mutate ...func(*stack.Config)) *workloadStack {
	t.Helper()
	certFile, keyFile, caFile := edgePKI(t)
	revoked := filepath.Join(t.TempDir(), "revoked-serials")
	if err := os.WriteFile(revoked, []byte("# serial numbers of revoked workload certificates\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cluster, ci := workloadtest.New(t), workloadtest.New(t)
	identities := filepath.Join(t.TempDir(), "identities.yaml")
	doc := fmt.Sprintf(`identities:
  issuers:
    - {name: prod-cluster, kind: kubernetes, issuer: %q, audiences: [gantry]}
    - {name: github, kind: jwt, issuer: %q, audiences: ["https://gantry.example.com"]}
  services:
    - {issuer: prod-cluster, namespace: shop, service_account: api, service: api}
    - {issuer: prod-cluster, namespace: shop, service_account: other, service: other}
    - {issuer: github, claims: {repository: acme/api, ref: refs/heads/main}, service: api}
`, cluster.URL, ci.URL)
	if err := os.WriteFile(identities, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	trail := &auditTrail{}
	s := startStack(t, func(c *stack.Config) {
		c.AuditStdout = trail
		c.Gateway.TLSCertFile, c.Gateway.TLSKeyFile = certFile, keyFile
		c.Secrets.Auth.WorkloadCertRevokedFile = revoked
		c.Secrets.Auth.WorkloadIdentityFile = identities
		for _, m := range mutate {
			m(c)
		}
	})
	s.rest = "https://" + s.GatewayAddr
	s.https = httpsClient(t, caFile)
	return &workloadStack{testStack: s, edgeCA: caFile, revoked: revoked, cluster: cluster, ci: ci, trail: trail}
}

// podToken is a projected service-account token of shop/<account> for audience, valid from now on.
func (s *workloadStack) podToken(account, audience string, ttl time.Duration) string {
	return "Bearer " + s.cluster.Sign(s.t, workloadtest.KidRSA, s.cluster.KubernetesClaims("shop", account, audience, time.Now(), ttl))
}

// wantAuthType fails the test unless the last audit record of a read of service api by api names
// authType as its method.
func (s *workloadStack) wantAuthType(t *testing.T, authType string) {
	t.Helper()
	recs := s.trail.take(t)
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i]["principal"] == "api" && recs[i]["resource_id"] == "api" && recs[i]["outcome"] == "allowed" {
			if recs[i]["auth_type"] != authType || recs[i]["principal_type"] != "service" {
				t.Fatalf("audit record %v, want auth_type %s of a service", recs[i], authType)
			}
			return
		}
	}
	t.Fatalf("no audit record of api reading its service among %v", recs)
}

// ciToken is a GitHub-Actions-style token of repository on main for gantry.
func (s *workloadStack) ciToken(repository string) string {
	return "Bearer " + s.ci.Sign(s.t, workloadtest.KidEC, s.ci.GitHubClaims(repository, "refs/heads/main", "https://gantry.example.com", time.Now(), 5*time.Minute))
}

// issueWorkloadCert has the server issue service's workload certificate, as `gantry certs issue` does
// at bootstrap: authenticated with a kmsauth token of the service, CN the service, one SAN its SPIFFE ID.
func (s *workloadStack) issueWorkloadCert(service string) (tls.Certificate, *x509.Certificate) {
	s.t.Helper()
	q := url.Values{"san": {workload.SPIFFEID("gantry.local", service)}}
	r := s.do("GET", s.rest+"/v1/certificates/development/"+service+"?"+q.Encode(), "", http.Header{"Authorization": {s.basic(service, "service")}})
	body := r.must(s.t, 200)
	pair, err := tls.X509KeyPair([]byte(body["certificate"].(string)+body["certificate_chain"].(string)), []byte(body["key"].(string)))
	if err != nil {
		s.t.Fatal(err)
	}
	return pair, pair.Leaf
}

// signWorkloadCert signs a client certificate with the development CA's key from the data folder, as
// the CA would, after mutate: certificates the server would not issue (expired, without a SPIFFE ID).
func (s *workloadStack) signWorkloadCert(mutate func(*x509.Certificate)) tls.Certificate {
	s.t.Helper()
	dir := filepath.Join(s.cfg.DataDir, "ca", "development")
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		s.t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		s.t.Fatal(err)
	}
	cb, _ := pem.Decode(caPEM)
	caCert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		s.t.Fatal(err)
	}
	kb, _ := pem.Decode(keyPEM)
	caKey, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		s.t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "api"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs: []*url.URL{{Scheme: "spiffe", Host: "gantry.local", Path: "/service/api"}}}
	mutate(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		s.t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der, caCert.Raw}, PrivateKey: key, Leaf: leaf}
}

// certClient is an https client presenting cert.
func (s *workloadStack) certClient(cert tls.Certificate) *http.Client {
	s.t.Helper()
	c := httpsClient(s.t, s.edgeCA)
	c.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{cert}
	return c
}

// revoke adds a certificate's serial to the revoked-serials file, as an operator would.
func (s *workloadStack) revoke(leaf *x509.Certificate) {
	s.t.Helper()
	f, err := os.OpenFile(s.revoked, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		s.t.Fatal(err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "%x\n", leaf.SerialNumber); err != nil {
		s.t.Fatal(err)
	}
}

// directCreds are the gRPC credentials of a workload dialling a service directly with its own
// certificate: the service verified against the internal CA under its name.
func (s *workloadStack) directCreds(cert tls.Certificate) credentials.TransportCredentials {
	s.t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(s.cfg.InternalTLS.Dir, "ca.crt"))
	if err != nil {
		s.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: internaltls.DefaultServerName, MinVersion: tls.VersionTLS13})
}

// TestWorkloadCertThroughGateway: a service with no keyring reads its own service with its workload
// certificate through the gateway, never another's; it renews the certificate with the certificate
// alone; a revoked certificate is refused from the next request on, with a message; a client cannot
// forge the gateway's forwarded-certificate header; the audit trail names the method.
func TestWorkloadCertThroughGateway(t *testing.T) {
	s := startWorkloadStack(t)
	cred := s.createCredential("db", map[string]any{"password": "p"})
	s.call("PUT", "/v1/services/api", map[string]any{"credentials": []string{cred}}).must(t, 200)
	s.call("PUT", "/v1/services/other", map[string]any{}).must(t, 200)
	pair, leaf := s.issueWorkloadCert("api")
	api := s.certClient(pair)
	none := http.Header{"Authorization": {""}}

	s.trail.take(t)
	got := s.doWith(api, "GET", s.rest+"/v1/services/api?metadata_only=False", "", none).must(t, 200)
	s.wantAuthType(t, "cert")
	if !strings.Contains(mustJSON(t, got), `"password":"p"`) {
		t.Fatalf("service api by certificate did not read its credential: %s", mustJSON(t, got))
	}
	r := s.doWith(api, "GET", s.rest+"/v1/services/other", "", none)
	if r.code != 403 || !strings.Contains(string(r.body), "api does not have access") {
		t.Fatalf("api reading other: %d %s", r.code, r.body)
	}

	// Renewal: the current certificate is the only credential; the new one works too.
	q := url.Values{"san": {workload.SPIFFEID("gantry.local", "api")}}
	renewed := s.doWith(api, "GET", s.rest+"/v1/certificates/development/api?"+q.Encode(), "", none).must(t, 200)
	pair2, err := tls.X509KeyPair([]byte(renewed["certificate"].(string)+renewed["certificate_chain"].(string)), []byte(renewed["key"].(string)))
	if err != nil {
		t.Fatal(err)
	}
	if pair2.Leaf.SerialNumber.Cmp(leaf.SerialNumber) == 0 {
		t.Fatal("renewal returned the same certificate")
	}
	// A certificate of api cannot get one naming another service.
	q.Set("san", workload.SPIFFEID("gantry.local", "other"))
	if r := s.doWith(api, "GET", s.rest+"/v1/certificates/development/other?"+q.Encode(), "", none); r.code != 403 {
		t.Fatalf("api asking for other's certificate: %d %s", r.code, r.body)
	}

	// Revoked: refused with a message saying so; the renewed certificate still works.
	s.revoke(leaf)
	r = s.doWith(api, "GET", s.rest+"/v1/services/api", "", none)
	if r.code != 403 || !strings.Contains(string(r.body), "revoked") {
		t.Fatalf("revoked certificate: %d %s", r.code, r.body)
	}
	s.doWith(s.certClient(pair2), "GET", s.rest+"/v1/services/api", "", none).must(t, 200)

	// The forwarded-certificate header from a client is dropped by the gateway: without a
	// certificate on the handshake the call carries no credential.
	forged := http.Header{"Authorization": {""}, "X-Gantry-Client-Cert": {workload.EncodeChain([]*x509.Certificate{pair2.Leaf})}}
	if r := s.do("GET", s.rest+"/v1/services/api", "", forged); r.code != 401 {
		t.Fatalf("forged header: %d %s", r.code, r.body)
	}
}

// TestWorkloadCertDirectGRPC: the same certificate authenticates on the secrets service's gRPC port,
// with the same rules; a workload certificate is never the gateway, even one naming the gateway, so
// the gateway-only forwarded-certificate metadata it sends is dropped; a revoked certificate is
// refused.
func TestWorkloadCertDirectGRPC(t *testing.T) {
	s := startWorkloadStack(t)
	s.call("PUT", "/v1/services/api", map[string]any{}).must(t, 200)
	s.call("PUT", "/v1/services/other", map[string]any{}).must(t, 200)
	pair, leaf := s.issueWorkloadCert("api")
	otherPair, _ := s.issueWorkloadCert("other")
	ctx := context.Background()

	dial := func(cert tls.Certificate) secretsv1.SecretsServiceClient {
		conn, err := grpc.NewClient(s.SecretsAddr, grpc.WithTransportCredentials(s.directCreds(cert)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return secretsv1.NewSecretsServiceClient(conn)
	}
	api := dial(pair)
	if _, err := api.GetService(ctx, &secretsv1.GetServiceRequest{Id: "api"}); err != nil {
		t.Fatalf("api by certificate on gRPC: %v", err)
	}
	if _, err := api.GetService(ctx, &secretsv1.GetServiceRequest{Id: "other"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("api reading other on gRPC: %v", err)
	}
	// other's certificate forwarding api's chain as if it were the gateway: dropped, still other.
	forged := metadata.AppendToOutgoingContext(ctx, wirekeys.ClientCert, workload.EncodeChain([]*x509.Certificate{leaf}))
	if _, err := dial(otherPair).GetService(forged, &secretsv1.GetServiceRequest{Id: "api"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("forged metadata from other: %v", err)
	}
	// A workload certificate naming the gateway (the CA would sign any CN it is asked to) is not
	// the gateway: its forwarded metadata is dropped too.
	gatewayNamed := s.signWorkloadCert(func(c *x509.Certificate) {
		c.Subject.CommonName = internaltls.DefaultGatewayName
		c.DNSNames = []string{internaltls.DefaultGatewayName}
		c.URIs = []*url.URL{{Scheme: "spiffe", Host: "gantry.local", Path: "/service/other"}}
	})
	if _, err := dial(gatewayNamed).GetService(forged, &secretsv1.GetServiceRequest{Id: "api"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("forged metadata from a workload certificate naming the gateway: %v", err)
	}
	s.revoke(leaf)
	_, err := api.GetService(ctx, &secretsv1.GetServiceRequest{Id: "api"})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), "revoked") {
		t.Fatalf("revoked certificate on gRPC: %v", err)
	}
}

// TestWorkloadTokens: a pod's projected service-account token and a CI job's OIDC token read the
// mapped service's credentials through the gateway and on direct gRPC, never another service's; an
// expired, wrong-audience or unknown-issuer token is refused with a message saying which; the audit
// line names the method.
func TestWorkloadTokens(t *testing.T) {
	s := startWorkloadStack(t)
	cred := s.createCredential("db", map[string]any{"password": "p"})
	s.call("PUT", "/v1/services/api", map[string]any{"credentials": []string{cred}}).must(t, 200)
	s.call("PUT", "/v1/services/other", map[string]any{}).must(t, 200)

	for authType, token := range map[string]string{"kubernetes": s.podToken("api", "gantry", time.Hour), "jwt": s.ciToken("acme/api")} {
		name := authType
		s.trail.take(t)
		got := s.do("GET", s.rest+"/v1/services/api?metadata_only=False", "", http.Header{"Authorization": {token}}).must(t, 200)
		s.wantAuthType(t, authType)
		caller := s.do("GET", s.rest+"/v1/whoami", "", http.Header{"Authorization": {token}}).must(t, 200)
		if caller["principal"] != "api" || caller["auth_type"] != authType {
			t.Errorf("GET /v1/whoami with a %s token: %v", authType, caller)
		}
		if !strings.Contains(mustJSON(t, got), `"password":"p"`) {
			t.Fatalf("%s token did not read api's credential: %s", name, mustJSON(t, got))
		}
		if r := s.do("GET", s.rest+"/v1/services/other", "", http.Header{"Authorization": {token}}); r.code != 403 {
			t.Fatalf("%s token of api reading other: %d %s", name, r.code, r.body)
		}
	}
	other := workloadtest.New(t)
	for _, c := range []struct{ name, token, want string }{
		{"expired", "Bearer " + s.cluster.Sign(t, workloadtest.KidRSA, s.cluster.KubernetesClaims("shop", "api", "gantry", time.Now().Add(-2*time.Hour), time.Hour)), "token expired at"},
		{"wrong audience", s.podToken("api", "vault", time.Hour), "audience"},
		{"wrong issuer", "Bearer " + other.Sign(t, workloadtest.KidRSA, other.KubernetesClaims("shop", "api", "gantry", time.Now(), time.Hour)), "is not trusted"},
		{"unmapped service account", s.podToken("admin", "gantry", time.Hour), "no mapping"},
		{"wrong repository", s.ciToken("acme/other"), "no mapping"},
	} {
		r := s.do("GET", s.rest+"/v1/services/api", "", http.Header{"Authorization": {c.token}})
		if r.code != 403 || !strings.Contains(string(r.body), c.want) {
			t.Errorf("%s: %d %s, want 403 saying %q", c.name, r.code, r.body, c.want)
		}
	}

	// Direct gRPC: the token in the authorization metadata, over the internal TLS a direct caller uses.
	conn := secretsv1.NewSecretsServiceClient(s.dial(s.SecretsAddr))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", s.podToken("api", "gantry", time.Hour))
	if _, err := conn.GetService(ctx, &secretsv1.GetServiceRequest{Id: "api"}); err != nil {
		t.Fatalf("pod token on gRPC: %v", err)
	}
	if _, err := conn.GetService(ctx, &secretsv1.GetServiceRequest{Id: "other"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("pod token of api reading other on gRPC: %v", err)
	}

	// The admin port counts each authentication by method: 3 REST calls per token kind, 2 gRPC calls
	// with the pod token; the 5 refused tokens are workload tokens whose issuer never accepted them;
	// api reading other is refused by access control 3 times.
	fams := s.scrape(t)
	for _, c := range []struct {
		labels string
		want   float64
	}{
		{"auth_method=kubernetes,result=success", 5},
		{"auth_method=jwt,result=success", 3},
		{"auth_method=bearer,result=failure", 5},
	} {
		if v := series(fams, "envoy_secrets_authn", c.labels); v != c.want {
			t.Errorf("envoy_secrets_authn{%s} = %v, want %v", c.labels, v, c.want)
		}
	}
	if v := series(fams, "envoy_secrets_authz_denied", ""); v != 3 {
		t.Errorf("envoy_secrets_authz_denied = %v, want 3", v)
	}
}

// TestCLIWorkloadIdentities runs the real gantry binary as a service on a machine with no keyring (no
// GANTRY_DATA_DIR, an empty working folder): bootstrap by the operator with the keyring, then
// `gantry env --cert`, `gantry certs renew --cert`, and `gantry env --token-file` with a pod's token.
// Another service's credentials stay out of reach (exit 3, nothing run).
func TestCLIWorkloadIdentities(t *testing.T) {
	s := startWorkloadStack(t)
	cred := s.createCredential("orders-db", map[string]any{"DB_PASSWORD": "hunter2"})
	s.call("PUT", "/v1/services/api", map[string]any{"credentials": []string{cred}}).must(t, 200)
	s.call("PUT", "/v1/services/other", map[string]any{}).must(t, 200)
	tlsDir := filepath.Join(t.TempDir(), "tls")
	operator := []string{"GANTRY_ADDR=" + s.rest, "GANTRY_CA_FILE=" + s.edgeCA, "GANTRY_DATA_DIR=" + s.cfg.DataDir}
	runGantry(t, t.TempDir(), operator, "", "certs", "issue", "--ca", "development", "--cn", "api",
		"--san", workload.SPIFFEID("gantry.local", "api"), "--out-dir", tlsDir, "--from", "api", "--user-type", "service").must(t, 0)

	vm := []string{"GANTRY_ADDR=" + s.rest, "GANTRY_CA_FILE=" + s.edgeCA} // no data folder: no keyring
	cert, key := filepath.Join(tlsDir, "cert.pem"), filepath.Join(tlsDir, "key.pem")
	run := runGantry(t, t.TempDir(), vm, "", "env", "--service", "api", "--cert", cert, "--cert-key", key, "--", "/usr/bin/env").must(t, 0)
	if !strings.Contains(run.stdout, "CREDENTIALS_DB_PASSWORD=hunter2\n") {
		t.Fatalf("gantry env --cert: %q %q", run.stdout, run.stderr)
	}
	denied := runGantry(t, t.TempDir(), vm, "", "env", "--service", "other", "--cert", cert, "--cert-key", key, "--", "/usr/bin/env").must(t, 3)
	if strings.Contains(denied.stdout, "CREDENTIALS_") {
		t.Fatalf("the child ran: %q", denied.stdout)
	}
	before, _ := os.ReadFile(cert)
	runGantry(t, t.TempDir(), vm, "", "certs", "renew", "--cert", cert, "--cert-key", key).must(t, 0)
	after, _ := os.ReadFile(cert)
	if string(before) == string(after) {
		t.Fatal("gantry certs renew left the certificate unchanged")
	}
	runGantry(t, t.TempDir(), vm, "", "env", "--service", "api", "--cert", cert, "--cert-key", key, "--", "true").must(t, 0)
	// --cert needs https, and is one credential: usage errors, nothing sent.
	runGantry(t, t.TempDir(), []string{"GANTRY_ADDR=http://" + s.GatewayAddr}, "", "services", "get", "api", "--cert", cert).must(t, 2)

	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(strings.TrimPrefix(s.podToken("api", "gantry", time.Hour), "Bearer ")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run = runGantry(t, t.TempDir(), vm, "", "env", "--service", "api", "--token-file", tokenFile, "--", "/usr/bin/env").must(t, 0)
	if !strings.Contains(run.stdout, "CREDENTIALS_DB_PASSWORD=hunter2\n") {
		t.Fatalf("gantry env --token-file: %q %q", run.stdout, run.stderr)
	}
	runGantry(t, t.TempDir(), vm, "", "env", "--service", "other", "--token-file", tokenFile, "--", "true").must(t, 3)
	// whoami names the principal and the method, for each of the three.
	for method, args := range map[string][]string{
		"cert":       {"--cert", cert, "--cert-key", key},
		"kubernetes": {"--token-file", tokenFile},
	} {
		var caller map[string]string
		runGantry(t, t.TempDir(), vm, "", append([]string{"whoami"}, args...)...).must(t, 0).json(t, &caller)
		if caller["principal"] != "api" || caller["principal_type"] != "service" || caller["auth_type"] != method {
			t.Errorf("gantry whoami with %s: %v", method, caller)
		}
	}
	var caller map[string]string
	runGantry(t, t.TempDir(), operator, "", "whoami", "--from", "alice").must(t, 0).json(t, &caller)
	if caller["principal"] != "alice" || caller["principal_type"] != "user" || caller["auth_type"] != "kms" {
		t.Errorf("gantry whoami with the keyring: %v", caller)
	}
	runGantry(t, t.TempDir(), vm, "", "env", "--service", "api", "--token-file", tokenFile, "--cert", cert, "--", "true").must(t, 2)
}

// TestWorkloadCertSplitGateway: a gateway in a process of its own holds no CA; given the workload CA's
// PEM (-workload-cert-ca-file) it asks for client certificates and forwards them to the secrets
// service of another process, which authenticates the service by it.
func TestWorkloadCertSplitGateway(t *testing.T) {
	certFile, keyFile, caFile := edgePKI(t)
	services := startStack(t, func(c *stack.Config) { c.Target = "secrets,chat" })
	caDir := filepath.Join(services.cfg.DataDir, "ca", "development")
	var bundle []byte
	for _, name := range []string{"ca.crt", "chain.pem"} {
		data, err := os.ReadFile(filepath.Join(caDir, name))
		if err != nil {
			t.Fatal(err)
		}
		bundle = append(bundle, data...)
	}
	bundleFile := filepath.Join(t.TempDir(), "workload-ca.pem")
	if err := os.WriteFile(bundleFile, bundle, 0o600); err != nil {
		t.Fatal(err)
	}
	gw := splitGateway(t, services, func(c *stack.Config) {
		c.Gateway.TLSCertFile, c.Gateway.TLSKeyFile = certFile, keyFile
		c.Secrets.Auth.WorkloadCertCAFile = bundleFile
	})
	gw.rest, gw.https = "https://"+gw.GatewayAddr, httpsClient(t, caFile)
	s := &workloadStack{testStack: gw, edgeCA: caFile}
	s.call("PUT", "/v1/services/api", map[string]any{}).must(t, 200)
	pair, _ := s.issueWorkloadCert("api")
	caller := s.doWith(s.certClient(pair), "GET", s.rest+"/v1/whoami", "", http.Header{"Authorization": {""}}).must(t, 200)
	if caller["principal"] != "api" || caller["auth_type"] != "cert" {
		t.Fatalf("whoami through a gateway of its own: %v", caller)
	}
	s.doWith(s.certClient(pair), "GET", s.rest+"/v1/services/api", "", http.Header{"Authorization": {""}}).must(t, 200)
}

// TestWorkloadPrincipalsShareTheWriteRate: the write rate is the principal's, whatever the method: a
// service's writes with a kmsauth token, its certificate and its pod's token draw on one allowance
// (each write counts before the access check, so refused writes count too), and another service keeps
// its own.
func TestWorkloadPrincipalsShareTheWriteRate(t *testing.T) {
	s := startWorkloadStack(t, func(c *stack.Config) { c.Secrets.Limits.WriteRate, c.Secrets.Limits.WriteBurst = 0.001, 2 })
	s.call("PUT", "/v1/services/api", map[string]any{}).must(t, 200)
	// Issuing is a write (it is audited as one): the first of api's allowance, with a kmsauth token.
	pair, _ := s.issueWorkloadCert("api")
	body := `{"name": "x", "documentation": "d", "credential_pairs": {"k": "v"}}`
	write := func(c *http.Client, auth string) int {
		h := http.Header{"Content-Type": {"application/json"}, "Authorization": {auth}}
		if c == nil {
			return s.do("POST", s.rest+"/v1/credentials", body, h).code
		}
		return s.doWith(c, "POST", s.rest+"/v1/credentials", body, h).code
	}
	if code := write(s.certClient(pair), ""); code != 403 {
		t.Fatalf("api's second write, with its certificate: %d, want 403 (services may not create credentials)", code)
	}
	if code := write(nil, s.podToken("api", "gantry", time.Hour)); code != 429 {
		t.Fatalf("api's third write, with its pod token: %d, want 429 (one allowance per principal)", code)
	}
	if code := write(nil, s.podToken("other", "gantry", time.Hour)); code != 403 {
		t.Fatalf("other's first write: %d, want 403 (its own allowance)", code)
	}
}
