package kms_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awskms "github.com/aws/aws-sdk-go-v2/service/kms"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kms/kmstest"
)

func TestAWSErrorMapping(t *testing.T) {
	ctx := context.Background()
	p, srv := newFakeAWS(t)
	srv.CreateKey(kms.AliasMaster)
	blob, err := p.Encrypt(ctx, kms.AliasMaster, []byte("secret"), nil)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		status int
		code   string
		want   error
	}{
		{http.StatusInternalServerError, "KMSInternalException", kms.ErrUnavailable},
		{http.StatusServiceUnavailable, "ServiceUnavailableException", kms.ErrUnavailable},
		{http.StatusBadRequest, "ThrottlingException", kms.ErrUnavailable},
		{http.StatusBadRequest, "DependencyTimeoutException", kms.ErrUnavailable},
		// Denied also matches ErrUnavailable (what callers saw before ErrAccessDenied), nothing else.
		{http.StatusBadRequest, "AccessDeniedException", kms.ErrAccessDenied},
		{http.StatusBadRequest, "NotFoundException", kms.ErrKeyNotFound},
		{http.StatusBadRequest, "DisabledException", kms.ErrKeyNotFound},
		{http.StatusBadRequest, "KMSInvalidStateException", kms.ErrKeyNotFound},
		{http.StatusBadRequest, "InvalidCiphertextException", kms.ErrInvalidCiphertext},
		{http.StatusBadRequest, "IncorrectKeyException", kms.ErrInvalidCiphertext},
	}
	sentinels := []error{kms.ErrUnavailable, kms.ErrKeyNotFound, kms.ErrInvalidCiphertext}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			srv.FailNext(1, tt.status, tt.code)
			_, _, err := p.Decrypt(ctx, blob, nil)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if tt.want == kms.ErrAccessDenied && (!errors.Is(err, kms.ErrUnavailable) || strings.Contains(err.Error(), "unavailable")) {
				t.Errorf("denied: err = %q, want one that matches ErrUnavailable and does not say unavailable", err)
			}
			for _, other := range sentinels {
				if other != tt.want && errors.Is(err, other) && (tt.want != kms.ErrAccessDenied || other != kms.ErrUnavailable) {
					t.Errorf("err = %v also matches %v", err, other)
				}
			}
			if !strings.Contains(err.Error(), tt.code) {
				t.Errorf("error %q lost the AWS error code %s", err, tt.code)
			}
			// The fault was for one request only; the provider must not be left broken.
			if _, _, err := p.Decrypt(ctx, blob, nil); err != nil {
				t.Errorf("Decrypt after the fault: %v", err)
			}
		})
	}
}

func TestAWSUnreachable(t *testing.T) {
	ctx := context.Background()
	p, srv := newFakeAWS(t)
	srv.CreateKey(kms.AliasMaster)
	srv.Close()

	calls := map[string]func() error{
		"GenerateRandom":  func() error { _, err := p.GenerateRandom(ctx, 16); return err },
		"Encrypt":         func() error { _, err := p.Encrypt(ctx, kms.AliasMaster, []byte("x"), nil); return err },
		"Decrypt":         func() error { _, _, err := p.Decrypt(ctx, []byte("blob"), nil); return err },
		"GenerateDataKey": func() error { _, _, err := p.GenerateDataKey(ctx, kms.AliasMaster, nil); return err },
		"ResolveKeyID":    func() error { _, err := p.ResolveKeyID(ctx, kms.AliasMaster); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			if err := call(); !errors.Is(err, kms.ErrUnavailable) {
				t.Errorf("err = %v, want ErrUnavailable", err)
			}
		})
	}
}

