package boltstore

import (
	"bytes"
	"context"

	bolt "go.etcd.io/bbolt"

	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/services/secrets/store/codec"
)

// boltRecordBuckets are the buckets that hold records, with the kind of their records: what
// UpgradeRecords reads. The other buckets hold index keys and ids, which have no format, or records
// that have no older format to upgrade from (change_requests: always codec.FormatProto).
var boltRecordBuckets = []struct {
	bucket []byte
	kind   codec.Kind
}{
	{boltCredCurrent, codec.KindCred},
	{boltCredHistory, codec.KindCred},
	{boltSvcCurrent, codec.KindService},
	{boltSvcHistory, codec.KindService},
	{boltArchiveCurrent, codec.KindArchived},
	{boltArchiveHistory, codec.KindArchived},
	{boltGrants, codec.KindGrants},
}

// upgradeChunk is how many records one transaction of UpgradeRecords reads: a large store is
// rewritten in many short transactions rather than one that holds the whole file's dirty pages.
const upgradeChunk = 1000

// UpgradeRecords rewrites every record still in the JSON format of schema version 2 (codec.FormatJSON)
// in the current one, bucket by bucket, in transactions of upgradeChunk records, and returns what it
// read and rewrote per bucket. Records already current are left alone, so a second run rewrites
// nothing, and an interrupted run is finished by the next. The records' meaning does not change: the
// indexes stay as they are. gantry check -upgrade runs it on a stopped data folder (Open, not
// OpenReadOnly).
func (s *Store) UpgradeRecords(ctx context.Context) (codec.Upgraded, error) {
	out := codec.Upgraded{}
	for _, area := range boltRecordBuckets {
		var count codec.UpgradeCount
		var after []byte
		for {
			if err := ctx.Err(); err != nil {
				return out, err
			}
			var read, rewritten int
			var last []byte
			// batch may run fn more than once: it starts from the same state each time.
			err := s.batch(func(tx *bolt.Tx) error {
				read, rewritten, last = 0, 0, nil
				b := tx.Bucket(area.bucket)
				type rewrite struct{ key, value []byte }
				var todo []rewrite
				c := b.Cursor()
				k, v := c.First()
				if after != nil {
					if k, v = c.Seek(after); bytes.Equal(k, after) {
						k, v = c.Next()
					}
				}
				for ; k != nil && read < upgradeChunk; k, v = c.Next() {
					read++
					last = boltdb.Copy(k)
					data, err := codec.Upgrade(area.kind, area.bucket, v)
					if err != nil {
						return err
					}
					if data != nil {
						todo = append(todo, rewrite{last, data})
					}
				}
				// Written once the cursor is done: a Put moves a bbolt cursor.
				for _, r := range todo {
					if err := b.Put(r.key, r.value); err != nil {
						return err
					}
				}
				rewritten = len(todo)
				return nil
			})
			if err != nil {
				return out, s.result("UpgradeRecords", err)
			}
			count.Read += read
			count.Rewritten += rewritten
			if read < upgradeChunk {
				break
			}
			after = last
		}
		out[string(area.bucket)] = count
	}
	return out, nil
}
