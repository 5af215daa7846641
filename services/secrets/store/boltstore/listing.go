package boltstore

import (
	"bytes"
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/codec"
)

// listing is what one listing of the store is made of; list runs it. Every listing but
// ListAllServiceRevisions (which walks two buckets at once) walks one bucket in key order from the
// position of a page token.
type listing[T any] struct {
	// op is the store.Store method, naming a failure in the log.
	op string
	// token is the kind of the listing's page tokens (codec.Token...), and validKey tells whether a
	// token's key has the shape of walk's keys.
	token    byte
	validKey func(key []byte) bool
	// walk is the bucket walked: the records themselves, or, when records is set, an index whose keys
	// end, after their first 0x00, with the key of a record in records.
	walk, records []byte
	// within keeps the keys of walk that start with it.
	within []byte
	// current and id, when set, are the bucket of current records and the id whose history is
	// listed: without a current record the listing is store.ErrNotFound.
	current, id []byte
	decode      func(bucket, raw []byte) (*T, error)
}

// list returns one page of l and the token of the next ("" after the last page), in one read
// transaction.
func list[T any](ctx context.Context, s *Store, page store.Page, l listing[T]) ([]*T, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	after, err := codec.DecodePageToken(page, l.token, l.validKey)
	if err != nil {
		return nil, "", err
	}
	area := l.walk // the bucket the records are decoded from, naming a damaged one
	if l.records != nil {
		area = l.records
	}
	var out []*T
	var next []byte
	err = s.view(ctx, func(tx *bolt.Tx) error {
		if l.current != nil && tx.Bucket(l.current).Get(l.id) == nil {
			return store.ErrNotFound
		}
		if tx.Bucket(l.walk) == nil {
			return nil // a bucket newer than a file opened read-only: nothing in it (see getRecord)
		}
		records := tx.Bucket(area)
		var err error
		next, err = scanPage(tx.Bucket(l.walk), l.within, after, page.Limit, func(k, v []byte) error {
			if l.records != nil {
				if v = records.Get(k[bytes.IndexByte(k, 0)+1:]); v == nil {
					return fmt.Errorf("index %s points to a missing record", l.walk)
				}
			}
			rec, err := l.decode(area, v)
			out = append(out, rec)
			return err
		})
		return err
	})
	if err != nil {
		return nil, "", s.result(l.op, err)
	}
	return out, codec.EncodePageToken(l.token, next), nil
}

// listRevisions runs l, a listing of a history bucket (id|rev → record), over the revisions of id,
// which must have a current record in current: ListCredentialRevisions and ListServiceRevisions.
func listRevisions[T any](ctx context.Context, s *Store, id string, page store.Page, current []byte, l listing[T]) ([]*T, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	if !codec.ValidKeyPart(id) {
		return nil, "", store.ErrNotFound
	}
	prefix := codec.RevPrefix(id)
	l.within, l.validKey = prefix, codec.ValidRevKeyOf(prefix)
	l.current, l.id = current, []byte(id)
	return list(ctx, s, page, l)
}

// scanPage visits the keys of b that start with prefix, from the first one after `after` (nil: from
// the start), until it has visited limit keys (0: no limit). It returns the last visited key when at
// least one more key follows, else nil. It never looks at more than limit+1 keys.
func scanPage(b *bolt.Bucket, prefix, after []byte, limit int, visit func(k, v []byte) error) ([]byte, error) {
	c := b.Cursor()
	var k, v []byte
	switch {
	case after != nil:
		if k, v = c.Seek(after); bytes.Equal(k, after) {
			k, v = c.Next()
		}
	case len(prefix) > 0:
		k, v = c.Seek(prefix)
	default:
		k, v = c.First()
	}
	var last []byte
	for n := 0; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if limit > 0 && n == limit {
			return boltdb.Copy(last), nil
		}
		if err := visit(k, v); err != nil {
			return nil, err
		}
		last = k
		n++
	}
	return nil, nil
}
