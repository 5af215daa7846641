// Package sqsqueue is the queue.Queue of chat replicas that share the work: AWS SQS, through
// aws-sdk-go-v2.
//
// The mapping: Enqueue is SendMessage; Receive is ReceiveMessage with the lease as its
// VisibilityTimeout (long polling up to SQS's 20 s), and Attempts is SQS's ApproximateReceiveCount;
// Ack is DeleteMessage; Retry is ChangeMessageVisibility to the backoff; DeadLetter sends the message
// to the dead-letter queue and then deletes it (a crash between the two leaves it in both, which is
// at least once again). SQS counts seconds: a lease or a delay is rounded up to the next second, and
// a wait shorter than a second is a short poll.
//
// Deduplication: SQS standard queues keep no record of what was sent, so each replica remembers the
// keys it enqueued for the dedupe window, and a Slack retry that reaches the same replica is refused
// there. A retry that reaches another replica is caught only by a FIFO queue (a URL ending in
// ".fifo"): the key becomes the MessageDeduplicationId (and the MessageGroupId, so events never wait
// for one another), and SQS drops a duplicate sent within its 5-minute interval, while still
// answering it like a success — so Enqueue reports true for it. Slack retries at once, after a
// minute and about five minutes later: the interval catches the first two on any replica, the last
// only on the replica that took the original. Backends should still be idempotent (by event_id), as
// SQS standard queues also deliver twice on rare occasions.
//
// Stale receipts: SQS accepts DeleteMessage with a stale receipt handle (it succeeds and deletes
// nothing). This adapter remembers the leases it handed out, and so reports queue.ErrStaleReceipt for
// a lease of this process that has run out or was already settled; a receipt it does not know (a
// restart since) is passed to SQS as is.
package sqsqueue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/awsconfig"
	"github.com/gantry-dev/gantry/services/chat/queue"
)

// Limits of SQS itself.
const (
	maxWait          = 20 * time.Second
	maxVisibility    = 12 * time.Hour
	maxReceiveBatch  = 10
	dedupeIDLength   = 64 // hex of a SHA-256: the key may be longer than SQS's 128 or hold other characters
	defaultDedupe    = 2 * time.Hour
	connectTimeout   = 5 * time.Second
	depthCacheMaxAge = time.Second
	depthTimeout     = 2 * time.Second
	// readTimeout bounds the wait for an answer's headers, so it outlasts the longest long poll.
	readTimeout = maxWait + 10*time.Second
	// settledLeaseMemory is how long a lease is remembered after it ended, to tell a second Ack of
	// it stale.
	settledLeaseMemory = time.Hour
	// deadLetterHold is how long DeadLetter holds a message while it copies it to the dead letter.
	deadLetterHold = 30 * time.Second
	// MaxMessageBytes is SQS's limit on a message (body and attributes): 256 KiB. A request whose
	// envelope is larger is refused by Enqueue with queue.ErrTooLarge, before SQS is asked.
	MaxMessageBytes = 256 * 1024
	// receivedMemory is how long this replica remembers how often it received a message, for the
	// attempts of a queue that returns no receive count.
	receivedMemory = 24 * time.Hour
)

// receiveCountName is ApproximateReceiveCount, asked for both as a message system attribute and
// through the older AttributeNames: SQS answers either, some SQS look-alikes (moto, elasticmq) and
// older servers only the second.
const receiveCountName = "ApproximateReceiveCount"

// Options say which queues to use and how to reach SQS.
type Options struct {
	// QueueURL is the queue of received requests; a ".fifo" URL deduplicates across replicas.
	QueueURL string
	// DeadLetterURL is where DeadLetter moves a message: a FIFO queue if QueueURL is one.
	DeadLetterURL string
	// Region signs the requests; empty is the SDK's usual sources (AWS_REGION, profiles), then the
	// region in QueueURL's host (sqs.<region>.amazonaws.com).
	Region string
	// Endpoint overrides the SQS endpoint (a VPC endpoint, a test fake); empty is AWS's.
	Endpoint string
	// DedupeWindow is how long this replica remembers an enqueued key; zero is two hours.
	DedupeWindow time.Duration
}

// Queue is the SQS adapter. Its methods are safe for concurrent use.
type Queue struct {
	client            *sqs.Client
	queueURL, deadURL string
	fifo, deadFIFO    bool
	dedupeWindow      time.Duration
	closing           context.Context // cancelled by Close, to end long polls
	close             context.CancelFunc

	mu             sync.Mutex // guards what follows
	closed         bool
	seen           map[string]time.Time // key -> when this replica enqueued it
	seenOrder      []seenKey            // the same, oldest first, for pruning
	leases         map[string]*lease    // by receipt handle
	leasesPrunedAt time.Time
	// received counts the receives of each message by this replica, by message id: the attempts of
	// a message when SQS reports a lower count, or none.
	received map[string]*receivedCount
	depth    queue.Depth // the last answer of Depth, and when
	depthErr error
	depthAt  time.Time
}

