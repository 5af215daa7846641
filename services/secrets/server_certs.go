package secrets

import (
	"context"
	"maps"

	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

func caToPB(v CAView) *secretsv1.CertificateAuthority {
	tags := maps.Clone(v.Tags)
	if tags == nil {
		tags = map[string]string{}
	}
	return &secretsv1.CertificateAuthority{Ca: v.Name, Certificate: v.Certificate, CertificateChain: v.Chain, Tags: tags}
}

// ListCertificateAuthorities implements secretsv1.SecretsServiceServer.
func (s *Server) ListCertificateAuthorities(ctx context.Context, _ *secretsv1.ListCertificateAuthoritiesRequest) (*secretsv1.ListCertificateAuthoritiesResponse, error) {
	views, err := s.svc.ListCAs(ctx)
	if err != nil {
		return nil, s.fail(err)
	}
	resp := &secretsv1.ListCertificateAuthoritiesResponse{Cas: make([]*secretsv1.CertificateAuthority, len(views))}
	for i, v := range views {
		resp.Cas[i] = caToPB(v)
	}
	return resp, nil
}

// GetCertificateAuthority implements secretsv1.SecretsServiceServer.
func (s *Server) GetCertificateAuthority(ctx context.Context, req *secretsv1.GetCertificateAuthorityRequest) (*secretsv1.GetCertificateAuthorityResponse, error) {
	v, err := s.svc.GetCA(ctx, req.GetCa())
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.GetCertificateAuthorityResponse{CertificateAuthority: caToPB(v)}, nil
}

// GetCertificate implements secretsv1.SecretsServiceServer.
func (s *Server) GetCertificate(ctx context.Context, req *secretsv1.GetCertificateRequest) (*secretsv1.GetCertificateResponse, error) {
	got, err := s.svc.GetCertificate(ctx, CertificateRequest{
		CA: req.GetCa(), CN: req.GetCn(), SANs: req.GetSan(), ValidityDays: int(req.GetValidity()), KeyType: req.GetKeyType(),
	})
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.GetCertificateResponse{Certificate: got.Certificate, CertificateChain: got.Chain, Key: &got.Key}, nil
}

// IssueCertificate implements secretsv1.SecretsServiceServer.
func (s *Server) IssueCertificate(ctx context.Context, req *secretsv1.IssueCertificateRequest) (*secretsv1.IssueCertificateResponse, error) {
	got, err := s.svc.IssueCertificate(ctx, req.GetCa(), req.GetCsr(), int(req.GetValidity()))
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.IssueCertificateResponse{Certificate: got.Certificate, CertificateChain: got.Chain}, nil
}
