package kms_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awskms "github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"

	"github.com/gantry-dev/gantry/pkg/awstest"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kms/kmstest"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
)

const testRolePrefix = "arn:aws:iam::" + kmstest.AccountID + ":role/"

// newGrantsFixture returns grants on a fake KMS whose auth key has the alias kms.AliasAuth, so every
// call also exercises resolving the alias (ListGrants and CreateGrant refuse aliases).
func newGrantsFixture(t *testing.T, minTokenVersion int) (*kms.AWSGrants, *kmstest.Server, string) {
	t.Helper()
	p, srv := newFakeAWS(t)
	keyARN := srv.CreateKey(kms.AliasAuth)
	return kms.NewAWSGrants(p, testRolePrefix, minTokenVersion, logtest.New(t)), srv, keyARN
}

func TestAWSGrantsEnsure(t *testing.T) {
	tests := []struct {
		minTokenVersion int
		wantEncryptCtx  map[string]string
	}{
		{1, map[string]string{"from": "billing"}},
		{2, map[string]string{"from": "billing", "user_type": "service"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("min-version-%d", tt.minTokenVersion), func(t *testing.T) {
			ctx := context.Background()
			g, srv, keyARN := newGrantsFixture(t, tt.minTokenVersion)

			for i := range 2 {
				st, err := g.EnsureGrants(ctx, kms.AliasAuth, "billing")
				if err != nil {
					t.Fatalf("EnsureGrants #%d: %v", i+1, err)
				}
				if st != (kms.GrantState{Encrypt: true, Decrypt: true}) {
					t.Fatalf("EnsureGrants #%d = %+v, want both", i+1, st)
				}
			}
			if n := srv.Requests("CreateGrant"); n != 2 {
				t.Errorf("CreateGrant requests = %d, want 2 (the second EnsureGrants must find both grants)", n)
			}

			grants := srv.Grants(keyARN)
			if len(grants) != 2 {
				t.Fatalf("fake holds %d grants, want 2: %+v", len(grants), grants)
			}
			byName := map[string]kmstest.Grant{}
			for _, gr := range grants {
				byName[gr.Name] = gr
			}
			want := map[string]struct {
				ops []string
				ctx map[string]string
			}{
				"billing-encrypt": {[]string{"Decrypt", "Encrypt"}, tt.wantEncryptCtx},
				"billing-decrypt": {[]string{"Decrypt"}, map[string]string{"to": "billing"}},
			}
			for name, w := range want {
				gr, ok := byName[name]
				if !ok {
					t.Errorf("no grant named %q; have %v", name, slices.Collect(maps.Keys(byName)))
					continue
				}
				if gr.GranteePrincipal != testRolePrefix+"billing" {
					t.Errorf("%s: grantee = %q, want %q", name, gr.GranteePrincipal, testRolePrefix+"billing")
				}
				if ops := slices.Sorted(slices.Values(gr.Operations)); !slices.Equal(ops, w.ops) {
					t.Errorf("%s: operations = %v, want %v", name, ops, w.ops)
				}
				if !maps.Equal(gr.Constraints.EncryptionContextSubset, w.ctx) {
					t.Errorf("%s: EncryptionContextSubset = %v, want %v", name, gr.Constraints.EncryptionContextSubset, w.ctx)
				}
				if len(gr.Constraints.EncryptionContextEquals) != 0 {
					t.Errorf("%s: unexpected EncryptionContextEquals %v", name, gr.Constraints.EncryptionContextEquals)
				}
			}

			for _, tc := range []struct {
				service string
				want    kms.GrantState
			}{
				{"billing", kms.GrantState{Encrypt: true, Decrypt: true}},
				{"payroll", kms.GrantState{}},
			} {
				// Both the alias and the key ARN name the same key.
				for _, key := range []string{kms.AliasAuth, keyARN} {
					st, err := g.Grants(ctx, key, tc.service)
					if err != nil || st != tc.want {
						t.Errorf("Grants(%s, %s) = %+v, %v; want %+v", key, tc.service, st, err, tc.want)
					}
				}
			}
		})
	}
}

// rawKMS is an SDK client on the fake, for setting up grants gantry did not make.
func rawKMS(t *testing.T, srv *kmstest.Server) *awskms.Client {
	t.Helper()
	return awskms.New(awskms.Options{
		Region:       kmstest.Region,
		BaseEndpoint: aws.String(srv.URL()),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDTEST", "test-secret", ""),
		Retryer:      awstest.ConnectionRetriesOnly(),
	})
}

func TestAWSGrantsPaginates(t *testing.T) {
	ctx := context.Background()
	g, srv, keyARN := newGrantsFixture(t, 2)
	raw := rawKMS(t, srv)
	// More unrelated grants to the same role than fit in one ListGrants page (100), so gantry's
	// grants, made after them, are only found on a later page.
	const decoys = 150
	for i := range decoys {
		_, err := raw.CreateGrant(ctx, &awskms.CreateGrantInput{
			KeyId:            aws.String(keyARN),
			GranteePrincipal: aws.String(testRolePrefix + "billing"),
			Name:             aws.String(fmt.Sprintf("other-%d", i)),
			Operations:       []types.GrantOperation{types.GrantOperationDescribeKey},
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	for i := range 2 {
		if _, err := g.EnsureGrants(ctx, kms.AliasAuth, "billing"); err != nil {
			t.Fatalf("EnsureGrants #%d: %v", i+1, err)
		}
	}
	if n := len(srv.Grants(keyARN)); n != decoys+2 {
		t.Errorf("fake holds %d grants, want %d", n, decoys+2)
	}
	before := srv.Requests("ListGrants")
	st, err := g.Grants(ctx, kms.AliasAuth, "billing")
	if err != nil || st != (kms.GrantState{Encrypt: true, Decrypt: true}) {
		t.Fatalf("Grants = %+v, %v; want both", st, err)
	}
	// Two pages; a third request only when a transport failure on loopback was retried (see
	// awstest.ConnectionRetriesOnly).
	if n := srv.Requests("ListGrants") - before; n < 2 || n > 3 {
		t.Errorf("Grants made %d ListGrants requests, want 2 pages", n)
	}
}

// A grant with the right name but the old constraints does not give the access the current settings
// call for, so it must not be reported, and EnsureGrants must make the right one.
func TestAWSGrantsStaleConstraints(t *testing.T) {
	ctx := context.Background()
	p, srv := newFakeAWS(t)
	keyARN := srv.CreateKey(kms.AliasAuth)
	v1 := kms.NewAWSGrants(p, testRolePrefix, 1, nil)
	v2 := kms.NewAWSGrants(p, testRolePrefix, 2, nil)
	if _, err := v1.EnsureGrants(ctx, keyARN, "billing"); err != nil {
		t.Fatal(err)
	}
	st, err := v2.Grants(ctx, keyARN, "billing")
	if err != nil || st != (kms.GrantState{Encrypt: false, Decrypt: true}) {
		t.Fatalf("Grants after raising the token version = %+v, %v; want only decrypt", st, err)
	}
	if _, err := v2.EnsureGrants(ctx, keyARN, "billing"); err != nil {
		t.Fatal(err)
	}
	if n := len(srv.Grants(keyARN)); n != 3 {
		t.Errorf("fake holds %d grants, want 3 (old encrypt, new encrypt, decrypt)", n)
	}
	if st, err := v2.Grants(ctx, keyARN, "billing"); err != nil || st != (kms.GrantState{Encrypt: true, Decrypt: true}) {
		t.Errorf("Grants = %+v, %v; want both", st, err)
	}
}

func TestAWSGrantsErrors(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		code       string
		wantEnsure error // EnsureGrants must match this and no other sentinel
		grantsErr  bool  // whether Grants fails; if not it must report no grants
	}{
		{"internal", http.StatusInternalServerError, "KMSInternalException", kms.ErrUnavailable, true},
		{"unavailable", http.StatusServiceUnavailable, "ServiceUnavailableException", kms.ErrUnavailable, true},
		{"throttled", http.StatusBadRequest, "ThrottlingException", kms.ErrUnavailable, true},
		{"invalid-arn", http.StatusBadRequest, "InvalidArnException", kms.ErrRoleNotFound, false},
		{"validation", http.StatusBadRequest, "ValidationException", kms.ErrRoleNotFound, false},
	}
	sentinels := []error{kms.ErrUnavailable, kms.ErrRoleNotFound, kms.ErrKeyNotFound}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			g, srv, keyARN := newGrantsFixture(t, 2)
			// The key ARN needs no DescribeKey, so the injected fault hits ListGrants.
			srv.FailNext(1, tt.status, tt.code)
			_, err := g.EnsureGrants(ctx, keyARN, "billing")
			if !errors.Is(err, tt.wantEnsure) {
				t.Fatalf("EnsureGrants err = %v, want %v", err, tt.wantEnsure)
			}
			for _, other := range sentinels {
				if other != tt.wantEnsure && errors.Is(err, other) {
					t.Errorf("EnsureGrants err = %v also matches %v", err, other)
				}
			}
			if len(srv.Grants(keyARN)) != 0 {
				t.Errorf("EnsureGrants created grants despite failing")
			}

			srv.FailNext(1, tt.status, tt.code)
			st, err := g.Grants(ctx, keyARN, "billing")
			if tt.grantsErr {
				if !errors.Is(err, kms.ErrUnavailable) {
					t.Errorf("Grants err = %v, want ErrUnavailable", err)
				}
			} else if err != nil || st != (kms.GrantState{}) {
				t.Errorf("Grants = %+v, %v; want no grants and no error", st, err)
			}

			// The fault was for one request; the manager must work again afterwards.
			if _, err := g.EnsureGrants(ctx, keyARN, "billing"); err != nil {
				t.Errorf("EnsureGrants after the fault: %v", err)
			}
		})
	}

	t.Run("unreachable", func(t *testing.T) {
		g, srv, keyARN := newGrantsFixture(t, 2)
		srv.Close()
		if _, err := g.EnsureGrants(context.Background(), keyARN, "billing"); !errors.Is(err, kms.ErrUnavailable) {
			t.Errorf("EnsureGrants err = %v, want ErrUnavailable", err)
		}
		if _, err := g.Grants(context.Background(), keyARN, "billing"); !errors.Is(err, kms.ErrUnavailable) {
			t.Errorf("Grants err = %v, want ErrUnavailable", err)
		}
	})

	t.Run("unknown-key", func(t *testing.T) {
		g, _, _ := newGrantsFixture(t, 2)
		if _, err := g.EnsureGrants(context.Background(), "alias/missing", "billing"); !errors.Is(err, kms.ErrKeyNotFound) {
			t.Errorf("EnsureGrants err = %v, want ErrKeyNotFound", err)
		}
	})

	t.Run("invalid-service-id", func(t *testing.T) {
		g, srv, keyARN := newGrantsFixture(t, 2)
		for _, id := range []string{"", "a/b", "role:x", string(make([]byte, 65))} {
			if _, err := g.EnsureGrants(context.Background(), keyARN, id); !errors.Is(err, kms.ErrRoleNotFound) {
				t.Errorf("EnsureGrants(%q) err = %v, want ErrRoleNotFound", id, err)
			}
			if st, err := g.Grants(context.Background(), keyARN, id); err != nil || st != (kms.GrantState{}) {
				t.Errorf("Grants(%q) = %+v, %v; want none", id, st, err)
			}
		}
		if n := srv.Requests("ListGrants") + srv.Requests("CreateGrant"); n != 0 {
			t.Errorf("%d requests reached KMS for invalid service ids", n)
		}
	})
}
