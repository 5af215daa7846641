package events

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// depthCheckTimeout bounds the depth look of checkRoom.
const depthCheckTimeout = 250 * time.Millisecond

// checkRoom refuses a request while the queue holds -chat-inbound-max-depth requests or more
// (waiting or in flight; dead letters aside). The answer is 503: Slack retries an event it got no
// 200 for (at once, after a minute, after five), and the retry is deduplicated like any other, so
// an event refused while the queue drains is delivered later, once. A 200 would tell Slack the
// event was taken and lose it. A depth that cannot be read does not refuse: the queue's own
// errors say whether it can store.
func (in *Inbound) checkRoom(ctx context.Context, kind string) error {
	if in.cfg.MaxDepth <= 0 {
		return nil
	}
	// Bounded, so a slow SQS cannot hold Slack's answer up (sqsqueue keeps its answer, or its
	// failure, for a second: at most one request a second waits this long).
	dctx, cancel := context.WithTimeout(ctx, depthCheckTimeout)
	defer cancel()
	d, err := in.queue.Depth(dctx)
	if err != nil {
		return nil
	}
	if n := d.Ready + d.InFlight; n >= in.cfg.MaxDepth {
		in.count(kind, "queue_full")
		in.refusals.Warn("queue_full", "the queue is full: request refused with 503 (Slack retries events)",
			zap.String("kind", kind), zap.Int("depth", n), zap.Int("max_depth", in.cfg.MaxDepth))
		return errf(ErrUnavailable, "the queue is full (%d requests wait for dispatch, -chat-inbound-max-depth %d); retry later", n, in.cfg.MaxDepth)
	}
	return nil
}

// oldestAge is the age of the oldest request the queue holds, for the stats (0: none, or the queue
// cannot tell).
func (in *Inbound) oldestAge() time.Duration {
	d, err := in.queue.Depth(context.Background())
	if err != nil || d.Oldest.IsZero() {
		return 0
	}
	return max(in.now().Sub(d.Oldest), 0)
}
