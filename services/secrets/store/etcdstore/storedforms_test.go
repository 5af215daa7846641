package etcdstore

import (
	"context"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gantry-dev/gantry/services/secrets"
	"github.com/gantry-dev/gantry/services/secrets/store/codec"
	"github.com/gantry-dev/gantry/services/secrets/storetest"
)

// etcdRaw is storetest.Raw on the etcd keys themselves.
type etcdRaw struct{ s *Store }

func (r etcdRaw) Records(t *testing.T) []storetest.StoredRecord {
	t.Helper()
	var out []storetest.StoredRecord
	for _, area := range etcdRecordAreas {
		resp, err := r.s.cli.Get(context.Background(), r.s.prefix+area.area, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			key := strings.TrimPrefix(string(kv.Key), r.s.prefix+area.area)
			out = append(out, storetest.StoredRecord{Area: area.area, Key: []byte(key), Kind: area.kind, Value: kv.Value})
		}
	}
	return out
}

func (r etcdRaw) Replace(t *testing.T, rec storetest.StoredRecord, value []byte) {
	t.Helper()
	key := r.s.prefix + rec.Area + string(rec.Key)
	resp, err := r.s.cli.Txn(context.Background()).If(clientv3.Compare(clientv3.CreateRevision(key), ">", 0)).
		Then(clientv3.OpPut(key, string(value))).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Succeeded {
		t.Errorf("Replace: no record %q", key)
	}
}

func (r etcdRaw) Upgrade(ctx context.Context) (codec.Upgraded, error) { return r.s.UpgradeRecords(ctx) }

// TestStoredForms runs the stored-format part of the conformance suite on the etcd adapter: records
// in the JSON format of schema version 2 written straight into etcd.
func TestStoredForms(t *testing.T) {
	storetest.RunStoredForms(t, func(t *testing.T) (secrets.Store, storetest.Raw) {
		s := newEtcdTestStore(t, nil)
		return s, etcdRaw{s}
	})
}
