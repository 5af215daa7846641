// Package boltqueue is the embedded queue.Queue: one bbolt file in the data folder. Writes go through
// boltdb.Batcher, so concurrent receivers share one commit (and one fsync) instead of queueing for
// one each; a message is durable when Enqueue returns.
//
// Layout: msgs holds each message by a sequence number; due indexes them by the time they become
// visible (8-byte big-endian nanoseconds, then the sequence), so Receive reads only what is due;
// seen holds deduplication keys until they expire, indexed by expiry in seenexp for pruning; dead
// holds dead-lettered messages.
package boltqueue

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/services/chat/queue"
)

var (
	bucketMeta    = []byte("meta")
	bucketMsgs    = []byte("msgs")
	bucketDue     = []byte("due")
	bucketSeen    = []byte("seen")
	bucketSeenExp = []byte("seenexp")
	bucketDead    = []byte("dead")
	allBuckets    = [][]byte{bucketMsgs, bucketDue, bucketSeen, bucketSeenExp, bucketDead}
)

const schemaVersion = 1

// pruneBatch bounds how many expired deduplication keys one Enqueue removes, so a backlog of them is
// cleared over many writes instead of stalling one.
const pruneBatch = 64

// Options tune the queue.
type Options struct {
	// DedupeWindow is how long an enqueued key keeps a second message with that key out. Slack
	// retries an event for about an hour; the default is two.
	DedupeWindow time.Duration
	// Now is the clock; nil is time.Now. Tests move it.
	Now func() time.Time
}

// Queue is the bbolt adapter.
type Queue struct {
	db    *bolt.DB
	batch *boltdb.Batcher
	opts  Options
	mu    sync.Mutex // guards what follows
	// changed is closed (and replaced) when a message may have become due sooner than a waiting
	// Receive expects: an Enqueue, a Retry, a Close. Every waiting Receive wakes, looks (read-only)
	// and only one that finds a due message writes.
	changed chan struct{}
	closed  bool
}

var _ queue.Queue = (*Queue)(nil)

type record struct {
	Key        string `json:"k"`
	Body       []byte `json:"b"`
	Attempts   int    `json:"a"`
	VisibleAt  int64  `json:"v"`
	EnqueuedAt int64  `json:"e"`
}

// Open opens (or creates) the queue file at path.
func Open(path string, opts Options, logger *zap.Logger) (*Queue, error) {
	if opts.DedupeWindow <= 0 {
		opts.DedupeWindow = 2 * time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	// The whole-file consistency check runs at every open, as for the secrets store: a queue file is
	// small (it holds what is not yet dispatched), and a damaged page met later would panic in bbolt.
	db, err := boltdb.Open(path, boltdb.Options{Check: true}, logger)
	if err != nil {
		return nil, err
	}
	if err := boltdb.EnsureSchema(db, bucketMeta, schemaVersion); err != nil {
		_ = db.Close()
		return nil, err
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		_ = db.Close()
		return nil, err
	}
	return &Queue{db: db, batch: boltdb.NewBatcher(db), opts: opts, changed: make(chan struct{})}, nil
}

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

func dueKey(visibleAt int64, seq uint64) []byte {
	return append(u64(uint64(max(visibleAt, 0))), u64(seq)...)
}

func receipt(seq uint64, attempts int) string {
	return strconv.FormatUint(seq, 10) + "." + strconv.Itoa(attempts)
}

func parseReceipt(r string) (uint64, int, error) {
	s, a, ok := strings.Cut(r, ".")
	seq, err1 := strconv.ParseUint(s, 10, 64)
	att, err2 := strconv.Atoi(a)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, queue.ErrStaleReceipt
	}
	return seq, att, nil
}

// wake wakes every waiting Receive.
func (q *Queue) wake() {
	q.mu.Lock()
	close(q.changed)
	q.changed = make(chan struct{})
	q.mu.Unlock()
}

// changes returns the channel the next wake closes.
func (q *Queue) changes() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.changed
}

func (q *Queue) do(fn func(*bolt.Tx) error) error {
	err := q.batch.Do(fn)
	if errors.Is(err, boltdb.ErrClosed) {
		return queue.ErrClosed
	}
	return err
}

// Enqueue implements queue.Queue.
func (q *Queue) Enqueue(ctx context.Context, key string, body []byte) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	now := q.opts.Now().UnixNano()
	stored := false
	err := q.do(func(tx *bolt.Tx) error {
		stored = false
		seen, seenExp := tx.Bucket(bucketSeen), tx.Bucket(bucketSeenExp)
		pruneSeen(seen, seenExp, now)
		if key != "" {
			if v := seen.Get([]byte(key)); v != nil && int64(binary.BigEndian.Uint64(v)) > now {
				return nil
			}
			exp := now + q.opts.DedupeWindow.Nanoseconds()
			if err := seen.Put([]byte(key), u64(uint64(exp))); err != nil {
				return err
			}
			if err := seenExp.Put(append(u64(uint64(exp)), key...), nil); err != nil {
				return err
			}
		}
		msgs := tx.Bucket(bucketMsgs)
		seq, err := msgs.NextSequence()
		if err != nil {
			return err
		}
		data, err := json.Marshal(record{Key: key, Body: body, VisibleAt: now, EnqueuedAt: now})
		if err != nil {
			return err
		}
		if err := msgs.Put(u64(seq), data); err != nil {
			return err
		}
		stored = true
		return tx.Bucket(bucketDue).Put(dueKey(now, seq), nil)
	})
	if err != nil {
		return false, err
	}
	if stored {
		q.wake()
	}
	return stored, nil
}

