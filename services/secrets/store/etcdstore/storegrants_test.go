package etcdstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/services/secrets"
)

// TestStoreGrantsSharedStore is the case the store-backed record exists for: replicas sharing one
// etcd store. A service refused by replica B before its grant is accepted by B as soon as replica A
// has recorded it, and both report the same grants.
func TestStoreGrantsSharedStore(t *testing.T) {
	ctx := context.Background()
	storeA := newEtcdTestStore(t, nil)
	opts := DefaultOptions()
	opts.Endpoints = testEtcdEndpoints(t)
	opts.Prefix = strings.TrimSuffix(storeA.prefix, "secrets/")
	storeB, err := Open(ctx, opts, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer storeB.Close()
	a, b := secrets.NewStoreGrants(storeA, logtest.New(t)), secrets.NewStoreGrants(storeB, logtest.New(t))

	if ok, err := b.Allowed(ctx, "billing"); ok || err != nil {
		t.Fatalf("B: Allowed before any grant = %v, %v", ok, err)
	}
	if _, err := a.EnsureGrants(ctx, kms.AliasAuth, "billing"); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.Allowed(ctx, "billing"); !ok || err != nil {
		t.Errorf("B: Allowed right after A's grant = %v, %v; want true", ok, err)
	}
	for name, g := range map[string]*secrets.StoreGrants{"A": a, "B": b} {
		if st, err := g.Grants(ctx, kms.AliasAuth, "billing"); err != nil || st != (kms.GrantState{Encrypt: true, Decrypt: true}) {
			t.Errorf("%s: Grants = %+v, %v; want both", name, st, err)
		}
	}

	// Replicas granting many services at once lose none of them (each record is its own key).
	var wg sync.WaitGroup
	for i := range 10 {
		for _, g := range []*secrets.StoreGrants{a, b} {
			wg.Go(func() {
				if _, err := g.EnsureGrants(ctx, "", fmt.Sprintf("svc-%d", i)); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
	for i := range 10 {
		if ok, err := a.Allowed(ctx, fmt.Sprintf("svc-%d", i)); !ok || err != nil {
			t.Errorf("svc-%d: Allowed = %v, %v after concurrent grants", i, ok, err)
		}
	}
}