type receivedCount struct {
	n    int
	last time.Time
}

type seenKey struct {
	key string
	at  time.Time
}

// lease is what this process knows of a message it received: enough to dead-letter it, and when the
// lease ends by its own clock (measured from before the ReceiveMessage call, so never later than
// SQS's).
type lease struct {
	id      string // SQS's message id
	key     string
	body    string // the message as stored in SQS (the envelope)
	ends    time.Time
	settled bool
}

// envelope is a message as stored in SQS: SQS has no separate key, and a body must be text.
type envelope struct {
	Key        string `json:"k"`
	Text       string `json:"t,omitempty"`
	Bytes      []byte `json:"b,omitempty"` // a body that is not UTF-8
	EnqueuedAt int64  `json:"at"`          // Unix milliseconds
}

var _ queue.Queue = (*Queue)(nil)

// Open returns the queue. It does not contact AWS, so a misconfiguration (no credentials, a wrong
// URL) shows up on the first call. optFns adjust the SQS client after the defaults (tests use them
// for static credentials and retries).
func Open(ctx context.Context, o Options, logger *zap.Logger, optFns ...func(*sqs.Options)) (*Queue, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	for _, u := range []string{o.QueueURL, o.DeadLetterURL} {
		if p, err := url.Parse(u); err != nil || p.Host == "" || (p.Scheme != "https" && p.Scheme != "http") {
			return nil, fmt.Errorf("sqsqueue: %q is not a queue URL", u)
		}
	}
	fifo, deadFIFO := strings.HasSuffix(o.QueueURL, ".fifo"), strings.HasSuffix(o.DeadLetterURL, ".fifo")
	if fifo != deadFIFO {
		return nil, errors.New("sqsqueue: the queue and its dead letter must both be FIFO queues (.fifo) or both standard ones")
	}
	awsCfg, err := awsconfig.Load(ctx, awsconfig.Options{
		Region: o.Region, Endpoint: o.Endpoint, ConnectTimeout: connectTimeout, ReadTimeout: readTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("sqsqueue: %w", err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = regionOf(o.QueueURL)
	}
	if awsCfg.Region == "" {
		return nil, errors.New("sqsqueue: no AWS region: set AWS_REGION")
	}
	client := sqs.NewFromConfig(awsCfg, func(so *sqs.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
		for _, fn := range optFns {
			fn(so)
		}
	})
	closing, cancel := context.WithCancel(context.Background())
	window := o.DedupeWindow
	if window <= 0 {
		window = defaultDedupe
	}
	logger.Info("using AWS SQS for the inbound queue", zap.String("region", awsCfg.Region),
		zap.String("queue_url", o.QueueURL), zap.String("dead_letter_url", o.DeadLetterURL), zap.Bool("fifo", fifo))
	return &Queue{
		client: client, queueURL: o.QueueURL, deadURL: o.DeadLetterURL, fifo: fifo, deadFIFO: deadFIFO,
		dedupeWindow: window, closing: closing, close: cancel,
		seen: map[string]time.Time{}, leases: map[string]*lease{}, received: map[string]*receivedCount{},
	}, nil
}

// regionOf reads the region from an AWS queue URL (https://sqs.<region>.amazonaws.com/... or the
// legacy https://<region>.queue.amazonaws.com/...); "" for another host.
func regionOf(queueURL string) string {
	u, err := url.Parse(queueURL)
	if err != nil {
		return ""
	}
	parts := strings.Split(u.Hostname(), ".")
	switch {
	case len(parts) >= 4 && parts[0] == "sqs" && parts[2] == "amazonaws":
		return parts[1]
	case len(parts) >= 4 && parts[1] == "queue" && parts[2] == "amazonaws":
		return parts[0]
	}
	return ""
}

func (q *Queue) checkOpen() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return queue.ErrClosed
	}
	return nil
}

// dedupeID is the FIFO deduplication and group id of a key.
func dedupeID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])[:dedupeIDLength]
}