// The SDK's own retries stay in force in production; this checks optFns reach the client and that a
// transient fault retried away never surfaces.
func TestAWSRetriesTransientFaults(t *testing.T) {
	p, srv := newFakeAWS(t, func(o *awskms.Options) {
		o.RetryMaxAttempts = 0
		o.Retryer = retry.AddWithMaxBackoffDelay(retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = 3
		}), time.Millisecond)
	})
	srv.CreateKey(kms.AliasMaster)
	srv.FailNext(2, http.StatusInternalServerError, "KMSInternalException")
	if _, err := p.Encrypt(context.Background(), kms.AliasMaster, []byte("x"), nil); err != nil {
		t.Fatalf("Encrypt: %v", err)
	}
	if n := srv.Requests("Encrypt"); n != 3 {
		t.Errorf("server saw %d Encrypt requests, want 3 (two failures, one success)", n)
	}
}

func TestAWSResolveKeyID(t *testing.T) {
	ctx := context.Background()
	p, srv := newFakeAWS(t)
	arn := srv.CreateKey(kms.AliasMaster)
	keyUUID := arn[strings.LastIndex(arn, "/")+1:]

	tests := []struct {
		name          string
		keyID         string
		wantDescribes int // cumulative DescribeKey requests after this call
	}{
		{"alias", kms.AliasMaster, 1},
		{"alias again is cached", kms.AliasMaster, 1},
		{"key ARN needs no call", arn, 1},
		{"bare key id", keyUUID, 2},
		{"bare key id again", keyUUID, 2},
		{"alias ARN resolves to the key ARN", "arn:aws:kms:us-east-1:111122223333:alias/gantry-master", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := p.ResolveKeyID(ctx, tt.keyID)
			if err != nil || got != arn {
				t.Fatalf("ResolveKeyID(%q) = %q, %v; want %q", tt.keyID, got, err, arn)
			}
			if n := srv.Requests("DescribeKey"); n != tt.wantDescribes {
				t.Errorf("DescribeKey requests = %d, want %d", n, tt.wantDescribes)
			}
		})
	}

	// Failures are not cached: a key created after a miss must be found.
	if _, err := p.ResolveKeyID(ctx, "alias/later"); !errors.Is(err, kms.ErrKeyNotFound) {
		t.Fatalf("err = %v, want ErrKeyNotFound", err)
	}
	later := srv.CreateKey("alias/later")
	if got, err := p.ResolveKeyID(ctx, "alias/later"); err != nil || got != later {
		t.Errorf("after CreateKey, ResolveKeyID = %q, %v; want %q", got, err, later)
	}
}

func TestAWSGenerateRandomChecksBoundsLocally(t *testing.T) {
	p, srv := newFakeAWS(t)
	for _, n := range []int{0, kms.MaxRandomBytes + 1} {
		if _, err := p.GenerateRandom(context.Background(), n); !errors.Is(err, kms.ErrInvalidLength) {
			t.Errorf("GenerateRandom(%d) err = %v, want ErrInvalidLength", n, err)
		}
	}
	if n := srv.Requests("GenerateRandom"); n != 0 {
		t.Errorf("%d GenerateRandom requests reached KMS for invalid lengths, want 0", n)
	}
}

func TestNewAWSConfigErrors(t *testing.T) {
	// Keep the SDK from finding a region in the environment or a developer's ~/.aws.
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))

	tests := []struct {
		name    string
		cfg     kms.AWSConfig
		wantErr string
	}{
		{"no region", kms.AWSConfig{}, "region"},
		{"endpoint without scheme", kms.AWSConfig{Region: kmstest.Region, Endpoint: "localhost:4566"}, "endpoint"},
		{"endpoint with other scheme", kms.AWSConfig{Region: kmstest.Region, Endpoint: "ftp://kms.local"}, "endpoint"},
		{"endpoint without host", kms.AWSConfig{Region: kmstest.Region, Endpoint: "http://"}, "endpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := kms.NewAWS(context.Background(), tt.cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
	if _, err := kms.NewAWS(context.Background(), kms.AWSConfig{Region: kmstest.Region, Endpoint: "https://kms.example"}, nil); err != nil {
		t.Errorf("valid configuration: %v", err)
	}
}
