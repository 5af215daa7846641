package events

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/services/chat/queue"
	"github.com/gantry-dev/gantry/services/chat/queue/boltqueue"
)

// slackAfterLease answers chat.postMessage only once the dispatch's context has ended and the
// message's first lease is over: a backend answer, with its actions, that used up the whole time of
// the dispatch and was carried out after the lease the message was received with.
type slackAfterLease struct {
	*fakeSlack
	firstLeaseEnds *time.Time
}

func (s slackAfterLease) Call(ctx context.Context, team, bot, method string, kwargs map[string]any) (json.RawMessage, error) {
	if method == "chat.postMessage" {
		<-ctx.Done()
		for time.Now().Before(s.firstLeaseEnds.Add(100 * time.Millisecond)) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return s.fakeSlack.Call(context.WithoutCancel(ctx), team, bot, method, kwargs)
}

// extendCounter counts the lease extensions a dispatcher makes.
type extendCounter struct {
	queue.Queue
	n atomic.Int32
}

func (q *extendCounter) Extend(ctx context.Context, receipt string, visibility time.Duration) error {
	q.n.Add(1)
	return q.Queue.Extend(ctx, receipt, visibility)
}

// TestDeliverAcksAfterSlowAnswer: a call whose backend answered, and whose reply was carried out,
// after the dispatch's time and after the lease the message was received with, is acked all the
// same: the dispatcher kept the lease alive while it worked, so the backend is not called again.
// Before, the ack failed with a stale receipt (CI saw it on a loaded machine, where the dispatch
// began late into its lease) and the message came back to be dispatched a second time.
func TestDeliverAcksAfterSlowAnswer(t *testing.T) {
	be := newTestBackend(t, `{"actions":[{"action":"chat.postMessage","kwargs":{"text":"pong"}}]}`)
	in, fs, _ := newTestInbound(t, be)
	var firstLeaseEnds time.Time
	in.slack = slackAfterLease{fs, &firstLeaseEnds}
	// The dispatch ends after 200 ms + 1.8 s; a heartbeat every 667 ms.
	in.cfg.VisibilityTimeout, in.cfg.CallbackTimeout = 2*time.Second, 200*time.Millisecond
	bq, err := boltqueue.Open(filepath.Join(t.TempDir(), "q.db"), boltqueue.Options{}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bq.Close() })
	q := &extendCounter{Queue: bq}
	in.queue = q
	ctx := context.Background()
	env := eventEnvelope(t, message("<@U0BOT0001> ping now please", nil))
	env.Kind, env.AppID, env.ReceivedAt = KindEvent, testAppID, time.Now().UnixNano()
	if _, err := q.Enqueue(ctx, "event:Ev0TEST001", jsonBody(env)); err != nil {
		t.Fatal(err)
	}
	ds, err := q.Receive(ctx, 1, in.cfg.VisibilityTimeout, time.Second)
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %v %v", ds, err)
	}
	firstLeaseEnds = time.Now().Add(in.cfg.VisibilityTimeout)
	in.deliver(ctx, ds[0])
	if q.n.Load() == 0 {
		t.Error("the dispatcher never extended the lease")
	}
	if d, err := q.Depth(ctx); err != nil || d.Ready+d.InFlight+d.Dead != 0 {
		t.Errorf("after the dispatch the queue holds %+v (%v), want nothing: the call was acked", d, err)
	}
	if got := be.paths(); len(got) != 1 {
		t.Errorf("backend called %v, want once", got)
	}
	if posts := fs.actions(); len(posts) != 1 {
		t.Errorf("reply posted %d times, want 1", len(posts))
	}
}

// TestSlowHandlersEachCalledOnce: a message matched by two handlers whose backends each take half
// the lease. Each call is its own queue message, within its own lease, so each backend is called
// once and never twice at once. Before, both ran in one dispatch: the second was cut off when the
// dispatch's time ran out, and the retry called the first, which had answered, again.
func TestSlowHandlersEachCalledOnce(t *testing.T) {
	var mu sync.Mutex
	calls, inFlight, maxInFlight := map[string]int{}, map[string]int{}, 0
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls[r.URL.Path]++
		inFlight[r.URL.Path]++
		maxInFlight = max(maxInFlight, inFlight[r.URL.Path])
		mu.Unlock()
		time.Sleep(2 * time.Second) // half the lease, two thirds of the callback timeout
		mu.Lock()
		inFlight[r.URL.Path]--
		mu.Unlock()
		_, _ = io.WriteString(w, "{}")
	}))
	t.Cleanup(slow.Close)
	in, _, _ := newTestInbound(t, &testBackend{Server: slow})
	in.cfg.VisibilityTimeout, in.cfg.CallbackTimeout, in.cfg.Workers = 4*time.Second, 3*time.Second, 2
	q, err := boltqueue.Open(filepath.Join(t.TempDir(), "q.db"), boltqueue.Options{}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	in.queue = q
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = in.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	// "ping now" is a command for /command and, without "please", matches /absence.
	env := eventEnvelope(t, message("<@U0BOT0001> ping now", nil))
	env.ReceivedAt = time.Now().UnixNano()
	if _, err := q.Enqueue(ctx, "event:Ev0SLOW001", jsonBody(env)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		d, err := q.Depth(ctx)
		mu.Lock()
		n := calls["/command"] + calls["/absence"]
		mu.Unlock()
		if err == nil && d.Ready+d.InFlight == 0 && n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queue still holds %+v (%v) with calls %v", d, err, calls)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls["/command"] != 1 || calls["/absence"] != 1 || maxInFlight != 1 {
		t.Errorf("calls %v, at most %d at once on one backend; want each once", calls, maxInFlight)
	}
}
