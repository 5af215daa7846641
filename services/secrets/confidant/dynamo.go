package confidant

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/gantry-dev/gantry/pkg/awsconfig"
)

// NewDynamoDB returns the DynamoDB client the import reads Confidant's table with: the SDK's default
// credential chain, region, and DYNAMODB_URL as the endpoint when set.
func NewDynamoDB(ctx context.Context, cfg Config, region string, optFns ...func(*dynamodb.Options)) (*dynamodb.Client, error) {
	awsCfg, err := awsconfig.Load(ctx, awsconfig.Options{
		Region:          region,
		Endpoint:        cfg.URL,
		ConnectTimeout:  5 * time.Second,
		ReadTimeout:     30 * time.Second,
		MaxConnsPerHost: 16,
	})
	if err != nil {
		return nil, fmt.Errorf("dynamodb: %w", err)
	}
	if awsCfg.Region == "" {
		return nil, fmt.Errorf("dynamodb: no AWS region: set AWS_DEFAULT_REGION")
	}
	return dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) {
		if cfg.URL != "" {
			o.BaseEndpoint = aws.String(cfg.URL)
		}
		for _, fn := range optFns {
			fn(o)
		}
	}), nil
}
