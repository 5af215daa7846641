package events

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/services/chat/queue"
	"github.com/gantry-dev/gantry/services/chat/queue/boltqueue"
)

// scriptedBackend answers each call to a handler with answer(n) (n counts the calls from 1), and
// records the delivery ids it was sent.
type scriptedBackend struct {
	*httptest.Server
	mu     sync.Mutex
	ids    []string
	called chan struct{} // a value per call, as it arrives
}

func newScriptedBackend(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, n int)) *scriptedBackend {
	b := &scriptedBackend{called: make(chan struct{}, 100)}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		b.mu.Lock()
		id := r.Header.Get(DeliveryIDHeader)
		if r.Header.Get("Idempotency-Key") != id {
			id = "Idempotency-Key differs: " + r.Header.Get("Idempotency-Key")
		}
		b.ids = append(b.ids, id)
		n := len(b.ids)
		b.mu.Unlock()
		b.called <- struct{}{}
		answer(w, r, n)
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *scriptedBackend) deliveryIDs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.ids...)
}

// runInbound runs in's dispatchers over a bolt queue of their own until the test ends.
func runInbound(t *testing.T, in *Inbound) queue.Queue {
	t.Helper()
	bq, err := boltqueue.Open(filepath.Join(t.TempDir(), "q.db"), boltqueue.Options{}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	in.queue = bq
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = in.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; _ = bq.Close() })
	return bq
}

// enqueuePing queues a message that only the /command handler ("ping") matches, as Slack's event
// eventID.
func enqueuePing(t *testing.T, q queue.Queue, eventID string) {
	t.Helper()
	env := eventEnvelope(t, message("<@U0BOT0001> ping now please", nil))
	env.ReceivedAt = time.Now().UnixNano()
	if _, err := q.Enqueue(context.Background(), "event:"+eventID, jsonBody(env)); err != nil {
		t.Fatal(err)
	}
}

// waitSettled waits until the queue holds no message waiting or in flight, and dead dead letters.
// The deadline only bounds a hang.
func waitSettled(t *testing.T, q queue.Queue, dead int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := q.Depth(context.Background())
		if err == nil && d.Ready+d.InFlight == 0 && d.Dead == dead {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queue holds %+v (%v), want nothing waiting and %d dead", d, err, dead)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// quickRetries makes retries come at once and a call dead after three attempts.
func quickRetries(in *Inbound) {
	in.cfg.RetryBackoff, in.cfg.MaxAttempts = time.Millisecond, 3
}

func pingHandler(t *testing.T, in *Inbound) *handler {
	t.Helper()
	for _, h := range in.handlersOf(in.bots[testAppID]) {
		if h.kind == "command" && h.match == "ping" {
			return h
		}
	}
	t.Fatal("no ping handler")
	return nil
}

// TestTimedOutCallNotSentAgain: a backend that does not answer within the callback timeout is
// called once, not again (it may have acted), and the request is kept in the dead letter. Before,
// a timed-out call was retried like a refused one: a backend answering in 35 s was called at 0, 31,
// 63, 97 and 135 s and its reply never posted.
func TestTimedOutCallNotSentAgain(t *testing.T) {
	release := make(chan struct{})
	be := newScriptedBackend(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, `{"actions":[{"action":"chat.postMessage","kwargs":{"text":"late"}}]}`)
	})
	defer close(release)
	in, fs, st := newTestInbound(t, &testBackend{Server: be.Server})
	in.cfg.CallbackTimeout = 200 * time.Millisecond
	quickRetries(in)
	q := runInbound(t, in)
	enqueuePing(t, q, "Ev0SLOW001")
	waitSettled(t, q, 1)
	if ids := be.deliveryIDs(); len(ids) != 1 {
		t.Errorf("backend called %d times, want once", len(ids))
	}
	if posts := fs.actions(); len(posts) != 0 {
		t.Errorf("posted %v, want nothing (the answer came after the timeout)", posts)
	}
	if v := st.Counter("chat.inbound.event.retried").Value(); v != 0 {
		t.Errorf("retried = %d, want 0", v)
	}
}

// TestRetryOnTimeoutOptIn: a handler with retry_on_timeout has a timed-out call made again, up to
// -chat-inbound-max-attempts, every time with the same delivery id.
func TestRetryOnTimeoutOptIn(t *testing.T) {
	release := make(chan struct{})
	be := newScriptedBackend(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	in, _, _ := newTestInbound(t, &testBackend{Server: be.Server})
	in.cfg.CallbackTimeout = 200 * time.Millisecond
	quickRetries(in)
	pingHandler(t, in).retryOnTimeout = true
	q := runInbound(t, in)
	enqueuePing(t, q, "Ev0SLOW002")
	waitSettled(t, q, 1)
	ids := be.deliveryIDs()
	if len(ids) != 3 {
		t.Fatalf("backend called %d times, want 3 (max attempts)", len(ids))
	}
	for _, id := range ids {
		if id == "" || id != ids[0] {
			t.Errorf("delivery ids %q, want one non-empty id on every attempt", ids)
			break
		}
	}
}

// TestSlowCallAnsweredIsPostedOnce: a backend slower than the lease (the dispatcher keeps the lease
// alive meanwhile) but within the callback timeout is called once and its reply posted once. Before,
// a dispatch was cut off at 9/10 of the visibility timeout whatever the callback timeout, and the
// call was made again.
func TestSlowCallAnsweredIsPostedOnce(t *testing.T) {
	release := make(chan struct{})
	be := newScriptedBackend(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, `{"actions":[{"action":"chat.postMessage","kwargs":{"text":"slow pong"}}]}`)
	})
	in, fs, _ := newTestInbound(t, &testBackend{Server: be.Server})
	// A lease of 300 ms, renewed every 100 ms; the callback timeout only bounds a hang.
	in.cfg.VisibilityTimeout, in.cfg.CallbackTimeout = 300*time.Millisecond, 20*time.Second
	quickRetries(in)
	bq, err := boltqueue.Open(filepath.Join(t.TempDir(), "q.db"), boltqueue.Options{}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bq.Close() })
	q := &extendCounter{Queue: bq}
	in.queue = q
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = in.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	enqueuePing(t, q, "Ev0SLOW003")
	<-be.called
	// Answer only once the call has outlived its first lease several times over.
	deadline := time.Now().Add(20 * time.Second)
	for q.n.Load() < 4 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	waitSettled(t, q, 0)
	if ids := be.deliveryIDs(); len(ids) != 1 {
		t.Errorf("backend called %d times, want once", len(ids))
	}
	if posts := fs.actions(); len(posts) != 1 || posts[0].Kwargs["text"] != "slow pong" {
		t.Errorf("posted %v, want the reply once", posts)
	}
}