// Remember implements queue.Queue: the key goes into the same seen bucket as an enqueued one, in
// the file, so it survives a restart.
func (q *Queue) Remember(ctx context.Context, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	now := q.opts.Now().UnixNano()
	first := false
	err := q.do(func(tx *bolt.Tx) error {
		first = false
		seen, seenExp := tx.Bucket(bucketSeen), tx.Bucket(bucketSeenExp)
		pruneSeen(seen, seenExp, now)
		if v := seen.Get([]byte(key)); v != nil && int64(binary.BigEndian.Uint64(v)) > now {
			return nil
		}
		exp := now + q.opts.DedupeWindow.Nanoseconds()
		if err := seen.Put([]byte(key), u64(uint64(exp))); err != nil {
			return err
		}
		first = true
		return seenExp.Put(append(u64(uint64(exp)), key...), nil)
	})
	if err != nil {
		return false, err
	}
	return first, nil
}

// pruneSeen removes up to pruneBatch expired deduplication keys.
func pruneSeen(seen, seenExp *bolt.Bucket, now int64) {
	c := seenExp.Cursor()
	var expired [][]byte
	for k, _ := c.First(); k != nil && len(expired) < pruneBatch; k, _ = c.Next() {
		if int64(binary.BigEndian.Uint64(k[:8])) > now {
			break
		}
		expired = append(expired, boltdb.Copy(k))
	}
	for _, k := range expired {
		_ = seenExp.Delete(k)
		// A key enqueued again after expiry has a later expiry: keep it.
		if v := seen.Get(k[8:]); v != nil && bytes.Equal(v, k[:8]) {
			_ = seen.Delete(k[8:])
		}
	}
}

