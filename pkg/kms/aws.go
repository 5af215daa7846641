package kms

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/arn"
	awskms "github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"
	"github.com/aws/smithy-go"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/awsconfig"
)

// Defaults for the zero values of AWSConfig's connection settings.
const (
	DefaultAWSConnectTimeout = 5 * time.Second
	DefaultAWSReadTimeout    = 10 * time.Second
	DefaultAWSMaxConns       = 64
)

// ResolveKeyID answers are cached; the cap only guards against a caller feeding it unbounded
// distinct ids, since a real installation uses a handful of aliases.
const maxResolveCacheEntries = 256

// An empty key id names no key. AWS would call it a ValidationException, which the error mapping would
// report as an outage; checking first gives the answer the keyring gives.
var errEmptyKeyID = fmt.Errorf("%w: empty key id", ErrKeyNotFound)

// AWSConfig says how to reach AWS KMS.
type AWSConfig struct {
	// Region is the AWS region; empty means the SDK's usual sources (AWS_REGION, shared config).
	Region string
	// Endpoint overrides the KMS endpoint (KMS_URL), e.g. for a VPC endpoint or a test server.
	Endpoint string
	// ConnectTimeout bounds dialling and the TLS handshake.
	ConnectTimeout time.Duration
	// ReadTimeout bounds the wait for a response after the request is sent.
	ReadTimeout time.Duration
	// MaxConns caps connections to the endpoint, so a burst of requests queues instead of exhausting
	// file descriptors or tripping KMS request quotas.
	MaxConns int
}

// AWS is a Provider backed by AWS KMS.
type AWS struct {
	client *awskms.Client
	logger *zap.Logger

	mu       sync.Mutex
	resolved map[string]string // key id or alias → key ARN
}

var _ Provider = (*AWS)(nil)

// NewAWS builds an AWS KMS provider. Credentials come from the SDK's default chain; optFns adjust the
// client after that (tests use them for static credentials and to turn off retries). It does not
// contact AWS, so a misconfiguration shows up on the first call.
func NewAWS(ctx context.Context, cfg AWSConfig, logger *zap.Logger, optFns ...func(*awskms.Options)) (*AWS, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	awsCfg, err := awsconfig.Load(ctx, awsconfig.Options{
		Region:          cfg.Region,
		Endpoint:        cfg.Endpoint,
		ConnectTimeout:  cmp.Or(cfg.ConnectTimeout, DefaultAWSConnectTimeout),
		ReadTimeout:     cmp.Or(cfg.ReadTimeout, DefaultAWSReadTimeout),
		MaxConnsPerHost: cmp.Or(cfg.MaxConns, DefaultAWSMaxConns),
	})
	if err != nil {
		return nil, fmt.Errorf("kms: %w", err)
	}
	if awsCfg.Region == "" {
		return nil, errors.New("kms: no AWS region: set it in the configuration or AWS_REGION")
	}
	client := awskms.NewFromConfig(awsCfg, func(o *awskms.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		for _, fn := range optFns {
			fn(o)
		}
	})
	logger.Info("using AWS KMS", zap.String("region", awsCfg.Region), zap.String("endpoint", cfg.Endpoint))
	return &AWS{client: client, logger: logger, resolved: map[string]string{}}, nil
}

// GenerateRandom asks KMS for n random bytes. The bounds are checked here so a bad length is
// ErrInvalidLength, as with every provider, rather than a ValidationException from AWS.
func (a *AWS) GenerateRandom(ctx context.Context, n int) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkRandomLength(n); err != nil {
		return nil, err
	}
	out, err := a.client.GenerateRandom(ctx, &awskms.GenerateRandomInput{NumberOfBytes: aws.Int32(int32(n))})
	if err != nil {
		return nil, mapAWSError("GenerateRandom", err)
	}
	if len(out.Plaintext) != n {
		return nil, fmt.Errorf("%w: GenerateRandom returned %d bytes, want %d", ErrUnavailable, len(out.Plaintext), n)
	}
	return out.Plaintext, nil
}

// Encrypt encrypts plaintext under keyID with KMS's symmetric default algorithm.
func (a *AWS) Encrypt(ctx context.Context, keyID string, plaintext []byte, encryptionContext map[string]string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkPlaintext(plaintext); err != nil {
		return nil, err
	}
	if keyID == "" {
		return nil, errEmptyKeyID
	}
	out, err := a.client.Encrypt(ctx, &awskms.EncryptInput{
		KeyId:             aws.String(keyID),
		Plaintext:         plaintext,
		EncryptionContext: encryptionContext,
	})
	if err != nil {
		return nil, mapAWSError("Encrypt", err)
	}
	return out.CiphertextBlob, nil
}