// TestDefaultCallbackTimeoutOutlastsOmnibotsSlowBackends: the default callback timeout lets a
// backend that answers in 35 s (which Omnibot, with no timeout, waited for) answer. Before, it was
// 30 s.
func TestDefaultCallbackTimeoutOutlastsOmnibotsSlowBackends(t *testing.T) {
	cfg := DefaultConfig()
	if cfg.CallbackTimeout < 45*time.Second {
		t.Errorf("default callback timeout %v, want room for a 35 s backend", cfg.CallbackTimeout)
	}
	if err := cfg.Validate(); err != nil {
		t.Error(err)
	}
}

// TestCallRetriedOnlyWhenNotReceived: a call is made again when the backend did not get it or said
// so (connection refused, 5xx, 429), every time with the same delivery id, and not after any other
// answer (a 4xx: it got it and refused it).
func TestCallRetriedOnlyWhenNotReceived(t *testing.T) {
	for _, tc := range []struct {
		name      string
		status    int // of the first two calls; then 200
		wantCalls int
		wantDead  int
	}{
		{"503 then answered", http.StatusServiceUnavailable, 3, 0},
		{"500 then answered", http.StatusInternalServerError, 3, 0},
		{"429 then answered", http.StatusTooManyRequests, 3, 0},
		{"400 not sent again", http.StatusBadRequest, 1, 1},
		{"404 not sent again", http.StatusNotFound, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := newScriptedBackend(t, func(w http.ResponseWriter, r *http.Request, n int) {
				if n <= 2 {
					w.WriteHeader(tc.status)
					return
				}
				_, _ = io.WriteString(w, `{"actions":[{"action":"chat.postMessage","kwargs":{"text":"pong"}}]}`)
			})
			in, fs, _ := newTestInbound(t, &testBackend{Server: be.Server})
			quickRetries(in)
			q := runInbound(t, in)
			enqueuePing(t, q, "Ev0FLAKY01")
			waitSettled(t, q, tc.wantDead)
			ids := be.deliveryIDs()
			if len(ids) != tc.wantCalls {
				t.Fatalf("backend called %d times, want %d", len(ids), tc.wantCalls)
			}
			for _, id := range ids {
				if id != "event:Ev0FLAKY01#0.0" {
					t.Errorf("delivery ids %q, want event:Ev0FLAKY01#0.0 on every attempt", ids)
					break
				}
			}
			if wantPosts := 1 - tc.wantDead; len(fs.actions()) != wantPosts {
				t.Errorf("posted %v, want %d replies", fs.actions(), wantPosts)
			}
		})
	}
}

// TestConnectionRefusedRetried: a backend that cannot be connected to never got the call: it is
// made again until -chat-inbound-max-attempts, then dead-lettered.
func TestConnectionRefusedRetried(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://%s", l.Addr())
	_ = l.Close() // nothing listens there now: connections are refused
	in, _, st := newTestInbound(t, &testBackend{Server: &httptest.Server{URL: url}})
	quickRetries(in)
	q := runInbound(t, in)
	enqueuePing(t, q, "Ev0REFUSE1")
	waitSettled(t, q, 1)
	if v := st.Counter("chat.inbound.event.retried").Value(); v != 2 {
		t.Errorf("retried = %d, want 2 (three attempts)", v)
	}
	dead, err := q.(queue.DeadLetters).ListDead(context.Background(), 10)
	if err != nil || len(dead) != 1 || dead[0].Attempts != 3 {
		t.Errorf("dead letters %+v (%v), want one after 3 attempts", dead, err)
	}
}

// TestDeliveryIDsDiffer: calls of different requests, or to different handlers of one request, have
// different delivery ids.
func TestDeliveryIDsDiffer(t *testing.T) {
	be := newScriptedBackend(t, func(w http.ResponseWriter, r *http.Request, _ int) { _, _ = io.WriteString(w, `{}`) })
	in, _, _ := newTestInbound(t, &testBackend{Server: be.Server})
	q := runInbound(t, in)
	enqueuePing(t, q, "Ev0IDS0001")
	enqueuePing(t, q, "Ev0IDS0002")
	// "ping now" (without "please") also matches the absence regex: two calls of one request.
	env := eventEnvelope(t, message("<@U0BOT0001> ping now", nil))
	env.ReceivedAt = time.Now().UnixNano()
	if _, err := q.Enqueue(context.Background(), "event:Ev0IDS0003", jsonBody(env)); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, q, 0)
	ids := be.deliveryIDs()
	seen := map[string]bool{}
	for _, id := range ids {
		if id == "" || seen[id] {
			t.Errorf("delivery ids %q: want four different ones", ids)
			break
		}
		seen[id] = true
	}
	if len(ids) != 4 {
		t.Errorf("backend called %d times, want 4", len(ids))
	}
}
