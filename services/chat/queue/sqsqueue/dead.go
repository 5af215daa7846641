package sqsqueue

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gantry-dev/gantry/services/chat/queue"
)

var _ queue.DeadLetters = (*Queue)(nil)

// deadHold is how long the operator's commands hide the dead-letter queue's messages while they
// read them all (SQS can only list by receiving); they are made visible again at once after.
const deadHold = time.Minute

// receiveDead receives the messages of the dead-letter queue (up to limit; 0: all), hiding each
// for deadHold, until a receive brings nothing new.
func (q *Queue) receiveDead(ctx context.Context, limit int) ([]types.Message, error) {
	seen := map[string]bool{}
	var out []types.Message
	for limit <= 0 || len(out) < limit {
		res, err := q.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(q.deadURL), MaxNumberOfMessages: maxReceiveBatch,
			VisibilityTimeout: int32(seconds(deadHold)), WaitTimeSeconds: 1,
		})
		if err != nil {
			q.release(out)
			return nil, fmt.Errorf("sqsqueue: receive from the dead-letter queue: %w", err)
		}
		fresh := 0
		for _, m := range res.Messages {
			if id := aws.ToString(m.MessageId); !seen[id] {
				seen[id] = true
				out = append(out, m)
				fresh++
			}
		}
		if fresh == 0 {
			break
		}
	}
	return out, nil
}

// release makes received dead letters visible again.
func (q *Queue) release(ms []types.Message) {
	for _, m := range ms {
		_, _ = q.client.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(q.deadURL), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0,
		})
	}
}

func deadMessage(m types.Message) queue.DeadMessage {
	d := queue.DeadMessage{ID: aws.ToString(m.MessageId), Body: []byte(aws.ToString(m.Body))}
	var env envelope
	if json.Unmarshal(d.Body, &env) == nil && env.Key != "" {
		d.Key, d.EnqueuedAt = env.Key, time.UnixMilli(env.EnqueuedAt)
		d.Body = env.Bytes
		if env.Bytes == nil {
			d.Body = []byte(env.Text)
		}
	}
	return d
}

// ListDead implements queue.DeadLetters. SQS lists only by receiving: the messages are hidden while
// they are read, then made visible again.
func (q *Queue) ListDead(ctx context.Context, limit int) ([]queue.DeadMessage, error) {
	ms, err := q.receiveDead(ctx, limit)
	if err != nil {
		return nil, err
	}
	defer q.release(ms)
	out := make([]queue.DeadMessage, 0, len(ms))
	for _, m := range ms {
		out = append(out, deadMessage(m))
	}
	slices.SortStableFunc(out, func(a, b queue.DeadMessage) int { return a.EnqueuedAt.Compare(b.EnqueuedAt) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// RedriveDead implements queue.DeadLetters: each message is sent to the queue as it was stored (a
// new SQS message, so attempts count from 1 again; on FIFO queues with a deduplication id of its
// own, so SQS does not drop it as the original sent minutes ago), then deleted from the dead letter.
func (q *Queue) RedriveDead(ctx context.Context, ids []string) (int, error) {
	return q.eachDead(ctx, ids, func(m types.Message) error {
		d := deadMessage(m)
		if err := q.send(ctx, q.queueURL, q.fifo, d.Key+"/redrive/"+aws.ToString(m.MessageId), aws.ToString(m.Body)); err != nil {
			return fmt.Errorf("sqsqueue: send %s back to the queue: %w", aws.ToString(m.MessageId), err)
		}
		return nil
	})
}

// DropDead implements queue.DeadLetters.
func (q *Queue) DropDead(ctx context.Context, ids []string) (int, error) {
	return q.eachDead(ctx, ids, func(types.Message) error { return nil })
}

// eachDead runs fn on the dead letters of ids (none: all) and deletes each fn succeeded on. An id
// not found is an error, reported after the others were handled.
func (q *Queue) eachDead(ctx context.Context, ids []string, fn func(types.Message) error) (int, error) {
	ms, err := q.receiveDead(ctx, 0)
	if err != nil {
		return 0, err
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var keep []types.Message
	n := 0
	for i, m := range ms {
		id := aws.ToString(m.MessageId)
		if len(ids) > 0 && !want[id] {
			keep = append(keep, m)
			continue
		}
		delete(want, id)
		if err := fn(m); err != nil {
			q.release(append(keep, ms[i:]...))
			return n, err
		}
		if _, err := q.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q.deadURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
			q.release(append(keep, ms[i+1:]...))
			return n, fmt.Errorf("sqsqueue: delete %s from the dead-letter queue: %w", id, err)
		}
		n++
	}
	q.release(keep)
	if len(want) > 0 {
		missing := make([]string, 0, len(want))
		for id := range want {
			missing = append(missing, id)
		}
		slices.Sort(missing)
		return n, fmt.Errorf("not in the dead-letter queue: %s", strings.Join(missing, ", "))
	}
	return n, nil
}
