package boltqueue

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gantry-dev/gantry/services/chat/queue"
	"github.com/gantry-dev/gantry/services/chat/queue/queuetest"
)

func TestConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) queue.Queue {
		q, err := Open(filepath.Join(t.TempDir(), "q.db"), Options{}, zaptest.NewLogger(t))
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
