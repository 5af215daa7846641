package etcdstore

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/services/secrets/store"
)

// TestEtcdStoreReplicaRegistry: each replica's record is listed by every store on the prefix, a
// republish replaces it (and keeps it alive on a new lease), and a withdrawn record is gone at once.
func TestEtcdStoreReplicaRegistry(t *testing.T) {
	ctx := context.Background()
	a, b := newReplicaPair(t)
	names := func(s *Store) []string {
		t.Helper()
		got, err := s.ListReplicaKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range got {
			out = append(out, r.Name+"="+r.Active)
		}
		return out
	}
	if got := names(a); len(got) != 0 {
		t.Fatalf("a new prefix lists replicas %v", got)
	}
	ttl := time.Minute
	if err := a.PublishReplicaKeys(ctx, store.ReplicaKeys{Name: "a", Active: "k v1", Held: []string{"k v1"}}, ttl); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishReplicaKeys(ctx, store.ReplicaKeys{Name: "b", Active: "k v1", Held: []string{"k v1"}}, ttl); err != nil {
		t.Fatal(err)
	}
	if err := a.PublishReplicaKeys(ctx, store.ReplicaKeys{Name: "a", Active: "k v2", Held: []string{"k v1", "k v2"}}, ttl); err != nil {
		t.Fatal(err)
	}
	if got, want := names(b), []string{"a=k v2", "b=k v1"}; !slices.Equal(got, want) {
		t.Fatalf("replicas after a republish: %v, want %v", got, want)
	}
	if err := b.WithdrawReplicaKeys(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := a.WithdrawReplicaKeys(ctx, "never-published"); err != nil {
		t.Fatal(err)
	}
	if got, want := names(a), []string{"a=k v2"}; !slices.Equal(got, want) {
		t.Fatalf("replicas after b withdrew: %v, want %v", got, want)
	}
	if err := a.PublishReplicaKeys(ctx, store.ReplicaKeys{Name: "bad\x00name"}, ttl); err == nil {
		t.Fatal("a name with 0x00 was published")
	}
}
