package loginlink

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/kms"
)

// memoryNonces is a UsedNonces in memory, shared by the Redeemers of a test as a store is shared by
// replicas.
type memoryNonces struct {
	mu      sync.Mutex
	expires map[string]time.Time
	err     error
}

func (m *memoryNonces) ClaimLoginNonce(_ context.Context, nonce string, expires time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return false, m.err
	}
	if _, ok := m.expires[nonce]; ok {
		return false, nil
	}
	m.expires[nonce] = expires
	return true, nil
}

func TestMintRedeemOnce(t *testing.T) {
	ctx := context.Background()
	ring, err := kms.OpenKeyring(filepath.Join(t.TempDir(), "keyring.json"), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	used := &memoryNonces{expires: map[string]time.Time{}}
	r, err := NewRedeemer(ctx, ring, kms.AliasUserAuth, "gantry", used)
	if err != nil {
		t.Fatal(err)
	}
	// A second replica sharing the store.
	other, err := NewRedeemer(ctx, ring, kms.AliasUserAuth, "gantry", used)
	if err != nil {
		t.Fatal(err)
	}
	// The test owns the clock from start to end: every redeemer reads now, which never moves; an
	// expired link is one made long enough before it. (A clock swapped by one case and read by the
	// next failed 2 runs in 30, depending on map order.)
	now := time.Now()
	clock := func() time.Time { return now }
	r.now, other.now = clock, clock
	code, err := Mint(ctx, ring, kms.AliasUserAuth, "gantry", " Alice@Example.com", DefaultLifetime, now)
	if err != nil {
		t.Fatal(err)
	}
	if email, err := r.Redeem(ctx, code); err != nil || email != "alice@example.com" {
		t.Fatalf("first use: %q, %v", email, err)
	}
	for name, again := range map[string]*Redeemer{"same replica": r, "other replica": other} {
		if _, err := again.Redeem(ctx, code); !errors.Is(err, ErrInvalid) {
			t.Errorf("second use on the %s: %v, want ErrInvalid", name, err)
		}
	}
	for nonce, exp := range used.expires {
		if want := now.Add(DefaultLifetime + ClockSkewMargin); exp.Sub(want).Abs() > time.Millisecond {
			t.Errorf("nonce %s kept until %v, want the link's expiry plus the skew margin %v", nonce, exp, want)
		}
	}

	refused := map[string]func() string{
		"expired": func() string {
			c, _ := Mint(ctx, ring, kms.AliasUserAuth, "gantry", "a@x", time.Minute, now.Add(-2*time.Minute))
			return c
		},
		"service key":  func() string { c, _ := Mint(ctx, ring, kms.AliasAuth, "gantry", "a@x", time.Minute, now); return c },
		"other server": func() string { c, _ := Mint(ctx, ring, kms.AliasUserAuth, "other", "a@x", time.Minute, now); return c },
		"tampered":     func() string { return code[:len(code)-2] + "AA" },
		"garbage":      func() string { return "not base64!" },
	}
	claims := len(used.expires)
	for name, mint := range refused {
		c := mint()
		if _, err := r.Redeem(ctx, c); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if len(used.expires) != claims {
		t.Errorf("refused links wrote %d nonces to the store; only valid links may", len(used.expires)-claims)
	}
	if _, err := Mint(ctx, ring, kms.AliasUserAuth, "gantry", "a@x", MaxLifetime+time.Second, now); err == nil {
		t.Error("a lifetime over MaxLifetime was accepted")
	}

	// A link made before the redeemer started is fine now that used nonces outlive the process.
	before, _ := Mint(ctx, ring, kms.AliasUserAuth, "gantry", "b@x", time.Minute, now.Add(-30*time.Second))
	late, err := NewRedeemer(ctx, ring, kms.AliasUserAuth, "gantry", used)
	if err != nil {
		t.Fatal(err)
	}
	late.now = clock
	if email, err := late.Redeem(ctx, before); err != nil || email != "b@x" {
		t.Errorf("a link made before the start: %q, %v; want accepted", email, err)
	}

	// A store that fails is not a refused link: the error is the store's, not ErrInvalid.
	used.err = errors.New("store down")
	fresh, _ := Mint(ctx, ring, kms.AliasUserAuth, "gantry", "c@x", time.Minute, now)
	if _, err := r.Redeem(ctx, fresh); err == nil || errors.Is(err, ErrInvalid) {
		t.Errorf("store failure: %v, want the store's error", err)
	}
}
