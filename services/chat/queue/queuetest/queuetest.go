// Package queuetest is the conformance suite of queue.Queue: every adapter runs Run against a fresh
// queue, so the dispatcher can rely on the same behaviour from each.
//
// Receipts are settled by the process that received them, as the dispatcher does: the suite never
// hands a receipt to another process's queue, whose staleness an adapter over a shared service
// (sqsqueue) cannot always detect (see queue.ErrStaleReceipt). Everything else is promised by every
// adapter alike.
package queuetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/services/chat/queue"
)

// Opener returns a new, empty queue for one subtest. The suite closes it.
type Opener func(t *testing.T) queue.Queue

// Run runs every conformance test.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, q queue.Queue)
	}{
		{"EnqueueReceiveAck", testEnqueueReceiveAck},
		{"Dedupe", testDedupe},
		{"Remember", testRemember},
		{"VisibilityTimeout", testVisibilityTimeout},
		{"Retry", testRetry},
		{"Extend", testExtend},
		{"DeadLetter", testDeadLetter},
		{"StaleReceipt", testStaleReceipt},
		{"ConcurrentReceiversShareNothing", testConcurrent},
		{"ReceiveWaits", testReceiveWaits},
		{"DeadLetters", testDeadLetters},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := open(t)
			t.Cleanup(func() { _ = q.Close() })
			tt.fn(t, q)
		})
	}
}

