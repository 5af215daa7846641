package secrets

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/gantry-dev/gantry/pkg/ca"
	"github.com/gantry-dev/gantry/pkg/workload"
)

// Authentication methods of workloads, as Principal.AuthType and audit lines name them.
const (
	AuthTypeCert = "cert"
)

// ClientCertHeader is the gateway-only metadata key of a REST caller's client certificate chain.
const ClientCertHeader = workload.ClientCertHeader

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
