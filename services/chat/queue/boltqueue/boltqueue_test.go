package boltqueue

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/services/chat/queue"
	"github.com/gantry-dev/gantry/services/chat/queue/queuetest"
)

func TestConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) queue.Queue {
		q, err := Open(filepath.Join(t.TempDir(), "q.db"), Options{}, logtest.New(t))
		if err != nil {
			t.Fatal(err)
		}
		return q
	})
}

// TestSurvivesReopen: a stored message, and a leased one once its lease ends, are there after the
// file is opened again (a restart).
func TestSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	ctx := context.Background()
	q, err := Open(path, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		if _, err := q.Enqueue(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	if ds, err := q.Receive(ctx, 1, 200*time.Millisecond, time.Second); err != nil || len(ds) != 1 {
		t.Fatalf("receive: %v %v", ds, err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q, err = Open(path, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	seen := map[string]bool{}
	for len(seen) < 2 {
		ds, err := q.Receive(ctx, 2, time.Minute, 2*time.Second)
		if err != nil || len(ds) == 0 {
			t.Fatalf("after reopen got %v (%v), seen %v", ds, err, seen)
		}
		for _, d := range ds {
			seen[d.Key] = true
		}
	}
	if ok, _ := q.Enqueue(ctx, "a", nil); ok {
		t.Error("the deduplication key was lost in the restart")
	}
}

// TestRememberSurvivesReopen: a remembered key (a synchronous interactive request, never queued)
// still refuses its replay after a restart, until the window ends.
func TestRememberSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	opts := Options{DedupeWindow: time.Hour, Now: func() time.Time { return now }}
	q, err := Open(path, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := q.Remember(ctx, "interactive:x"); !ok || err != nil {
		t.Fatalf("first Remember: %v %v", ok, err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q, err = Open(path, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if ok, err := q.Remember(ctx, "interactive:x"); ok || err != nil {
		t.Fatalf("Remember after reopen: %v %v, want a duplicate", ok, err)
	}
	if d, _ := q.Depth(ctx); d.Ready != 0 {
		t.Errorf("Remember stored %d messages", d.Ready)
	}
	now = now.Add(time.Hour + time.Second)
	if ok, err := q.Remember(ctx, "interactive:x"); !ok || err != nil {
		t.Fatalf("Remember after the window: %v %v, want first", ok, err)
	}
}

// TestIdleReceiveWritesNothing: a dispatcher waiting on an empty queue makes no write transaction
// (so no fsync), and one read-only look per wait; an Enqueue wakes it at once. Before, Receive
// polled with a write transaction every 100 ms: an idle gantry synced its disk dozens of times a
// second.
func TestIdleReceiveWritesNothing(t *testing.T) {
	q, err := Open(filepath.Join(t.TempDir(), "q.db"), Options{}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	// A message through its whole life first, so the file has seen writes.
	if _, err := q.Enqueue(ctx, "k", []byte("b")); err != nil {
		t.Fatal(err)
	}
	ds, err := q.Receive(ctx, 1, time.Minute, time.Second)
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %v %v", ds, err)
	}
	if err := q.Ack(ctx, ds[0].Receipt); err != nil {
		t.Fatal(err)
	}

	before := q.db.Stats()
	for range 3 {
		if ds, err := q.Receive(ctx, 1, time.Minute, 300*time.Millisecond); err != nil || len(ds) != 0 {
			t.Fatalf("idle receive: %v %v", ds, err)
		}
	}
	after := q.db.Stats()
	if w := after.TxStats.GetWrite() - before.TxStats.GetWrite(); w != 0 {
		t.Errorf("3 idle receives wrote %d pages, want 0", w)
	}
	if n := after.TxStats.GetPageCount() - before.TxStats.GetPageCount(); n != 0 {
		t.Errorf("3 idle receives allocated %d pages, want 0", n)
	}
	if n := after.TxN - before.TxN; n != 3 {
		t.Errorf("3 idle receives made %d read transactions, want 3 (one look per wait)", n)
	}

	// A waiting Receive is woken by an Enqueue, not by a poll: with a minute to wait, it returns
	// the message.
	got := make(chan []queue.Delivery, 1)
	go func() {
		ds, _ := q.Receive(ctx, 1, time.Minute, time.Minute)
		got <- ds
	}()
	if _, err := q.Enqueue(ctx, "k2", []byte("b2")); err != nil {
		t.Fatal(err)
	}
	if ds := <-got; len(ds) != 1 || ds[0].Key != "k2" {
		t.Fatalf("woken receive got %v", ds)
	}
}