// Enqueue implements queue.Queue.
func (q *Queue) Enqueue(ctx context.Context, key string, body []byte) (bool, error) {
	if err := q.checkOpen(); err != nil {
		return false, err
	}
	now := time.Now()
	q.mu.Lock()
	q.pruneSeen(now)
	if at, dup := q.seen[key]; dup && now.Sub(at) < q.dedupeWindow {
		q.mu.Unlock()
		return false, nil
	}
	// Claimed before sending, so two receivers of one retry in this replica do not both send it.
	q.seen[key] = now
	q.seenOrder = append(q.seenOrder, seenKey{key, now})
	q.mu.Unlock()

	env := envelope{Key: key, EnqueuedAt: now.UnixMilli()}
	if utf8.Valid(body) {
		env.Text = string(body)
	} else {
		env.Bytes = body
	}
	data, err := json.Marshal(env)
	if err == nil && len(data) > MaxMessageBytes {
		err = fmt.Errorf("%w: %d bytes, over SQS's limit of %d (256 KiB) with gantry's envelope", queue.ErrTooLarge, len(data), MaxMessageBytes)
	}
	if err == nil {
		err = q.send(ctx, q.queueURL, q.fifo, key, string(data))
	}
	if err != nil {
		q.mu.Lock()
		delete(q.seen, key) // not stored: Slack's retry must be let in
		q.mu.Unlock()
		if errors.Is(err, queue.ErrTooLarge) {
			return false, fmt.Errorf("sqsqueue: %w", err)
		}
		return false, fmt.Errorf("sqsqueue: send: %w", err)
	}
	return true, nil
}

// Remember implements queue.Queue. SQS has no deduplication without a message, so a remembered key
// is held by this replica alone, in memory: a restart forgets it, and another replica does not see it.
func (q *Queue) Remember(_ context.Context, key string) (bool, error) {
	if err := q.checkOpen(); err != nil {
		return false, err
	}
	now := time.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pruneSeen(now)
	if at, dup := q.seen[key]; dup && now.Sub(at) < q.dedupeWindow {
		return false, nil
	}
	q.seen[key] = now
	q.seenOrder = append(q.seenOrder, seenKey{key, now})
	return true, nil
}

func (q *Queue) send(ctx context.Context, queueURL string, fifo bool, key, body string) error {
	in := &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String(body)}
	if fifo {
		id := dedupeID(key)
		in.MessageDeduplicationId, in.MessageGroupId = aws.String(id), aws.String(id)
	}
	_, err := q.client.SendMessage(ctx, in)
	return err
}

// pruneSeen forgets keys older than the dedupe window. Called with q.mu held.
func (q *Queue) pruneSeen(now time.Time) {
	n := 0
	for n < len(q.seenOrder) && now.Sub(q.seenOrder[n].at) >= q.dedupeWindow {
		if k := q.seenOrder[n]; q.seen[k.key].Equal(k.at) {
			delete(q.seen, k.key)
		}
		n++
	}
	q.seenOrder = q.seenOrder[n:]
}

// Receive implements queue.Queue.
func (q *Queue) Receive(ctx context.Context, limit int, visibility, wait time.Duration) ([]queue.Delivery, error) {
	if err := q.checkOpen(); err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-q.closing.Done():
			stop()
		case <-ctx.Done():
		}
	}()
	started := time.Now()
	out, err := q.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(q.queueURL),
		MaxNumberOfMessages:         int32(min(max(limit, 1), maxReceiveBatch)),
		VisibilityTimeout:           int32(seconds(min(visibility, maxVisibility))),
		WaitTimeSeconds:             int32(min(max(wait, 0), maxWait) / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{receiveCountName},
		//lint:ignore SA1019 the older spelling, for servers that know only it (moto, elasticmq)
		AttributeNames: []types.QueueAttributeName{receiveCountName},
	})
	if err != nil {
		if ctx.Err() != nil {
			if q.checkOpen() != nil {
				return nil, queue.ErrClosed
			}
			return nil, nil // the caller gave up waiting: an empty answer, as documented
		}
		return nil, fmt.Errorf("sqsqueue: receive: %w", err)
	}
	leaseEnds := started.Add(time.Duration(seconds(visibility)) * time.Second)
	ds := make([]queue.Delivery, 0, len(out.Messages))
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pruneLeases(started)
	for _, m := range out.Messages {
		body, handle, id := aws.ToString(m.Body), aws.ToString(m.ReceiptHandle), aws.ToString(m.MessageId)
		// SQS's count covers every replica; this replica's own count stands in where SQS's is
		// missing (or lower, as an approximate count may be), so a failing message still reaches
		// the dead letter after the set attempts.
		attempts, _ := strconv.Atoi(m.Attributes[receiveCountName])
		rc := q.received[id]
		if rc == nil {
			rc = &receivedCount{}
			q.received[id] = rc
		}
		rc.n++
		rc.last = started
		d := queue.Delivery{Receipt: handle, Attempts: max(attempts, rc.n, 1)}
		var env envelope
		if err := json.Unmarshal([]byte(body), &env); err != nil || env.Key == "" {
			// Not sent by this adapter: hand it over as it is, the dispatcher dead-letters what it
			// cannot read.
			d.Key, d.Body = aws.ToString(m.MessageId), []byte(body)
		} else {
			d.Key, d.EnqueuedAt = env.Key, time.UnixMilli(env.EnqueuedAt)
			d.Body = env.Bytes
			if env.Bytes == nil {
				d.Body = []byte(env.Text)
			}
		}
		q.leases[handle] = &lease{id: id, key: d.Key, body: body, ends: leaseEnds}
		ds = append(ds, d)
	}
	return ds, nil
}