// Decrypt decrypts a KMS ciphertext; the key is named inside the blob, so none is passed.
func (a *AWS) Decrypt(ctx context.Context, ciphertext []byte, encryptionContext map[string]string) ([]byte, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	if len(ciphertext) == 0 {
		// AWS would answer with a ValidationException, which says nothing about the service's health.
		return nil, "", fmt.Errorf("%w: empty ciphertext", ErrInvalidCiphertext)
	}
	out, err := a.client.Decrypt(ctx, &awskms.DecryptInput{
		CiphertextBlob:    ciphertext,
		EncryptionContext: encryptionContext,
	})
	if err != nil {
		return nil, "", mapAWSError("Decrypt", err)
	}
	return out.Plaintext, aws.ToString(out.KeyId), nil
}

// GenerateDataKey asks KMS for an AES-256 data key, returned both in plaintext and encrypted.
func (a *AWS) GenerateDataKey(ctx context.Context, keyID string, encryptionContext map[string]string) ([]byte, []byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if keyID == "" {
		return nil, nil, errEmptyKeyID
	}
	out, err := a.client.GenerateDataKey(ctx, &awskms.GenerateDataKeyInput{
		KeyId:             aws.String(keyID),
		KeySpec:           types.DataKeySpecAes256,
		EncryptionContext: encryptionContext,
	})
	if err != nil {
		return nil, nil, mapAWSError("GenerateDataKey", err)
	}
	if len(out.Plaintext) != DataKeySize {
		return nil, nil, fmt.Errorf("%w: GenerateDataKey returned a %d-byte key, want %d", ErrUnavailable, len(out.Plaintext), DataKeySize)
	}
	return out.Plaintext, out.CiphertextBlob, nil
}

// ResolveKeyID returns the key ARN for a key id, alias or ARN. Key ARNs are already canonical and
// are returned without a call; anything else is looked up once with DescribeKey and then cached,
// since callers resolve the same few aliases on every request. An alias ARN is looked up like an
// alias: it names a key but is not the key's ARN, which is what Decrypt reports.
func (a *AWS) ResolveKeyID(ctx context.Context, keyID string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if keyID == "" {
		return "", errEmptyKeyID
	}
	if isKeyARN(keyID) {
		return keyID, nil
	}
	a.mu.Lock()
	cached, ok := a.resolved[keyID]
	a.mu.Unlock()
	if ok {
		return cached, nil
	}

	out, err := a.client.DescribeKey(ctx, &awskms.DescribeKeyInput{KeyId: aws.String(keyID)})
	if err != nil {
		return "", mapAWSError("DescribeKey", err)
	}
	if out.KeyMetadata == nil || aws.ToString(out.KeyMetadata.Arn) == "" {
		return "", fmt.Errorf("%w: DescribeKey %q returned no key ARN", ErrUnavailable, keyID)
	}
	keyARN := aws.ToString(out.KeyMetadata.Arn)

	a.mu.Lock()
	if len(a.resolved) >= maxResolveCacheEntries {
		clear(a.resolved)
	}
	a.resolved[keyID] = keyARN
	a.mu.Unlock()
	a.logger.Debug("resolved KMS key", zap.String("key", keyID), zap.String("arn", keyARN))
	return keyARN, nil
}

func isKeyARN(s string) bool {
	if !strings.HasPrefix(s, "arn:") {
		return false
	}
	parsed, err := arn.Parse(s)
	return err == nil && parsed.Service == "kms" && strings.HasPrefix(parsed.Resource, "key/")
}

// mapAWSError turns an SDK error into the provider's sentinels, keeping the SDK's message so the
// cause stays readable in logs. Only answers that are about the ciphertext or the key are
// distinguished; anything else means KMS could not do its job right now.
func mapAWSError(op string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// Keep the context error visible so callers can tell their own cancellation from an outage.
		return fmt.Errorf("%w: kms %s: %w", ErrUnavailable, op, err)
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "InvalidCiphertextException", "IncorrectKeyException":
			return fmt.Errorf("%w: kms %s: %v", ErrInvalidCiphertext, op, err)
		case "NotFoundException", "DisabledException", "KMSInvalidStateException":
			return fmt.Errorf("%w: kms %s: %v", ErrKeyNotFound, op, err)
		case "AccessDeniedException":
			return fmt.Errorf("%w: kms %s: %v", ErrAccessDenied, op, err)
		}
	}
	return fmt.Errorf("%w: kms %s: %v", ErrUnavailable, op, err)
}
