package iamroles

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/awsconfig"
)

// DefaultTimeout bounds one ListRoles request when AWSConfig.Timeout is zero. A full page of 1000
// roles, each with its trust policy, can be a few megabytes, so it is longer than a KMS call needs.
const DefaultTimeout = 30 * time.Second

// IAM is a global service whose requests are signed for us-east-1 (in the aws partition), so unlike
// KMS a missing region has an obvious answer.
const defaultRegion = "us-east-1"

// listRolesPageSize is the most roles IAM returns per page; bigger pages mean fewer rate-limited calls.
const listRolesPageSize = 1000

// maxListRolesPages stops a misbehaving endpoint that never ends the listing from running forever;
// 1000 pages is a million roles, far past IAM's per-account quota.
const maxListRolesPages = 1000

// AWSConfig says how to reach IAM.
type AWSConfig struct {
	// Region signs the requests; empty means the SDK's usual sources, then us-east-1.
	Region string
	// Endpoint overrides the IAM endpoint, e.g. for a VPC endpoint or a test server.
	Endpoint string
	// Timeout bounds each HTTP request (not the whole paginated listing); zero means DefaultTimeout.
	Timeout time.Duration
}

// AWS lists the account's roles with IAM ListRoles.
type AWS struct {
	client *iam.Client
	logger *zap.Logger
}

var _ Lister = (*AWS)(nil)

// NewAWS builds an IAM lister. Credentials come from the SDK's default chain; optFns adjust the client
// after that (tests use them for static credentials and to turn off retries). It does not contact
// AWS, so a misconfiguration shows up on the first call.
func NewAWS(ctx context.Context, cfg AWSConfig, logger *zap.Logger, optFns ...func(*iam.Options)) (*AWS, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("iamroles: negative IAM timeout %s", cfg.Timeout)
	}
	timeout := cmp.Or(cfg.Timeout, DefaultTimeout)
	awsCfg, err := awsconfig.Load(ctx, awsconfig.Options{
		Region: cfg.Region, Endpoint: cfg.Endpoint, ConnectTimeout: timeout, ReadTimeout: timeout, Timeout: timeout,
	})
	if err != nil {
		return nil, fmt.Errorf("iamroles: IAM: %w", err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = defaultRegion
	}
	client := iam.NewFromConfig(awsCfg, func(o *iam.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		for _, fn := range optFns {
			fn(o)
		}
	})
	logger.Info("listing IAM roles from AWS", zap.String("region", awsCfg.Region), zap.String("endpoint", cfg.Endpoint))
	return &AWS{client: client, logger: logger}, nil
}

// Roles returns the names of all roles in the account, sorted. Any failed page fails the whole
// listing: a partial list would silently hide services from the caller.
func (a *AWS) Roles(ctx context.Context) ([]string, error) {
	p := iam.NewListRolesPaginator(a.client, &iam.ListRolesInput{MaxItems: aws.Int32(listRolesPageSize)},
		func(o *iam.ListRolesPaginatorOptions) { o.StopOnDuplicateToken = true })
	names := []string{} // an empty account lists as [], not null, when encoded
	for pages := 0; p.HasMorePages(); pages++ {
		if pages == maxListRolesPages {
			return nil, fmt.Errorf("iamroles: ListRoles returned more than %d pages", maxListRolesPages)
		}
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("iamroles: ListRoles: %w", err)
		}
		for _, r := range out.Roles {
			if name := aws.ToString(r.RoleName); name != "" {
				names = append(names, name)
			}
		}
	}
	slices.Sort(names)
	a.logger.Debug("listed IAM roles", zap.Int("roles", len(names)))
	return names, nil
}