// Receive implements queue.Queue. An empty queue costs no write: Receive first looks, read-only,
// at the due index (which also holds when each lease ends), and writes only to lease a message that
// is due. Then it sleeps until an Enqueue or a Retry of this process wakes it (the file is this
// process's alone: bbolt locks it), the next lease ends, or wait is over: one read transaction per
// wait of an idle dispatcher, and no fsync.
func (q *Queue) Receive(ctx context.Context, maxN int, visibility, wait time.Duration) ([]queue.Delivery, error) {
	if maxN <= 0 {
		maxN = 1
	}
	deadline := time.Now().Add(wait)
	for {
		changed := q.changes() // before looking, so a wake after the look is not lost
		next, err := q.nextDue()
		if err != nil {
			return nil, err
		}
		if next > 0 && next <= q.opts.Now().UnixNano() {
			out, err := q.lease(maxN, visibility)
			if err != nil || len(out) > 0 {
				return out, err
			}
			continue // another Receive took it: look again
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return nil, nil
		}
		sleep := remaining
		if next > 0 {
			sleep = min(sleep, time.Duration(next-q.opts.Now().UnixNano()))
		}
		t := time.NewTimer(max(sleep, time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil
		case <-changed:
		case <-t.C:
			if sleep == remaining {
				return nil, nil // the wait is over, and nothing became due meanwhile
			}
		}
		t.Stop()
		if q.isClosed() {
			return nil, queue.ErrClosed
		}
	}
}

func (q *Queue) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// nextDue reads, read-only, when the first message is due (visible, or its lease ends); 0 with none.
func (q *Queue) nextDue() (int64, error) {
	var next int64
	err := q.db.View(func(tx *bolt.Tx) error {
		if k, _ := tx.Bucket(bucketDue).Cursor().First(); k != nil {
			next = max(int64(binary.BigEndian.Uint64(k[:8])), 1)
		}
		return nil
	})
	if errors.Is(err, bolterrors.ErrDatabaseNotOpen) {
		return 0, queue.ErrClosed
	}
	return next, err
}

// lease takes up to maxN due messages, in one write transaction.
func (q *Queue) lease(maxN int, visibility time.Duration) ([]queue.Delivery, error) {
	var out []queue.Delivery
	now := q.opts.Now().UnixNano()
	err := q.do(func(tx *bolt.Tx) error {
		out = out[:0]
		msgs, due := tx.Bucket(bucketMsgs), tx.Bucket(bucketDue)
		c := due.Cursor()
		var keys [][]byte
		for k, _ := c.First(); k != nil && len(keys) < maxN; k, _ = c.Next() {
			if at := int64(binary.BigEndian.Uint64(k[:8])); at > now {
				break
			}
			keys = append(keys, boltdb.Copy(k))
		}
		for _, k := range keys {
			seq := binary.BigEndian.Uint64(k[8:])
			if err := due.Delete(k); err != nil {
				return err
			}
			var r record
			data := msgs.Get(k[8:])
			if data == nil {
				continue
			}
			if err := json.Unmarshal(data, &r); err != nil {
				return fmt.Errorf("boltqueue: message %d: %w", seq, err)
			}
			r.Attempts++
			r.VisibleAt = now + visibility.Nanoseconds()
			data, err := json.Marshal(r)
			if err != nil {
				return err
			}
			if err := msgs.Put(k[8:], data); err != nil {
				return err
			}
			if err := due.Put(dueKey(r.VisibleAt, seq), nil); err != nil {
				return err
			}
			out = append(out, queue.Delivery{Receipt: receipt(seq, r.Attempts), Key: r.Key, Body: r.Body, Attempts: r.Attempts, EnqueuedAt: time.Unix(0, r.EnqueuedAt)})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// leased runs fn on the record of a current lease, inside a write transaction.
func (q *Queue) leased(ctx context.Context, rcpt string, fn func(tx *bolt.Tx, seq uint64, r *record) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	seq, attempts, err := parseReceipt(rcpt)
	if err != nil {
		return err
	}
	now := q.opts.Now().UnixNano()
	return q.do(func(tx *bolt.Tx) error {
		data := tx.Bucket(bucketMsgs).Get(u64(seq))
		if data == nil {
			return queue.ErrStaleReceipt
		}
		var r record
		if err := json.Unmarshal(data, &r); err != nil {
			return err
		}
		// A lease that has run out is stale too: the message may be with another dispatcher by now.
		if r.Attempts != attempts || r.VisibleAt <= now {
			return queue.ErrStaleReceipt
		}
		if err := tx.Bucket(bucketDue).Delete(dueKey(r.VisibleAt, seq)); err != nil {
			return err
		}
		return fn(tx, seq, &r)
	})
}

// Ack implements queue.Queue.
func (q *Queue) Ack(ctx context.Context, rcpt string) error {
	return q.leased(ctx, rcpt, func(tx *bolt.Tx, seq uint64, _ *record) error {
		return tx.Bucket(bucketMsgs).Delete(u64(seq))
	})
}

// Extend implements queue.Queue. A lease is the time until the message is visible again, so
// extending it moves that time, as Retry does; the receipt (sequence and attempts) stays valid.
func (q *Queue) Extend(ctx context.Context, rcpt string, visibility time.Duration) error {
	return q.visibleAfter(ctx, rcpt, visibility)
}

// Retry implements queue.Queue.
func (q *Queue) Retry(ctx context.Context, rcpt string, delay time.Duration) error {
	return q.visibleAfter(ctx, rcpt, delay)
}

// visibleAfter makes a leased message visible again d from now.
func (q *Queue) visibleAfter(ctx context.Context, rcpt string, d time.Duration) error {
	err := q.leased(ctx, rcpt, func(tx *bolt.Tx, seq uint64, r *record) error {
		r.VisibleAt = q.opts.Now().UnixNano() + d.Nanoseconds()
		data, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketMsgs).Put(u64(seq), data); err != nil {
			return err
		}
		return tx.Bucket(bucketDue).Put(dueKey(r.VisibleAt, seq), nil)
	})
	if err == nil {
		q.wake()
	}
	return err
}

// DeadLetter implements queue.Queue.
func (q *Queue) DeadLetter(ctx context.Context, rcpt string) error {
	return q.leased(ctx, rcpt, func(tx *bolt.Tx, seq uint64, r *record) error {
		data, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketDead).Put(u64(seq), data); err != nil {
			return err
		}
		return tx.Bucket(bucketMsgs).Delete(u64(seq))
	})
}

// Depth implements queue.Queue.
func (q *Queue) Depth(ctx context.Context) (queue.Depth, error) {
	var d queue.Depth
	now := q.opts.Now().UnixNano()
	err := q.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketDue).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if int64(binary.BigEndian.Uint64(k[:8])) <= now {
				d.Ready++
			} else {
				d.InFlight++
			}
		}
		d.Dead = tx.Bucket(bucketDead).Stats().KeyN
		// Sequence numbers grow: the first message is the oldest held.
		if _, v := tx.Bucket(bucketMsgs).Cursor().First(); v != nil {
			var r record
			if err := json.Unmarshal(v, &r); err == nil {
				d.Oldest = time.Unix(0, r.EnqueuedAt)
			}
		}
		return nil
	})
	return d, err
}

// Close implements queue.Queue.
func (q *Queue) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	q.closed = true
	close(q.changed) // wakes waiting Receives, which then report ErrClosed
	q.changed = make(chan struct{})
	q.batch.Close()
	return q.db.Close()
}
