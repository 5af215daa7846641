package etcdstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/codec"
)

// listing is what one listing of the store is made of; list runs it. Every listing reads one area
// in key order from the position of a page token.
type listing[T any] struct {
	// op is the store.Store method, naming a failure in the log.
	op string
	// token is the kind of the listing's page tokens (codec.Token...), and validKey tells whether a
	// token's key has the shape of area's key parts.
	token    byte
	validKey func(key []byte) bool
	// area is the area read: the records themselves, or, when records is set, an index whose key
	// parts end, after their first 0x00, with the key part of a record in records (indexPage).
	area, records string
	// within keeps the keys of area whose key part starts with it.
	within []byte
	// current, when set on a listing of the records themselves, is the key of the current record whose
	// history is listed: without it the listing is store.ErrNotFound (read in the page's snapshot).
	current string
	decode  func(area, raw []byte) (*T, error)
}

// list returns one page of l and the token of the next ("" after the last page).
func list[T any](ctx context.Context, s *Store, page store.Page, l listing[T]) ([]*T, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	after, err := codec.DecodePageToken(page, l.token, l.validKey)
	if err != nil {
		return nil, "", err
	}
	var raws [][]byte
	var next []byte
	area := l.area // the area the records are decoded from, naming a damaged one
	if l.records != "" {
		area = l.records
		raws, next, err = s.indexPage(ctx, l.area, string(l.within), after, page.Limit, func(k []byte) string {
			return s.key(l.records, k[bytes.IndexByte(k, 0)+1:])
		})
	} else {
		var guards []clientv3.Op
		if l.current != "" {
			guards = append(guards, clientv3.OpGet(l.current, clientv3.WithCountOnly()))
		}
		raws, next, err = s.rangePage(ctx, l.area, l.within, after, page.Limit, guards...)
	}
	if err != nil {
		return nil, "", s.result(ctx, l.op, err)
	}
	out, err := decodeAll(raws, area, l.decode)
	if err != nil {
		return nil, "", s.result(ctx, l.op, err)
	}
	return out, codec.EncodePageToken(l.token, next), nil
}

// listRevisions runs l, a listing of a history area (<key>|rev → record), over the revisions of id,
// whose current record is at key in area current and must exist: ListCredentialRevisions and
// ListServiceRevisions.
func listRevisions[T any](ctx context.Context, s *Store, id string, page store.Page, current string, key []byte, l listing[T]) ([]*T, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	if !codec.ValidKeyPart(id) {
		return nil, "", store.ErrNotFound
	}
	prefix := codec.RevPrefix(string(key))
	l.within, l.validKey = prefix, codec.ValidRevKeyOf(prefix)
	l.current = s.key(current, key)
	return list(ctx, s, page, l)
}

// rangePage reads one page of the keys of area that start with prefix, after the key part `after`
// (nil: from the start), limit items (0: all), in one snapshot with the guard operations (count-only
// gets of current records; the listing is store.ErrNotFound when one counts nothing). It returns the values
// and the key part of the last item when more follow. It asks etcd for limit+1 keys, never more.
func (s *Store) rangePage(ctx context.Context, area string, prefix, after []byte, limit int, guards ...clientv3.Op) ([][]byte, []byte, error) {
	base := s.prefix + area
	start, end := base+string(prefix), prefixEnd(base+string(prefix))
	if after != nil {
		start = base + string(after) + "\x00" // the first key after `after`
	}
	opts := []clientv3.OpOption{clientv3.WithRange(end)}
	if limit > 0 {
		opts = append(opts, clientv3.WithLimit(int64(limit)+1))
	}
	got, _, err := s.read(ctx, append(guards, clientv3.OpGet(start, opts...))...)
	if err != nil {
		return nil, nil, err
	}
	for _, g := range got[:len(guards)] {
		if g.Count == 0 {
			return nil, nil, store.ErrNotFound
		}
	}
	kvs := got[len(guards)].Kvs
	var next []byte
	if limit > 0 && len(kvs) > limit {
		kvs = kvs[:limit]
		next = kvs[limit-1].Key[len(base):]
	}
	out := make([][]byte, len(kvs))
	for i, kv := range kvs {
		out[i] = kv.Value
	}
	return out, next, nil
}

// indexPageAttempts bounds how often a page is read again because etcd compacted its snapshot away.
const indexPageAttempts = 3

// indexPage pages through an index area like rangePage and fetches the record each index key points
// to (recordKey), at the index read's revision so the page is one snapshot. When etcd compacts that
// revision before the records are read (ErrCompacted), the page is read again from a newer snapshot
// rather than failing the listing.
func (s *Store) indexPage(ctx context.Context, area, within string, after []byte, limit int, recordKey func(k []byte) string) ([][]byte, []byte, error) {
	for attempt := 1; ; attempt++ {
		out, next, err := s.indexPageAt(ctx, area, within, after, limit, recordKey)
		if errors.Is(err, rpctypes.ErrCompacted) && attempt < indexPageAttempts {
			continue
		}
		return out, next, err
	}
}

// within narrows the range to the index keys that start with it (a name prefix).
func (s *Store) indexPageAt(ctx context.Context, area, within string, after []byte, limit int, recordKey func(k []byte) string) ([][]byte, []byte, error) {
	base := s.prefix + area
	start, end := base+within, prefixEnd(base+within)
	if after != nil {
		start = base + string(after) + "\x00"
	}
	opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithKeysOnly()}
	if limit > 0 {
		opts = append(opts, clientv3.WithLimit(int64(limit)+1))
	}
	cctx, cancel := s.call(ctx)
	index, err := s.cli.Get(cctx, start, opts...)
	cancel()
	if err != nil {
		return nil, nil, err
	}
	if s.afterIndexRead != nil {
		s.afterIndexRead()
	}
	kvs := index.Kvs
	var next []byte
	if limit > 0 && len(kvs) > limit {
		kvs = kvs[:limit]
		next = kvs[limit-1].Key[len(base):]
	}
	out := make([][]byte, 0, len(kvs))
	for chunk := range slices.Chunk(kvs, etcdReadChunk) {
		ops := make([]clientv3.Op, len(chunk))
		for i, kv := range chunk {
			ops[i] = clientv3.OpGet(recordKey(kv.Key[len(base):]), clientv3.WithRev(index.Header.Revision))
		}
		got, _, err := s.read(ctx, ops...)
		if err != nil {
			return nil, nil, err
		}
		for i, g := range got {
			if len(g.Kvs) == 0 {
				return nil, nil, fmt.Errorf("index %s points to a missing record %q", area, ops[i].KeyBytes())
			}
			out = append(out, g.Kvs[0].Value)
		}
	}
	return out, next, nil
}

// decodeAll decodes every raw record into fresh memory.
func decodeAll[T any](raws [][]byte, area string, decode func(bucket, raw []byte) (*T, error)) ([]*T, error) {
	var out []*T
	for _, raw := range raws {
		rec, err := decode([]byte(area), raw)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, nil
}