func enqueue(t *testing.T, q queue.Queue, key, body string) bool {
	t.Helper()
	ok, err := q.Enqueue(context.Background(), key, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func depth(t *testing.T, q queue.Queue) queue.Depth {
	t.Helper()
	d, err := q.Depth(context.Background())
	noErr(t, err)
	return d
}

func receive(t *testing.T, q queue.Queue, n int, visibility, wait time.Duration) []queue.Delivery {
	t.Helper()
	ds, err := q.Receive(context.Background(), n, visibility, wait)
	noErr(t, err)
	return ds
}

func receiveOne(t *testing.T, q queue.Queue, visibility time.Duration) queue.Delivery {
	t.Helper()
	ds := receive(t, q, 1, visibility, 3*time.Second)
	if len(ds) != 1 {
		t.Fatalf("received %d messages, want 1", len(ds))
	}
	return ds[0]
}

func expectEmpty(t *testing.T, q queue.Queue, wait time.Duration) {
	t.Helper()
	if ds := receive(t, q, 10, time.Minute, wait); len(ds) != 0 {
		t.Fatalf("received %d messages, want none (first key %q)", len(ds), ds[0].Key)
	}
}

func testEnqueueReceiveAck(t *testing.T, q queue.Queue) {
	ctx := context.Background()
	if !enqueue(t, q, "k1", "one") {
		t.Fatal("first enqueue not stored")
	}
	d := receiveOne(t, q, time.Minute)
	if d.Key != "k1" || string(d.Body) != "one" || d.Attempts != 1 || d.Receipt == "" {
		t.Fatalf("delivery = %+v", d)
	}
	if time.Since(d.EnqueuedAt) > time.Minute || time.Since(d.EnqueuedAt) < -time.Minute {
		t.Errorf("EnqueuedAt = %v", d.EnqueuedAt)
	}
	if err := q.Ack(ctx, d.Receipt); err != nil {
		t.Fatal(err)
	}
	expectEmpty(t, q, 50*time.Millisecond)
	dep := depth(t, q)
	if dep.Ready != 0 || dep.InFlight != 0 || dep.Dead != 0 {
		t.Errorf("depth after ack = %+v", dep)
	}
}

func testDedupe(t *testing.T, q queue.Queue) {
	ctx := context.Background()
	if !enqueue(t, q, "ev1", "a") {
		t.Fatal("first enqueue not stored")
	}
	if enqueue(t, q, "ev1", "a") {
		t.Fatal("a second enqueue with the same key was stored")
	}
	d := receiveOne(t, q, time.Minute)
	noErr(t, q.Ack(ctx, d.Receipt))
	// Still a duplicate after the first was handled: Slack may retry after we answered slowly.
	if enqueue(t, q, "ev1", "a") {
		t.Fatal("a retry after the ack was stored again")
	}
	expectEmpty(t, q, 50*time.Millisecond)
}

// testRemember: a remembered key is claimed once, stores no message, and shares its namespace with
// Enqueue's keys both ways.
func testRemember(t *testing.T, q queue.Queue) {
	ctx := context.Background()
	remember := func(key string) bool {
		t.Helper()
		ok, err := q.Remember(ctx, key)
		noErr(t, err)
		return ok
	}
	if !remember("interactive:a") {
		t.Fatal("first Remember reported a duplicate")
	}
	if remember("interactive:a") {
		t.Fatal("second Remember of one key reported first")
	}
	if enqueue(t, q, "interactive:a", "x") {
		t.Fatal("Enqueue of a remembered key was stored")
	}
	if !enqueue(t, q, "interactive:b", "y") || remember("interactive:b") {
		t.Fatal("Remember of an enqueued key reported first")
	}
	d := receiveOne(t, q, time.Minute)
	if d.Key != "interactive:b" {
		t.Fatalf("received %q, want only the enqueued message", d.Key)
	}
	noErr(t, q.Ack(ctx, d.Receipt))
	expectEmpty(t, q, 50*time.Millisecond)
}

func testVisibilityTimeout(t *testing.T, q queue.Queue) {
	ctx := context.Background()
	enqueue(t, q, "v", "x")
	d1 := receiveOne(t, q, time.Second)
	expectEmpty(t, q, 100*time.Millisecond)
	d2 := receiveOne(t, q, time.Minute) // visible again once the lease ran out
	if d2.Attempts != 2 || d2.Key != "v" {
		t.Fatalf("redelivery = %+v", d2)
	}
	if err := q.Extend(ctx, d1.Receipt, time.Minute); !errors.Is(err, queue.ErrStaleReceipt) {
		t.Errorf("extend of the first lease: %v, want ErrStaleReceipt", err)
	}
	if err := q.Ack(ctx, d1.Receipt); !errors.Is(err, queue.ErrStaleReceipt) {
		t.Errorf("ack with the first lease: %v, want ErrStaleReceipt", err)
	}
	noErr(t, q.Ack(ctx, d2.Receipt))
}

func testRetry(t *testing.T, q queue.Queue) {
	ctx := context.Background()
	enqueue(t, q, "r", "x")
	d := receiveOne(t, q, time.Minute)
	noErr(t, q.Retry(ctx, d.Receipt, 0))
	d = receiveOne(t, q, time.Minute)
	if d.Attempts != 2 {
		t.Fatalf("attempts = %d, want 2", d.Attempts)
	}
	noErr(t, q.Retry(ctx, d.Receipt, 1200*time.Millisecond))
	expectEmpty(t, q, 200*time.Millisecond)
	d = receiveOne(t, q, time.Minute)
	if d.Attempts != 3 {
		t.Fatalf("attempts = %d, want 3", d.Attempts)
	}
	noErr(t, q.Ack(ctx, d.Receipt))
}

// testExtend: a lease extended before it ends outlasts its first visibility: the message is not
// delivered again when the first lease would have ended, and the same receipt acks it. A settled
// lease is not extended.
func testExtend(t *testing.T, q queue.Queue) {
	ctx := context.Background()
	enqueue(t, q, "x", "slow handler")
	received := time.Now()
	d := receiveOne(t, q, 2*time.Second)
	noErr(t, q.Extend(ctx, d.Receipt, time.Minute))
	// Wait until the first lease is over by any adapter's count (SQS rounds to whole seconds).
	for time.Since(received) < 3*time.Second {
		time.Sleep(50 * time.Millisecond)
	}
	expectEmpty(t, q, 50*time.Millisecond)
	noErr(t, q.Extend(ctx, d.Receipt, time.Minute)) // a second heartbeat
	noErr(t, q.Ack(ctx, d.Receipt))
	if err := q.Extend(ctx, d.Receipt, time.Minute); !errors.Is(err, queue.ErrStaleReceipt) {
		t.Errorf("extend after the ack: %v, want ErrStaleReceipt", err)
	}
	if dep := depth(t, q); dep.Ready+dep.InFlight+dep.Dead != 0 {
		t.Errorf("depth after the ack = %+v", dep)
	}
}

func testDeadLetter(t *testing.T, q queue.Queue) {
	ctx := context.Background()
	enqueue(t, q, "poison", "x")
	d := receiveOne(t, q, time.Minute)
	noErr(t, q.DeadLetter(ctx, d.Receipt))
	expectEmpty(t, q, 50*time.Millisecond)
	if dep := depth(t, q); dep.Dead != 1 || dep.Ready != 0 {
		t.Errorf("depth = %+v, want one dead", dep)
	}
}

// testDeadLetters: an operator lists the dead letter, redrives one message (delivered again, its
// attempts from 1) and drops the rest; an unknown id is an error.
func testDeadLetters(t *testing.T, q queue.Queue) {
	dl, ok := q.(queue.DeadLetters)
	if !ok {
		t.Fatal("the adapter does not implement queue.DeadLetters (gantry queue list|redrive|drop)")
	}
	ctx := context.Background()
	for _, k := range []string{"dead-a", "dead-b"} {
		enqueue(t, q, k, "body-"+k)
		d := receiveOne(t, q, time.Minute)
		noErr(t, q.DeadLetter(ctx, d.Receipt))
	}
	list, err := dl.ListDead(ctx, 0)
	noErr(t, err)
	if len(list) != 2 {
		t.Fatalf("ListDead = %+v, want 2", list)
	}
	ids := map[string]string{}
	for _, m := range list {
		ids[m.Key] = m.ID
		if string(m.Body) != "body-"+m.Key {
			t.Errorf("dead letter %s has body %q", m.Key, m.Body)
		}
	}
	// Listing leaves them where they are.
	if again, err := dl.ListDead(ctx, 0); err != nil || len(again) != 2 {
		t.Fatalf("second ListDead = %+v, %v", again, err)
	}
	if _, err := dl.RedriveDead(ctx, []string{"424242"}); err == nil {
		t.Error("RedriveDead of an unknown id succeeded")
	}
	n, err := dl.RedriveDead(ctx, []string{ids["dead-a"]})
	noErr(t, err)
	if n != 1 {
		t.Errorf("RedriveDead moved %d, want 1", n)
	}
	d := receiveOne(t, q, time.Minute)
	if d.Key != "dead-a" || string(d.Body) != "body-dead-a" || d.Attempts != 1 {
		t.Errorf("redriven delivery %+v, want dead-a at attempt 1", d)
	}
	noErr(t, q.Ack(ctx, d.Receipt))
	n, err = dl.DropDead(ctx, nil)
	noErr(t, err)
	if n != 1 {
		t.Errorf("DropDead moved %d, want 1", n)
	}
	if list, err := dl.ListDead(ctx, 0); err != nil || len(list) != 0 {
		t.Errorf("after drop ListDead = %+v, %v", list, err)
	}
}

func testStaleReceipt(t *testing.T, q queue.Queue) {
	ctx := context.Background()
	for _, r := range []string{"", "nonsense", "999999.1"} {
		if err := q.Ack(ctx, r); !errors.Is(err, queue.ErrStaleReceipt) {
			t.Errorf("Ack(%q) = %v, want ErrStaleReceipt", r, err)
		}
	}
	enqueue(t, q, "s", "x")
	d := receiveOne(t, q, time.Minute)
	noErr(t, q.Ack(ctx, d.Receipt))
	if err := q.Ack(ctx, d.Receipt); !errors.Is(err, queue.ErrStaleReceipt) {
		t.Errorf("second Ack = %v, want ErrStaleReceipt", err)
	}
}

func testConcurrent(t *testing.T, q queue.Queue) {
	ctx := context.Background()
	const n = 60
	for i := range n {
		enqueue(t, q, fmt.Sprint("c", i), fmt.Sprint(i))
	}
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				ds, err := q.Receive(ctx, 5, time.Minute, 300*time.Millisecond)
				if err != nil {
					t.Error(err)
					return
				}
				if len(ds) == 0 {
					return
				}
				for _, d := range ds {
					mu.Lock()
					got[d.Key]++
					mu.Unlock()
					if err := q.Ack(ctx, d.Receipt); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	if len(got) != n {
		t.Errorf("received %d distinct messages, want %d", len(got), n)
	}
	for k, c := range got {
		if c != 1 {
			t.Errorf("%s delivered %d times", k, c)
		}
	}
}

func testReceiveWaits(t *testing.T, q queue.Queue) {
	ctx := context.Background()
	done := make(chan []queue.Delivery, 1)
	go func() {
		ds, _ := q.Receive(ctx, 1, time.Minute, 5*time.Second)
		done <- ds
	}()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	enqueue(t, q, "w", "x")
	ds := <-done
	if len(ds) != 1 {
		t.Fatalf("a waiting Receive got %d messages", len(ds))
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("a waiting Receive took %v to see a new message", time.Since(start))
	}
}
