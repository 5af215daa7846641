package ca

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/acmpca"
	"github.com/aws/aws-sdk-go-v2/service/acmpca/types"
	"github.com/aws/smithy-go"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/awsconfig"
)

// Defaults of ACMConfig, as in Confidant: poll GetCertificate every 0.2 s, 50 times.
const (
	DefaultACMSigningAlgorithm = "SHA256WITHRSA"
	DefaultACMPollInterval     = 200 * time.Millisecond
	DefaultACMPollAttempts     = 50
	defaultACMTimeout          = 10 * time.Second
	// maxTagPages stops a misbehaving endpoint that never ends the tag listing.
	maxTagPages = 100
)

// ACMClientConfig says how to reach AWS ACM Private CA; one client serves every CA.
type ACMClientConfig struct {
	// Region signs the requests; empty means the SDK's usual sources.
	Region string
	// Endpoint overrides the ACM PCA endpoint, e.g. for a VPC endpoint or a test server.
	Endpoint string
	// Timeout bounds each HTTP request; zero means 10 s.
	Timeout time.Duration
}

// NewACMClient builds the SDK client. Credentials come from the SDK's default chain; optFns adjust
// the client after that (tests use them for static credentials). It does not contact AWS.
func NewACMClient(ctx context.Context, cfg ACMClientConfig, optFns ...func(*acmpca.Options)) (*acmpca.Client, error) {
	timeout := cmp.Or(cfg.Timeout, defaultACMTimeout)
	awsCfg, err := awsconfig.Load(ctx, awsconfig.Options{
		Region: cfg.Region, Endpoint: cfg.Endpoint, ConnectTimeout: timeout, ReadTimeout: timeout, Timeout: timeout,
	})
	if err != nil {
		return nil, fmt.Errorf("ca: ACM PCA: %w", err)
	}
	return acmpca.NewFromConfig(awsCfg, func(o *acmpca.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		for _, fn := range optFns {
			fn(o)
		}
	}), nil
}

// ACMConfig is one ACM Private CA.
type ACMConfig struct {
	// ARN of the certificate authority (ACM_PRIVATE_CA_ARN_<NAME>).
	ARN string
	// SigningAlgorithm of issued certificates; empty means SHA256WITHRSA.
	SigningAlgorithm string
	// TemplateARN, when set, is passed to IssueCertificate; empty lets ACM use its end-entity
	// template, as Confidant does.
	TemplateARN string
	// PollInterval and PollAttempts bound the wait for an issued certificate; zero means the defaults.
	PollInterval time.Duration
	PollAttempts int
}

// ACM is a CA in AWS ACM Private CA.
type ACM struct {
	client *acmpca.Client
	cfg    ACMConfig
	logger *zap.Logger
}

var _ Authority = (*ACM)(nil)

// NewACM returns the CA cfg.ARN reached through client.
func NewACM(client *acmpca.Client, cfg ACMConfig, logger *zap.Logger) (*ACM, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	if cfg.ARN == "" {
		return nil, errors.New("ca: ACM Private CA needs the CA's ARN")
	}
	cfg.SigningAlgorithm = cmp.Or(cfg.SigningAlgorithm, DefaultACMSigningAlgorithm)
	known := false
	for _, a := range types.SigningAlgorithm("").Values() {
		known = known || string(a) == cfg.SigningAlgorithm
	}
	if !known {
		return nil, fmt.Errorf("ca: signing algorithm %q is not one of %v", cfg.SigningAlgorithm, types.SigningAlgorithm("").Values())
	}
	cfg.PollInterval = cmp.Or(cfg.PollInterval, DefaultACMPollInterval)
	cfg.PollAttempts = cmp.Or(cfg.PollAttempts, DefaultACMPollAttempts)
	return &ACM{client: client, cfg: cfg, logger: logger}, nil
}

