package kmsauth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
)

// countingKMS counts Decrypt calls, to see the validated-token cache work.
type countingKMS struct {
	kms.Provider
	decrypts atomic.Int32
}

func (c *countingKMS) Decrypt(ctx context.Context, blob []byte, ec map[string]string) ([]byte, string, error) {
	c.decrypts.Add(1)
	return c.Provider.Decrypt(ctx, blob, ec)
}

type fixture struct {
	kms    *countingKMS
	v      *Validator
	now    time.Time
	scoped string
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	ctx := context.Background()
	ring, err := kms.OpenKeyring(filepath.Join(t.TempDir(), "keyring.json"), logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	scoped, err := ring.CreateKey(ctx, "alias/scoped-prod")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{kms: &countingKMS{Provider: ring}, now: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), scoped: scoped}
	f.v, err = NewValidator(ctx, f.kms, Config{
		To: "gantry", AuthKey: "alias/gantry-auth", UserAuthKey: "alias/gantry-user-auth",
		ScopedAuthKeys: map[string]string{"alias/scoped-prod": "prod"}, MaxLifetime: time.Hour,
		MinVersion: 1, MaxVersion: 2, UserTypes: []string{"service", "user"}, CacheSize: 16,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.v.now = func() time.Time { return f.now }
	return f
}

// rawToken encrypts an arbitrary validity window, for tokens Generate would refuse to make.
func (f *fixture) rawToken(t *testing.T, key string, u Username, to string, notBefore, notAfter time.Time) string {
	t.Helper()
	plain, _ := json.Marshal(window{NotBefore: notBefore.Format(TimeFormat), NotAfter: notAfter.Format(TimeFormat)})
	blob, err := f.kms.Encrypt(context.Background(), key, plain, u.EncryptionContext(to))
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(blob)
}

func TestParseUsername(t *testing.T) {
	tests := []struct {
		in      string
		want    Username
		wantErr bool
	}{
		{in: "2/service/api-production", want: Username{2, "service", "api-production"}},
		{in: "2/user/alice", want: Username{2, "user", "alice"}},
		{in: "legacy-service", want: Username{1, "service", "legacy-service"}},
		{in: "", wantErr: true},
		{in: "2/user", wantErr: true},
		{in: "two/user/alice", wantErr: true},
		{in: "1/user/alice", wantErr: true},
		{in: "2//alice", wantErr: true},
		{in: "2/user/", wantErr: true},
		{in: "2/user/a/b", wantErr: true},
		{in: "2/user/al\nice", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseUsername(tt.in)
		if (err != nil) != tt.wantErr || (!tt.wantErr && got != tt.want) {
			t.Errorf("ParseUsername(%q) = %+v, %v; want %+v (error %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err != nil && !errors.Is(err, ErrInvalidUsername) {
			t.Errorf("ParseUsername(%q) error %v is not ErrInvalidUsername", tt.in, err)
		}
	}
}

func TestValidate(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	svc := Username{2, "service", "api"}
	user := Username{2, "user", "alice"}
	gen := func(key string, u Username, to string, lifetime time.Duration, at time.Time) string {
		tok, err := Generate(ctx, f.kms, key, u, to, lifetime, at)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	tests := []struct {
		name        string
		username    string
		token       string
		wantErr     error
		wantAccount string
	}{
		{"service token", "2/service/api", gen("alias/gantry-auth", svc, "gantry", 10*time.Minute, f.now), nil, ""},
		{"user token", "2/user/alice", gen("alias/gantry-user-auth", user, "gantry", 10*time.Minute, f.now), nil, ""},
		{"v1 service token", "api", gen("alias/gantry-auth", Username{1, "service", "api"}, "gantry", 10*time.Minute, f.now), nil, ""},
		{"scoped key gives the account", "2/service/api", gen("alias/scoped-prod", svc, "gantry", 10*time.Minute, f.now), nil, "prod"},
		{"token for another server", "2/service/api", gen("alias/gantry-auth", svc, "other", 10*time.Minute, f.now), ErrInvalidToken, ""},
		{"token of another caller", "2/service/evil", gen("alias/gantry-auth", svc, "gantry", 10*time.Minute, f.now), ErrInvalidToken, ""},
		{"user claiming to be a service", "2/service/alice", gen("alias/gantry-user-auth", Username{2, "service", "alice"}, "gantry", 10*time.Minute, f.now), ErrWrongKey, ""},
		{"service key for a user", "2/user/alice", gen("alias/gantry-auth", user, "gantry", 10*time.Minute, f.now), ErrWrongKey, ""},
		{"expired", "2/service/api", gen("alias/gantry-auth", svc, "gantry", 10*time.Minute, f.now.Add(-time.Hour)), ErrExpired, ""},
		{"not yet valid", "2/service/api", f.rawToken(t, "alias/gantry-auth", svc, "gantry", f.now.Add(time.Minute), f.now.Add(10*time.Minute)), ErrExpired, ""},
		{"lifetime over the maximum", "2/service/api", f.rawToken(t, "alias/gantry-auth", svc, "gantry", f.now.Add(-time.Minute), f.now.Add(2*time.Hour)), ErrLifetime, ""},
		// Two days and one minute: the reference only compared seconds of day and let this pass.
		{"multi-day lifetime", "2/service/api", f.rawToken(t, "alias/gantry-auth", svc, "gantry", f.now.Add(-time.Minute), f.now.Add(48*time.Hour)), ErrLifetime, ""},
		{"user type not allowed", "2/robot/r2", gen("alias/gantry-auth", Username{2, "robot", "r2"}, "gantry", 10*time.Minute, f.now), ErrUserType, ""},
		{"version too high", "3/service/api", "x", ErrVersion, ""},
		{"not base64", "2/service/api", "%%%", ErrInvalidToken, ""},
		{"garbage ciphertext", "2/service/api", base64.StdEncoding.EncodeToString([]byte("garbage")), ErrInvalidToken, ""},
		{"empty token", "2/service/api", "", ErrInvalidToken, ""},
		{"malformed username", "2/service", "x", ErrInvalidUsername, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := f.v.Validate(ctx, tt.username, tt.token)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if id.Account != tt.wantAccount || id.Username.String() != tt.username {
				t.Errorf("identity %+v, want %s account %q", id, tt.username, tt.wantAccount)
			}
		})
	}
}

func TestCacheStillChecksTheWindow(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tok, err := Generate(ctx, f.kms, "alias/gantry-auth", Username{2, "service", "api"}, "gantry", 10*time.Minute, f.now)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := f.v.Validate(ctx, "2/service/api", tok); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.kms.decrypts.Load(); n != 1 {
		t.Errorf("%d KMS decrypts for three validations, want 1 (cached)", n)
	}
	f.now = f.now.Add(8 * time.Minute) // past not_after = now - 3min + 10min
	if _, err := f.v.Validate(ctx, "2/service/api", tok); !errors.Is(err, ErrExpired) {
		t.Errorf("cached token after expiry: %v, want ErrExpired", err)
	}
	// The cache key includes the username: the same token under another name is checked afresh.
	if _, err := f.v.Validate(ctx, "2/service/other", tok); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("token replayed under another name: %v", err)
	}
}

func TestNewValidatorNamesTheSetting(t *testing.T) {
	ring, err := kms.OpenKeyring(filepath.Join(t.TempDir(), "k.json"), logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewValidator(context.Background(), ring, Config{To: "gantry", AuthKey: "alias/nope", MinVersion: 1, MaxVersion: 2})
	if err == nil || err.Error()[:len("AUTH_KEY")] != "AUTH_KEY" {
		t.Errorf("unknown AUTH_KEY: %v", err)
	}
	if _, err := NewValidator(context.Background(), ring, Config{MinVersion: 1, MaxVersion: 2}); err == nil {
		t.Error("missing AUTH_CONTEXT accepted")
	}
}

func FuzzValidate(f *testing.F) {
	f.Add("2/service/api", "AAAA")
	f.Add("api", "")
	f.Add("2/user/alice", "R0tSMQ==")
	fx := newFixture(f)
	f.Fuzz(func(t *testing.T, username, token string) {
		_, _ = fx.v.Validate(context.Background(), username, token)
	})
}
