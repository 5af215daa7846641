package secrets

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gantry-dev/gantry/pkg/ca"
	"github.com/gantry-dev/gantry/pkg/workload"
)

// Authentication methods of workloads, as Principal.AuthType and audit lines name them.
const (
	AuthTypeCert = "cert"
)

// WorkloadCAPEM returns the PEM of the CAs trusted for services' client certificates: the file of
// WorkloadCertCAFile, else the certificate and chain of the CA WorkloadCertCA among cas. nil when
// client-certificate authentication is off (no CA named, or a CA this process does not hold).
func WorkloadCAPEM(ctx context.Context, cfg AuthConfig, cas map[string]ca.Authority) ([]byte, error) {
	if cfg.WorkloadCertCAFile != "" {
		data, err := os.ReadFile(cfg.WorkloadCertCAFile)
		if err != nil {
			return nil, fmt.Errorf("workload-cert-ca-file: %w", err)
		}
		return data, nil
	}
	if cfg.WorkloadCertCA == "" || cas[cfg.WorkloadCertCA] == nil {
		return nil, nil
	}
	info, err := cas[cfg.WorkloadCertCA].Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("workload-cert-ca %s: %w", cfg.WorkloadCertCA, err)
	}
	return []byte(info.Certificate + "\n" + info.Chain), nil
}

// NewWorkloadCertVerifier returns the verifier of services' client certificates for the CA PEM of
// WorkloadCAPEM; nil when that is nil.
func NewWorkloadCertVerifier(cfg AuthConfig, caPEM []byte) (*workload.CertVerifier, error) {
	if len(caPEM) == 0 {
		return nil, nil
	}
	v, err := workload.NewCertVerifier(workload.CertConfig{CAPEM: caPEM, TrustDomain: cfg.WorkloadTrustDomain, RevokedFile: cfg.WorkloadCertRevokedFile})
	if err != nil {
		return nil, fmt.Errorf("workload client certificates: %w", err)
	}
	return v, nil
}

// clientCert authenticates a service by its client certificate: forwarded by the gateway (the chain
// the caller presented on the REST listener) or presented on direct gRPC. The service name of its
// SPIFFE ID is a service principal, exactly as kmsauth's from.
func (a *authenticator) clientCert(req AuthRequest) (*AuthResult, error) {
	if a.certs == nil {
		return nil, forbidden("client certificates are not accepted by this server (-workload-cert-ca)")
	}
	chain := req.PeerCerts
	if req.ClientCert != "" {
		var err error
		if chain, err = workload.DecodeChain(req.ClientCert); err != nil {
			return nil, forbidden(refusalText(err))
		}
	}
	service, err := a.certs.Verify(chain)
	if err != nil {
		if errors.Is(err, workload.ErrRefused) {
			return nil, forbidden(refusalText(err))
		}
		return nil, fmt.Errorf("%w: %v", errUnavailable, err)
	}
	return &AuthResult{Principal: Principal{Name: service, Type: "service", AuthType: AuthTypeCert}}, nil
}

func refusalText(err error) string {
	return strings.TrimPrefix(err.Error(), workload.ErrRefused.Error()+": ")
}

// peerWorkloadCerts returns the certificates a direct gRPC peer presented when its leaf carries a
// SPIFFE ID (a workload's certificate), nil for the gateway's and the internal client's.
func peerWorkloadCerts(certs []*x509.Certificate) []*x509.Certificate {
	if len(certs) == 0 {
		return nil
	}
	for _, u := range certs[0].URIs {
		if u.Scheme == "spiffe" {
			return certs
		}
	}
	return nil
}

// Authentication methods of workload tokens (Principal.AuthType): the issuer's kind.
const (
	AuthTypeKubernetes = workload.KindKubernetes
	AuthTypeJWT        = workload.KindJWT
)

// workloadIdentities is the identities: section of the workload identity file (or policy file):
//
//	identities:
//	  issuers:
//	    - name: prod-cluster                      # named in mappings and messages
//	      kind: kubernetes                        # kubernetes or jwt
//	      issuer: https://kubernetes.default.svc  # the exact iss of its tokens
//	      audiences: [gantry]                     # required
//	      jwks_file: /etc/gantry/prod-jwks.json   # or jwks_url, or neither: OIDC discovery
//	      max_lifetime: 24h                       # optional
//	  services:
//	    - {issuer: prod-cluster, namespace: shop, service_account: orders, service: orders}
//	    - {issuer: github, claims: {repository: acme/deploy, ref: refs/heads/main}, service: deployer}
type workloadIdentities struct {
	Issuers  []workload.IssuerConfig `yaml:"issuers"`
	Services []workload.Mapping      `yaml:"services"`
}

// LoadWorkloadIdentities reads the identities: section of file and returns its verifier; nil when
// file is empty or has no such section. fetchTimeout bounds one fetch of an issuer's keys (0:
// workload.DefaultFetchTimeout).
func LoadWorkloadIdentities(file string, fetchTimeout time.Duration) (*workload.JWTVerifier, error) {
	if file == "" {
		return nil, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("workload-identity-file: %w", err)
	}
	var doc struct {
		Identities *workloadIdentities `yaml:"identities"`
		Rules      yaml.Node           `yaml:"rules"`     // the policy file's, read by ParsePolicyACL
		Approvals  yaml.Node           `yaml:"approvals"` // read by loadApprovalPolicy
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("workload-identity-file %s: %v", file, err)
	}
	if doc.Identities == nil {
		return nil, nil
	}
	v, err := workload.NewJWTVerifier(workload.JWTConfig{Issuers: doc.Identities.Issuers, Mappings: doc.Identities.Services, Leeway: 30 * time.Second,
		FetchTimeout: fetchTimeout})
	if err != nil {
		return nil, fmt.Errorf("workload-identity-file %s: %v", file, err)
	}
	return v, nil
}

// bearerJWT returns the token of an Authorization header "Bearer <JWT>". Other bearer values are no
// credential gantry reads (the call is then refused as carrying none, before its body).
func bearerJWT(authorization string) (string, bool) {
	scheme, value, ok := strings.Cut(authorization, " ")
	value = strings.TrimSpace(value)
	if !ok || !strings.EqualFold(scheme, "bearer") || !workload.LooksLikeJWT(value) {
		return "", false
	}
	return value, true
}

// bearer authenticates a workload by a token of a trusted issuer, mapped to a service principal.
func (a *authenticator) bearer(ctx context.Context, token string) (*AuthResult, error) {
	if a.tokens == nil {
		return nil, forbidden("bearer tokens are not accepted by this server: no issuer is trusted (-workload-identity-file)")
	}
	id, err := a.tokens.Verify(ctx, token)
	switch {
	case errors.Is(err, workload.ErrRefused):
		return nil, forbidden("invalid workload token: " + refusalText(err))
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("%w: %v", errUnavailable, err)
	}
	return &AuthResult{Principal: Principal{Name: id.Service, Type: "service", AuthType: id.Kind}}, nil
}