// Info implements Authority: GetCertificateAuthorityCertificate and every page of ListTags.
func (a *ACM) Info(ctx context.Context) (Info, error) {
	out, err := a.client.GetCertificateAuthorityCertificate(ctx, &acmpca.GetCertificateAuthorityCertificateInput{
		CertificateAuthorityArn: aws.String(a.cfg.ARN),
	})
	if err != nil {
		return Info{}, mapACMError("GetCertificateAuthorityCertificate", err)
	}
	info := Info{Certificate: aws.ToString(out.Certificate), Chain: aws.ToString(out.CertificateChain), Tags: map[string]string{}}
	p := acmpca.NewListTagsPaginator(a.client, &acmpca.ListTagsInput{CertificateAuthorityArn: aws.String(a.cfg.ARN)},
		func(o *acmpca.ListTagsPaginatorOptions) { o.StopOnDuplicateToken = true })
	for pages := 0; p.HasMorePages() && pages < maxTagPages; pages++ {
		page, err := p.NextPage(ctx)
		if err != nil {
			return Info{}, mapACMError("ListTags", err)
		}
		for _, t := range page.Tags {
			info.Tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
		}
	}
	return info, nil
}

// Issue implements Authority: IssueCertificate, then GetCertificate until ACM has signed it. The
// idempotency token is derived from the CSR, as Confidant does, so a retried request does not issue
// twice.
func (a *ACM) Issue(ctx context.Context, csrPEM []byte, validityDays int) (Issued, error) {
	if validityDays < 1 {
		return Issued{}, fmt.Errorf("ca: validity must be at least 1 day, got %d", validityDays)
	}
	if _, err := ParseCSR(csrPEM); err != nil {
		return Issued{}, err
	}
	sum := sha256.Sum256(csrPEM)
	in := &acmpca.IssueCertificateInput{
		CertificateAuthorityArn: aws.String(a.cfg.ARN),
		Csr:                     csrPEM,
		SigningAlgorithm:        types.SigningAlgorithm(a.cfg.SigningAlgorithm),
		Validity:                &types.Validity{Type: types.ValidityPeriodTypeDays, Value: aws.Int64(int64(validityDays))},
		IdempotencyToken:        aws.String(hex.EncodeToString(sum[:])[:36]),
	}
	if a.cfg.TemplateARN != "" {
		in.TemplateArn = aws.String(a.cfg.TemplateARN)
	}
	issued, err := a.client.IssueCertificate(ctx, in)
	if err != nil {
		return Issued{}, mapACMError("IssueCertificate", err)
	}
	get := &acmpca.GetCertificateInput{CertificateAuthorityArn: aws.String(a.cfg.ARN), CertificateArn: issued.CertificateArn}
	for attempt := 1; ; attempt++ {
		out, err := a.client.GetCertificate(ctx, get)
		if err == nil {
			return Issued{Certificate: aws.ToString(out.Certificate), Chain: aws.ToString(out.CertificateChain)}, nil
		}
		var pending *types.RequestInProgressException
		if !errors.As(err, &pending) {
			return Issued{}, mapACMError("GetCertificate", err)
		}
		if attempt >= a.cfg.PollAttempts {
			return Issued{}, fmt.Errorf("%w: ACM PCA did not issue %s after %d attempts", ErrUnavailable, aws.ToString(issued.CertificateArn), attempt)
		}
		select {
		case <-ctx.Done():
			return Issued{}, fmt.Errorf("%w: waiting for ACM PCA: %w", ErrUnavailable, ctx.Err())
		case <-time.After(a.cfg.PollInterval):
		}
	}
}

// mapACMError keeps the AWS error code in the message (for the log) and classifies it: a CSR ACM
// refuses is the caller's fault, everything else is an outage or a misconfiguration of the server.
func mapACMError(op string, err error) error {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode() == "MalformedCSRException" {
		return fmt.Errorf("%w: acm-pca %s: %v", ErrInvalidCSR, op, err)
	}
	return fmt.Errorf("%w: acm-pca %s: %v", ErrUnavailable, op, err)
}
