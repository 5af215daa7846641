package secrets

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/credpair"
	"github.com/gantry-dev/gantry/pkg/kms"
)

func testKeyring(t *testing.T) kms.Provider {
	t.Helper()
	ring, err := kms.OpenKeyring(filepath.Join(t.TempDir(), "keyring.json"), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	return ring
}

// TestBarrierRoundTripWrongKeyAndTampering: sealed pairs open to what was sealed (also with the data
// key cache cold), never under another keyring, and not after any byte of the blob changed.
func TestBarrierRoundTripWrongKeyAndTampering(t *testing.T) {
	ctx := context.Background()
	ring := testKeyring(t)
	pairs := credpair.Strings(map[string]string{"user": "app", "password": "s3cret", "empty": ""})
	sealer := newBarrier(ring, kms.AliasMaster, 8)
	sealed, wrapped, err := sealer.seal(ctx, "c1", 4, pairs)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]*barrier{"warm cache": sealer, "cold cache": newBarrier(ring, kms.AliasMaster, 8)} {
		if got, err := b.open(ctx, "c1", 4, sealed, wrapped); err != nil || !maps.Equal(got, pairs) {
			t.Errorf("%s: open = %v, %v; want %v", name, got, err, pairs)
		}
	}
	other := newBarrier(testKeyring(t), kms.AliasMaster, 8)
	if got, err := other.open(ctx, "c1", 4, sealed, wrapped); !errors.Is(err, errUndecryptable) {
		t.Errorf("open under another keyring = %v, %v; want %v", got, err, errUndecryptable)
	}
	for i := range sealed {
		tampered := append([]byte(nil), sealed...)
		tampered[i] ^= 0x01
		if got, err := sealer.open(ctx, "c1", 4, tampered, wrapped); err == nil {
			t.Fatalf("byte %d of the blob changed, and it still opened: %v", i, got)
		}
	}
	if _, err := sealer.open(ctx, "c1", 4, sealed[:len(sealed)-1], wrapped); err == nil {
		t.Error("a truncated blob opened")
	}
}

// TestKeyCacheEvictsLeastRecentlyUsed: the data key cache holds at most its size, drops the least
// recently used key first, and a get counts as a use.
func TestKeyCacheEvictsLeastRecentlyUsed(t *testing.T) {
	c := newKeyCache(2)
	c.put([]byte("w1"), []byte("k1"))
	c.put([]byte("w2"), []byte("k2"))
	if k, ok := c.get([]byte("w1")); !ok || string(k) != "k1" { // w1 is now the most recent
		t.Fatalf("get w1 = %q, %v", k, ok)
	}
	c.put([]byte("w3"), []byte("k3")) // evicts w2, the least recently used
	if _, ok := c.get([]byte("w2")); ok {
		t.Error("w2 survived eviction")
	}
	for _, w := range []string{"w1", "w3"} {
		if _, ok := c.get([]byte(w)); !ok {
			t.Errorf("%s was evicted", w)
		}
	}
	if n := c.order.Len(); n != 2 || len(c.items) != 2 {
		t.Errorf("cache holds %d (%d indexed), want 2", n, len(c.items))
	}
	// A zero-sized cache keeps nothing (the setting's way of turning it off).
	off := newKeyCache(0)
	off.put([]byte("w"), []byte("k"))
	if _, ok := off.get([]byte("w")); ok {
		t.Error("a zero-sized cache kept a key")
	}
}
