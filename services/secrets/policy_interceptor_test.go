package secrets

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/rpcpolicy"
)

// TestInterceptorRefusesMethodsWithoutPolicy: a secrets method missing from the policy table never
// reaches its handler.
func TestInterceptorRefusesMethodsWithoutPolicy(t *testing.T) {
	s := &Server{logger: logtest.New(t)}
	called := false
	handler := func(context.Context, any) (any, error) { called = true; return nil, nil }
	for _, table := range []rpcpolicy.Table{{}, policies} {
		_, err := s.authInterceptor(table)(context.Background(), nil,
			&grpc.UnaryServerInfo{FullMethod: "/secrets.v1.SecretsService/NotARealMethod"}, handler)
		if status.Code(err) != codes.PermissionDenied || called {
			t.Fatalf("err = %v, handler called %v", err, called)
		}
	}
	_, err := s.authInterceptor(rpcpolicy.Table{})(context.Background(), nil,
		&grpc.UnaryServerInfo{FullMethod: "/secrets.v1.SecretsService/ListCredentials"}, handler)
	if status.Code(err) != codes.PermissionDenied || called {
		t.Fatalf("ListCredentials with an empty table: err = %v, handler called %v", err, called)
	}
}

func TestEmailSuffixWithoutAtMatchesTheDomainOnly(t *testing.T) {
	for _, tc := range []struct {
		email, suffix string
		want          bool
	}{
		{"someone@example.com", "example.com", true},
		{"someone@eu.example.com", "example.com", true},
		{"someone@evilexample.com", "example.com", false},
		{"someone@example.com.evil.org", "example.com", false},
		{"example.com", "example.com", false},
		{"someone@example.com", "@example.com", true},
		{"someone@eu.example.com", "@example.com", false},
	} {
		if got := emailSuffixMatches(tc.email, tc.suffix); got != tc.want {
			t.Errorf("emailSuffixMatches(%q, %q) = %v, want %v", tc.email, tc.suffix, got, tc.want)
		}
	}
}

func TestShortSessionSecretIsRefused(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Auth.SessionSecret = "x"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "SESSION_SECRET") {
		t.Errorf("one-byte SESSION_SECRET: %v", err)
	}
	cfg.Auth.SessionSecret = strings.Repeat("k", 32)
	if err := cfg.Validate(); err != nil {
		t.Errorf("32-byte SESSION_SECRET: %v", err)
	}
}