// seconds rounds d up to whole seconds, SQS's unit.
func seconds(d time.Duration) int64 {
	return int64((max(d, 0) + time.Second - 1) / time.Second)
}

// pruneLeases forgets leases ended long ago, once a minute. Called with q.mu held.
func (q *Queue) pruneLeases(now time.Time) {
	if now.Sub(q.leasesPrunedAt) < time.Minute {
		return
	}
	q.leasesPrunedAt = now
	for h, l := range q.leases {
		if now.Sub(l.ends) > settledLeaseMemory {
			delete(q.leases, h)
		}
	}
	for id, rc := range q.received {
		if now.Sub(rc.last) > receivedMemory {
			delete(q.received, id)
		}
	}
}

// leaseState is what this process knows of a receipt.
type leaseState int

const (
	leaseUnknown leaseState = iota // not received here (or forgotten): only SQS can tell
	leaseCurrent                   // received here, not settled, not run out
	leaseRanOut                    // received here, not settled, but its lease ended
	leaseSettled                   // already acked, retried or dead-lettered
)

// settle marks the lease of receipt settled, and returns it and what it was before.
func (q *Queue) settle(receipt string) (*lease, leaseState, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil, leaseUnknown, queue.ErrClosed
	}
	l, ok := q.leases[receipt]
	switch {
	case !ok:
		return nil, leaseUnknown, nil
	case l.settled:
		return l, leaseSettled, nil
	}
	l.settled = true
	if time.Now().After(l.ends) {
		return l, leaseRanOut, nil
	}
	return l, leaseCurrent, nil
}

// staleOr maps SQS's answers for a receipt handle that is no longer good to ErrStaleReceipt.
func staleOr(op string, err error) error {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "ReceiptHandleIsInvalid", "MessageNotInflight", "InvalidParameterValue",
			"AWS.SimpleQueueService.MessageNotInflight":
			return fmt.Errorf("%w: %s: %s", queue.ErrStaleReceipt, op, apiErr.ErrorMessage())
		}
	}
	return fmt.Errorf("sqsqueue: %s: %w", op, err)
}

// Ack implements queue.Queue. A lease that ran out is still deleted if no one received the message
// since (SQS ignores the call otherwise), and reported stale: the message may be delivered again.
func (q *Queue) Ack(ctx context.Context, receipt string) error {
	_, state, err := q.settle(receipt)
	switch {
	case err != nil:
		return err
	case receipt == "" || state == leaseSettled:
		return queue.ErrStaleReceipt
	}
	if _, err := q.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q.queueURL), ReceiptHandle: aws.String(receipt)}); err != nil {
		return staleOr("delete", err)
	}
	q.forget(receipt)
	if state == leaseRanOut {
		return fmt.Errorf("%w: the lease ran out before the ack", queue.ErrStaleReceipt)
	}
	return nil
}

