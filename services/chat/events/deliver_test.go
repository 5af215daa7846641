package events

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gantry-dev/gantry/services/chat/queue/boltqueue"
)

// slackUntilDeadline answers chat.postMessage only once the dispatch's context has ended: a
// backend answer, with its actions, that used up the whole time of the dispatch.
type slackUntilDeadline struct{ *fakeSlack }

func (s slackUntilDeadline) Call(ctx context.Context, team, bot, method string, kwargs map[string]any) (json.RawMessage, error) {
	if method == "chat.postMessage" {
		<-ctx.Done()
	}
	return s.fakeSlack.Call(context.WithoutCancel(ctx), team, bot, method, kwargs)
}

// TestDeliverAcksAfterSlowAnswer: a call whose backend answered and whose reply was carried out at
// the very end of the dispatch's time is acked all the same, so the backend is not called again
// when the lease runs out. Before, the ack shared the dispatch's expired context, failed, and the
// message came back to be dispatched a second time.
func TestDeliverAcksAfterSlowAnswer(t *testing.T) {
	be := newTestBackend(t, `{"actions":[{"action":"chat.postMessage","kwargs":{"text":"pong"}}]}`)
	in, fs, _ := newTestInbound(t, be)
	in.slack = slackUntilDeadline{fs}
	in.cfg.VisibilityTimeout = time.Second // the dispatch ends after 900 ms
	q, err := boltqueue.Open(filepath.Join(t.TempDir(), "q.db"), boltqueue.Options{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
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
	in.deliver(ctx, ds[0])
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
