package loginlink

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/kms"
)

func TestMintRedeemOnce(t *testing.T) {
	ctx := context.Background()
	ring, err := kms.OpenKeyring(filepath.Join(t.TempDir(), "keyring.json"), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRedeemer(ctx, ring, kms.AliasUserAuth, "gantry")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	code, err := Mint(ctx, ring, kms.AliasUserAuth, "gantry", " Alice@Example.com", DefaultLifetime, now)
	if err != nil {
		t.Fatal(err)
	}
	if email, err := r.Redeem(ctx, code); err != nil || email != "alice@example.com" {
		t.Fatalf("first use: %q, %v", email, err)
	}
	if _, err := r.Redeem(ctx, code); !errors.Is(err, ErrInvalid) {
		t.Errorf("second use: %v, want ErrInvalid", err)
	}

	refused := map[string]func() string{
		"expired": func() string {
			c, _ := Mint(ctx, ring, kms.AliasUserAuth, "gantry", "a@x", time.Minute, now)
			r.now = func() time.Time { return now.Add(2 * time.Minute) }
			return c
		},
		"before start": func() string {
			c, _ := Mint(ctx, ring, kms.AliasUserAuth, "gantry", "a@x", time.Minute, r.notBefore.Add(-time.Second))
			return c
		},
		"service key":  func() string { c, _ := Mint(ctx, ring, kms.AliasAuth, "gantry", "a@x", time.Minute, now); return c },
		"other server": func() string { c, _ := Mint(ctx, ring, kms.AliasUserAuth, "other", "a@x", time.Minute, now); return c },
		"tampered":     func() string { return code[:len(code)-2] + "AA" },
		"garbage":      func() string { return "not base64!" },
	}
	for name, mint := range refused {
		r.now = time.Now
		c := mint()
		if _, err := r.Redeem(ctx, c); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := Mint(ctx, ring, kms.AliasUserAuth, "gantry", "a@x", MaxLifetime+time.Second, now); err == nil {
		t.Error("a lifetime over MaxLifetime was accepted")
	}
}