// Extend implements queue.Queue: ChangeMessageVisibility on a lease this process holds. The lease's
// end by this process's clock moves only once SQS has accepted, counted from before the call.
func (q *Queue) Extend(ctx context.Context, receipt string, visibility time.Duration) error {
	q.mu.Lock()
	l, ok := q.leases[receipt]
	current := ok && !l.settled && time.Now().Before(l.ends)
	closed := q.closed
	q.mu.Unlock()
	switch {
	case closed:
		return queue.ErrClosed
	case !current:
		// An unknown receipt too: ChangeMessageVisibility on a handle another receive replaced
		// succeeds in SQS, and would hold a message another dispatcher now works on.
		return queue.ErrStaleReceipt
	}
	started := time.Now()
	secs := seconds(min(visibility, maxVisibility))
	if _, err := q.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(q.queueURL), ReceiptHandle: aws.String(receipt), VisibilityTimeout: int32(secs),
	}); err != nil {
		return staleOr("extend the lease", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !l.settled {
		l.ends = started.Add(time.Duration(secs) * time.Second)
	}
	return nil
}

// Retry implements queue.Queue.
func (q *Queue) Retry(ctx context.Context, receipt string, delay time.Duration) error {
	_, state, err := q.settle(receipt)
	switch {
	case err != nil:
		return err
	case receipt == "" || state == leaseSettled || state == leaseRanOut:
		return queue.ErrStaleReceipt
	}
	_, err = q.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(q.queueURL), ReceiptHandle: aws.String(receipt),
		VisibilityTimeout: int32(seconds(min(delay, maxVisibility))),
	})
	if err != nil {
		return staleOr("change visibility", err)
	}
	return nil
}

// DeadLetter implements queue.Queue. It first extends the lease, which SQS refuses for a lease that
// ended, so a message another dispatcher holds is not copied to the dead letter.
func (q *Queue) DeadLetter(ctx context.Context, receipt string) error {
	l, state, err := q.settle(receipt)
	if err != nil {
		return err
	}
	if state != leaseCurrent {
		// An unknown receipt too: the body to copy is known only to the process that received it.
		return queue.ErrStaleReceipt
	}
	if _, err := q.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(q.queueURL), ReceiptHandle: aws.String(receipt),
		VisibilityTimeout: int32(seconds(deadLetterHold)),
	}); err != nil {
		return staleOr("hold for the dead letter", err)
	}
	if err := q.send(ctx, q.deadURL, q.deadFIFO, l.key, l.body); err != nil {
		return fmt.Errorf("sqsqueue: send to the dead letter: %w", err)
	}
	if _, err := q.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q.queueURL), ReceiptHandle: aws.String(receipt)}); err != nil {
		// In both queues now; when it is received again it fails again and is copied again.
		return staleOr("delete after dead-lettering", err)
	}
	q.forget(receipt)
	return nil
}

// forget drops the receive count of a deleted message.
func (q *Queue) forget(receipt string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if l := q.leases[receipt]; l != nil {
		delete(q.received, l.id)
	}
}

// Depth implements queue.Queue with SQS's approximate counts. Messages waiting for a retry are in
// flight to SQS. The stats read it once per gauge, from the admin listener: the answer (or the
// failure) is kept for a second, and the calls are bounded, so a slow SQS cannot hold /stats up.
func (q *Queue) Depth(ctx context.Context) (queue.Depth, error) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return queue.Depth{}, queue.ErrClosed
	}
	if !q.depthAt.IsZero() && time.Since(q.depthAt) < depthCacheMaxAge {
		d, err := q.depth, q.depthErr
		q.mu.Unlock()
		return d, err
	}
	q.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, depthTimeout)
	defer cancel()
	var d queue.Depth
	main, err := q.counts(ctx, q.queueURL)
	if err == nil {
		var dead map[types.QueueAttributeName]int
		if dead, err = q.counts(ctx, q.deadURL); err == nil {
			d = queue.Depth{
				Ready:    main[types.QueueAttributeNameApproximateNumberOfMessages],
				InFlight: main[types.QueueAttributeNameApproximateNumberOfMessagesNotVisible] + main[types.QueueAttributeNameApproximateNumberOfMessagesDelayed],
				Dead: dead[types.QueueAttributeNameApproximateNumberOfMessages] + dead[types.QueueAttributeNameApproximateNumberOfMessagesNotVisible] +
					dead[types.QueueAttributeNameApproximateNumberOfMessagesDelayed],
			}
		}
	}
	q.mu.Lock()
	q.depth, q.depthErr, q.depthAt = d, err, time.Now()
	q.mu.Unlock()
	return d, err
}

func (q *Queue) counts(ctx context.Context, queueURL string) (map[types.QueueAttributeName]int, error) {
	names := []types.QueueAttributeName{
		types.QueueAttributeNameApproximateNumberOfMessages,
		types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
	}
	out, err := q.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(queueURL), AttributeNames: names})
	if err != nil {
		return nil, fmt.Errorf("sqsqueue: queue attributes: %w", err)
	}
	counts := map[types.QueueAttributeName]int{}
	for _, n := range names {
		counts[n], _ = strconv.Atoi(out.Attributes[string(n)])
	}
	return counts, nil
}

// Close implements queue.Queue: Receive calls in progress return ErrClosed; messages leased here
// become visible again when their leases end.
func (q *Queue) Close() error {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.close()
	return nil
}
