// Package queue is the durable queue between the chat service's Slack receivers and its dispatcher:
// a receiver answers Slack as soon as the request is stored, and dispatchers take it from here.
//
// Delivery is at least once. A received message is leased for a visibility timeout; a dispatcher
// that does not Ack it in time (it crashed, the process was killed) loses the lease and the message
// becomes visible again. Enqueue deduplicates by key, so Slack's retries of one event are stored
// once. Every adapter (boltqueue, the embedded default; sqsqueue, for replicas sharing AWS SQS)
// passes the conformance suite in queuetest.
package queue

import (
	"context"
	"errors"
	"time"
)

// ErrStaleReceipt is returned by Ack, Retry and DeadLetter for a receipt whose lease has ended: the
// message was delivered again since, or is gone. An adapter over a shared service may know only the
// leases its own process handed out (sqsqueue: SQS itself accepts a stale receipt handle silently),
// so a stale receipt from another process, or from before a restart, is not always reported.
var ErrStaleReceipt = errors.New("queue: stale receipt")

// ErrClosed is returned once the queue was closed.
var ErrClosed = errors.New("queue: closed")

// ErrTooLarge is returned by Enqueue for a message over the adapter's size limit (sqsqueue: SQS's
// 256 KiB).
var ErrTooLarge = errors.New("queue: message too large")

// Delivery is one leased message.
type Delivery struct {
	// Receipt identifies this lease; Ack, Retry and DeadLetter take it.
	Receipt string
	// Key is the deduplication key the message was enqueued with.
	Key string
	// Body is the message as enqueued.
	Body []byte
	// Attempts counts the deliveries of the message, this one included (1 the first time).
	Attempts int
	// EnqueuedAt is when the message was stored.
	EnqueuedAt time.Time
}

// Depth is how many messages the queue holds, by state. Adapters that cannot count exactly (SQS)
// report its approximate numbers.
type Depth struct {
	Ready, InFlight, Dead int
	// Oldest is when the oldest message held (waiting or in flight) was enqueued; zero when the
	// queue is empty or the adapter cannot tell (SQS: CloudWatch's ApproximateAgeOfOldestMessage).
	Oldest time.Time
}

// Queue is a durable at-least-once queue with deduplication and a dead letter.
type Queue interface {
	// Enqueue stores body under key and reports true, unless a message with the same key was enqueued
	// within the queue's deduplication window: then it stores nothing and reports false. It returns
	// only once the message is durable.
	Enqueue(ctx context.Context, key string, body []byte) (bool, error)
	// Remember claims key for the deduplication window without storing a message, for a request
	// handled at once rather than queued (a synchronous interactive callback): it reports true the
	// first time, false when the key was already enqueued or remembered within the window. Keys are
	// one namespace with Enqueue's and last as long as the adapter's deduplication does.
	Remember(ctx context.Context, key string) (bool, error)
	// Receive leases up to max visible messages for visibility. With none visible it waits up to wait
	// for one (or until ctx ends) and then returns an empty list, not an error.
	Receive(ctx context.Context, max int, visibility, wait time.Duration) ([]Delivery, error)
	// Ack deletes a leased message: it was handled.
	Ack(ctx context.Context, receipt string) error
	// Extend keeps a leased message leased for visibility from now: a dispatcher still working on a
	// message calls it before the lease ends (a heartbeat, as SQS's ChangeMessageVisibility), so a
	// slow handler is not given the message a second time. The receipt stays the lease's. A lease
	// that has ended or was settled is ErrStaleReceipt, and is not extended.
	Extend(ctx context.Context, receipt string, visibility time.Duration) error
	// Retry ends a lease early: the message becomes visible again after delay.
	Retry(ctx context.Context, receipt string, delay time.Duration) error
	// DeadLetter moves a leased message to the dead letter, where it stays for an operator.
	DeadLetter(ctx context.Context, receipt string) error
	// Depth counts the messages.
	Depth(ctx context.Context) (Depth, error)
	// Close releases the queue; leased messages become visible again when their lease ends.
	Close() error
}

// DeadMessage is a dead-lettered message, as an operator sees it.
type DeadMessage struct {
	// ID names the message in RedriveDead and DropDead: the bolt queue's sequence number, SQS's
	// message id.
	ID string
	// Key is the deduplication key the message was enqueued with.
	Key string
	// Body is the message as enqueued.
	Body []byte
	// EnqueuedAt is when the message was first stored (zero if unknown).
	EnqueuedAt time.Time
	// Attempts counts the deliveries before it was dead-lettered (0 if unknown).
	Attempts int
}

// DeadLetters is an operator's access to a queue's dead letter (gantry queue list|redrive|drop).
// Both adapters implement it.
type DeadLetters interface {
	// ListDead returns up to limit dead-lettered messages, oldest first where the adapter can tell.
	ListDead(ctx context.Context, limit int) ([]DeadMessage, error)
	// RedriveDead moves the dead-lettered messages with these ids (none: every one) back to the
	// queue, to be delivered again with a fresh count of attempts, and reports how many it moved.
	RedriveDead(ctx context.Context, ids []string) (int, error)
	// DropDead deletes the dead-lettered messages with these ids (none: every one) and reports how
	// many it deleted.
	DropDead(ctx context.Context, ids []string) (int, error)
}
