package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/codec"
)

// etcdRecordAreas are the key areas that hold records, with the kind of their records: what
// UpgradeRecords reads. The other areas hold index keys and ids, which have no format, or records
// that have no older format to upgrade from (changes/: always codec.FormatProto).
var etcdRecordAreas = []struct {
	area string
	kind codec.Kind
}{
	{etcdCredCurrent, codec.KindCred},
	{etcdCredHistory, codec.KindCred},
	{etcdSvcCurrent, codec.KindService},
	{etcdSvcHistory, codec.KindService},
	{etcdCredArchive, codec.KindArchived},
	{etcdGrants, codec.KindGrants},
}

// etcdUpgradeChunk is how many records UpgradeRecords reads in one range request, and at most
// rewrites in one transaction (below etcd's default --max-txn-ops of 128).
const etcdUpgradeChunk = 50

// etcdSchemaSettle is how long UpgradeRecords waits after moving the prefix to schema version 3
// before it reads the records: three default -store-probe-interval, so that every running replica
// has read the new version (Probe) and writes protobuf before the pass goes by its records.
const etcdSchemaSettle = 3 * time.Second

// UpgradeRecords moves the prefix to schema version 3 (phase 2 of etcdSchemaVersion: run it once
// every replica runs this build, as replicas of older builds then refuse to start), then rewrites
// every record still in the JSON format of schema version 2 (codec.FormatJSON) in the current one,
// area by area, and returns what it read and rewrote per area.
//
// It is safe while replicas serve the same prefix: each rewrite is a compare-and-set on the mod
// revision the record was read at, so a record a replica wrote meanwhile is never overwritten; it
// is read again instead. A replica that has not yet seen the move writes JSON: such a record is
// still read by every replica, and rewritten by its next write or the next run. Records already
// current are left alone: a second run rewrites nothing.
func (s *Store) UpgradeRecords(ctx context.Context) (codec.Upgraded, error) {
	out := codec.Upgraded{}
	if _, err := s.UpgradeSchema(ctx); err != nil {
		return out, err
	}
	for _, a := range etcdRecordAreas {
		count, err := s.upgradeArea(ctx, a.area, a.kind)
		out[a.area] = count
		if err != nil {
			return out, s.result(ctx, "UpgradeRecords", fmt.Errorf("%s: %w", a.area, err))
		}
	}
	return out, nil
}

func (s *Store) upgradeArea(ctx context.Context, area string, kind codec.Kind) (codec.UpgradeCount, error) {
	var count codec.UpgradeCount
	base := s.prefix + area
	start, end := base, prefixEnd(base)
	for {
		if err := ctx.Err(); err != nil {
			return count, err
		}
		got, _, err := s.read(ctx, clientv3.OpGet(start, clientv3.WithRange(end), clientv3.WithLimit(etcdUpgradeChunk)))
		if err != nil {
			return count, err
		}
		kvs := got[0].Kvs
		var cmps []clientv3.Cmp
		var puts []clientv3.Op
		for _, kv := range kvs {
			count.Read++
			data, err := codec.Upgrade(kind, []byte(area), kv.Value)
			if err != nil {
				return count, err
			}
			if data != nil {
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision))
				puts = append(puts, clientv3.OpPut(string(kv.Key), string(data)))
			}
		}
		if s.afterUpgradeRead != nil {
			s.afterUpgradeRead()
		}
		if len(puts) > 0 {
			resp, err := s.txn(ctx, cmps, puts...)
			switch {
			case err == nil && resp.Succeeded:
				count.Rewritten += len(puts)
			case err == nil, errors.Is(err, store.ErrTooLarge), errors.Is(err, rpctypes.ErrRequestTooLarge), errors.Is(err, rpctypes.ErrTooManyOps):
				// A record changed since the read, or the chunk's records are too large for one
				// transaction: rewrite them one by one.
				for _, p := range puts {
					n, err := s.upgradeKey(ctx, string(p.KeyBytes()), area, kind)
					if err != nil {
						return count, err
					}
					count.Rewritten += n
				}
			default:
				return count, err
			}
		}
		if len(kvs) < etcdUpgradeChunk {
			return count, nil
		}
		start = string(kvs[len(kvs)-1].Key) + "\x00" // the first key after the last one read
	}
}

// upgradeKey rewrites the record at key if it is still in the JSON format, with a compare-and-set
// retried as a replica's writes go on; it returns 1 when it rewrote it, 0 when the record was gone or
// already current.
func (s *Store) upgradeKey(ctx context.Context, key, area string, kind codec.Kind) (int, error) {
	for range etcdWriteAttempts {
		got, _, err := s.read(ctx, clientv3.OpGet(key))
		if err != nil {
			return 0, err
		}
		if len(got[0].Kvs) == 0 {
			return 0, nil
		}
		kv := got[0].Kvs[0]
		data, err := codec.Upgrade(kind, []byte(area), kv.Value)
		if err != nil || data == nil {
			return 0, err
		}
		resp, err := s.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)}, clientv3.OpPut(key, string(data)))
		if err != nil {
			return 0, err
		}
		if resp.Succeeded {
			return 1, nil
		}
	}
	return 0, fmt.Errorf("record %q kept changing during %d attempts to rewrite it", key, etcdWriteAttempts)
}

// UpgradeSchema moves the prefix from schema version 2 to 3 (phase 2 of etcdSchemaVersion) with a
// compare-and-set on the version key (of two runs at once one moves it, the other finds 3), and
// writes protobuf from then on itself. When it moved it, it then waits schemaSettle (or until ctx
// ends), so that running replicas follow before records are rewritten. It reports whether this call
// moved the prefix; UpgradeRecords calls it first.
func (s *Store) UpgradeSchema(ctx context.Context) (moved bool, err error) {
	key := s.prefix + etcdSchemaKey
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Txn(cctx).If(clientv3.Compare(clientv3.Value(key), "=", etcdSchemaJSON)).
		Then(clientv3.OpPut(key, etcdSchemaVersion)).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return false, s.result(ctx, "UpgradeSchema", fmt.Errorf("move the schema version to %s: %w", etcdSchemaVersion, err))
	}
	if !resp.Succeeded {
		got := resp.Responses[0].GetResponseRange()
		if len(got.Kvs) == 0 {
			return false, s.result(ctx, "UpgradeSchema", fmt.Errorf("prefix %q: schema version deleted", s.prefix))
		}
		if v := string(got.Kvs[0].Value); v != etcdSchemaVersion {
			return false, s.result(ctx, "UpgradeSchema", fmt.Errorf("prefix %q: schema version %s, want %s or %s", s.prefix, v, etcdSchemaJSON, etcdSchemaVersion))
		}
	}
	s.followSchema([]byte(etcdSchemaVersion))
	if !resp.Succeeded {
		return false, nil
	}
	s.logger.Info("moved the etcd store's schema: replicas write protobuf from their next probe",
		zap.String("prefix", s.prefix), zap.String("from", etcdSchemaJSON), zap.String("to", etcdSchemaVersion))
	if s.schemaSettle > 0 {
		t := time.NewTimer(s.schemaSettle)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-t.C:
		}
	}
	return true, nil
}
