package boltstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/storetest"
)

// TestBoltStoreRewrapRefusedWhileWritesStall: the rewrap writes go through the batcher like every
// write, so while a commit is stuck (HoldWrites, as a frozen disk holds bbolt's lock) they are refused
// at once with a *store.WriteStalledError and change nothing; once the commit completes they work.
func TestBoltStoreRewrapRefusedWhileWritesStall(t *testing.T) {
	ctx := context.Background()
	s := newBoltTestStore(t)
	s.SetWriteStallTimeout(50 * time.Millisecond)
	rec := storetest.NewCred("c1", "c1", 1)
	storetest.PutCred(t, s, rec, 0)
	if _, err := s.InitKeyCheck(ctx, []byte("check")); err != nil {
		t.Fatal(err)
	}

	release, err := s.HoldWrites()
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	held := make(chan error, 1)
	go func() { held <- s.PutGrants(ctx, "svc", store.GrantsRecord{Encrypt: true}) }()
	// Wait for the stall itself (the held write queued past the timeout), not for a guessed delay.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var stalled *store.WriteStalledError
		if errors.As(s.Probe(ctx), &stalled) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the store never reported its writes stalled")
		}
	}

	var stalled *store.WriteStalledError
	if err := s.RewrapCredential(ctx, "c1", 1, rec.WrappedKey, []byte("key-v2")); !errors.As(err, &stalled) {
		t.Errorf("RewrapCredential while writes stall: error = %v, want *store.WriteStalledError", err)
	}
	if err := s.ReplaceKeyCheck(ctx, []byte("check"), []byte("check-v2")); !errors.As(err, &stalled) {
		t.Errorf("ReplaceKeyCheck while writes stall: error = %v, want *store.WriteStalledError", err)
	}
	release()
	if err := <-held; err != nil {
		t.Fatalf("the held write after the stall: %v", err)
	}
	storetest.CheckCred(t, s, "c1", 0, rec)
	storetest.CheckCred(t, s, "c1", 1, rec)
	if got, err := s.KeyCheck(ctx); err != nil || string(got) != "check" {
		t.Fatalf("KeyCheck after the refused replace = %q, %v; want check", got, err)
	}

	if err := s.RewrapCredential(ctx, "c1", 1, rec.WrappedKey, []byte("key-v2")); err != nil {
		t.Fatalf("RewrapCredential after the stall: %v", err)
	}
	if err := s.ReplaceKeyCheck(ctx, []byte("check"), []byte("check-v2")); err != nil {
		t.Fatalf("ReplaceKeyCheck after the stall: %v", err)
	}
	want := storetest.CloneCred(rec)
	want.WrappedKey = []byte("key-v2")
	storetest.CheckCred(t, s, "c1", 0, want)
	storetest.CheckCred(t, s, "c1", 1, want)
}
