package internaltls

import (
	"crypto/x509"
	"testing"
	"time"
)

// The chain cache verifies a chain once, answers from memory until its certificates expire or the TTL
// passes, caches refusals too, and never answers for another chain.
func TestChainCache(t *testing.T) {
	now := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	leaf := &x509.Certificate{Raw: []byte("leaf"), NotAfter: now.Add(time.Hour)}
	ca := &x509.Certificate{Raw: []byte("intermediate"), NotAfter: now.Add(2 * time.Minute)}
	other := &x509.Certificate{Raw: []byte("another leaf"), NotAfter: now.Add(time.Hour)}
	var c chainCache
	calls := 0
	verify := func(ok bool) func() bool { return func() bool { calls++; return ok } }

	if !c.verified(leaf, []*x509.Certificate{leaf, ca}, now, verify(true)) || calls != 1 {
		t.Fatalf("first verification: calls %d", calls)
	}
	if !c.verified(leaf, []*x509.Certificate{leaf, ca}, now.Add(time.Minute), verify(false)) || calls != 1 {
		t.Fatalf("a cached success was verified again (calls %d)", calls)
	}
	// The intermediate expires after 2 minutes: the verdict is not kept past it.
	if c.verified(leaf, []*x509.Certificate{leaf, ca}, now.Add(3*time.Minute), verify(false)) || calls != 2 {
		t.Fatalf("a success outlived the chain's expiry (calls %d)", calls)
	}
	// Another chain (the same leaf without the intermediate, or another leaf) is its own entry.
	if !c.verified(leaf, []*x509.Certificate{leaf}, now, verify(true)) || calls != 3 {
		t.Fatalf("a different chain answered from another's entry (calls %d)", calls)
	}
	if c.verified(other, []*x509.Certificate{other}, now, verify(false)) || calls != 4 {
		t.Fatal("refusal")
	}
	if c.verified(other, []*x509.Certificate{other}, now.Add(time.Minute), verify(true)) || calls != 4 {
		t.Fatal("a cached refusal was verified again within the TTL")
	}
	if !c.verified(other, []*x509.Certificate{other}, now.Add(chainCacheTTL+time.Second), verify(true)) || calls != 5 {
		t.Fatal("a refusal outlived the TTL")
	}
	// Full: cleared whole, never grows past its size.
	for i := range 3 * chainCacheEntries {
		cert := &x509.Certificate{Raw: []byte{byte(i), byte(i >> 8)}, NotAfter: now.Add(time.Hour)}
		c.verified(cert, []*x509.Certificate{cert}, now, verify(true))
		if len(c.entries) > chainCacheEntries {
			t.Fatalf("%d entries", len(c.entries))
		}
	}
}
