package boltqueue

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/services/chat/queue"
)

var _ queue.DeadLetters = (*Queue)(nil)

// ListDead implements queue.DeadLetters: by sequence number, which is the order of enqueueing.
func (q *Queue) ListDead(_ context.Context, limit int) ([]queue.DeadMessage, error) {
	var out []queue.DeadMessage
	err := q.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketDead).Cursor()
		for k, v := c.First(); k != nil && (limit <= 0 || len(out) < limit); k, v = c.Next() {
			var r record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("boltqueue: dead letter %d: %w", binary.BigEndian.Uint64(k), err)
			}
			out = append(out, queue.DeadMessage{
				ID: strconv.FormatUint(binary.BigEndian.Uint64(k), 10), Key: r.Key, Body: r.Body,
				EnqueuedAt: time.Unix(0, r.EnqueuedAt), Attempts: r.Attempts,
			})
		}
		return nil
	})
	return out, err
}

// RedriveDead implements queue.DeadLetters: a message keeps its sequence number and enqueue time,
// its attempts start again from 0, and it is due at once.
func (q *Queue) RedriveDead(ctx context.Context, ids []string) (int, error) {
	n := 0
	err := q.eachDead(ctx, ids, func(tx *bolt.Tx, k []byte, r *record) error {
		r.Attempts, r.VisibleAt = 0, q.opts.Now().UnixNano()
		data, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketMsgs).Put(k, data); err != nil {
			return err
		}
		if err := tx.Bucket(bucketDue).Put(dueKey(r.VisibleAt, binary.BigEndian.Uint64(k)), nil); err != nil {
			return err
		}
		n++
		return tx.Bucket(bucketDead).Delete(k)
	})
	if n > 0 {
		q.wake()
	}
	return n, err
}

// DropDead implements queue.DeadLetters.
func (q *Queue) DropDead(ctx context.Context, ids []string) (int, error) {
	n := 0
	err := q.eachDead(ctx, ids, func(tx *bolt.Tx, k []byte, _ *record) error {
		n++
		return tx.Bucket(bucketDead).Delete(k)
	})
	return n, err
}

// eachDead runs fn, in one write transaction, on the dead letters of ids (none: all). An id that
// is not a dead letter is an error, and nothing is changed.
func (q *Queue) eachDead(ctx context.Context, ids []string, fn func(tx *bolt.Tx, k []byte, r *record) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	keys := make([][]byte, 0, len(ids))
	for _, id := range ids {
		seq, err := strconv.ParseUint(id, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not a dead letter id of the bolt queue (a number, as gantry queue list shows)", id)
		}
		keys = append(keys, u64(seq))
	}
	// One transaction of its own, not a batched one: a batch may run fn again.
	return q.db.Update(func(tx *bolt.Tx) error {
		dead := tx.Bucket(bucketDead)
		todo := keys
		if len(ids) == 0 {
			todo = nil
			c := dead.Cursor()
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				todo = append(todo, boltdb.Copy(k))
			}
		}
		for _, k := range todo {
			v := dead.Get(k)
			if v == nil {
				return fmt.Errorf("no dead letter %d", binary.BigEndian.Uint64(k))
			}
			var r record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("boltqueue: dead letter %d: %w", binary.BigEndian.Uint64(k), err)
			}
			if err := fn(tx, k, &r); err != nil {
				return err
			}
		}
		return nil
	})
}

// OpenExisting opens a queue file that must exist, for an operator's command (gantry queue): a
// missing file is an error, not a new queue. It fails with boltdb.ErrLocked (wrapped) while a
// gantry holds the file.
func OpenExisting(path string) (*Queue, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("no chat queue at %s: %w", path, err)
	}
	return Open(path, Options{}, nil)
}
