package etcdstore

import (
	"context"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/codec"
	"github.com/gantry-dev/gantry/services/secrets/store/storetest"
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
	storetest.RunStoredForms(t, func(t *testing.T) (store.Store, storetest.Raw) {
		s := newEtcdTestStore(t, nil)
		return s, etcdRaw{s}
	})
}

// TestEtcdUpgradeBesideAWriter: a replica writing a record between the upgrade's read and its
// rewrite keeps its write (the compare-and-set fails, the record is read again and is already
// current); the records nobody wrote are still rewritten.
func TestEtcdUpgradeBesideAWriter(t *testing.T) {
	ctx := context.Background()
	s := newEtcdTestStore(t, nil)
	rev1 := storetest.NewCred("c1", "db", 1)
	storetest.PutCred(t, s, rev1, 0)
	storetest.PutCred(t, s, storetest.NewCred("c2", "other", 1), 0)
	raw := etcdRaw{s}
	for _, r := range raw.Records(t) {
		js, err := codec.EncodeJSON(r.Kind, []byte(r.Area), r.Value)
		if err != nil {
			t.Fatal(err)
		}
		raw.Replace(t, r, js)
	}
	rev2 := storetest.NextCred(rev1)
	wrote := false
	s.afterUpgradeRead = func() {
		if !wrote {
			wrote = true
			storetest.PutCred(t, s, rev2, 1)
		}
	}
	up, err := s.UpgradeRecords(ctx)
	if err != nil {
		t.Fatalf("UpgradeRecords error = %v", err)
	}
	// cred/cur/: c1 was rewritten by the writer, c2 by the upgrade.
	if c := up[etcdCredCurrent]; c.Read != 2 || c.Rewritten != 1 {
		t.Errorf("cred/cur/ = %+v, want 2 read and 1 rewritten (c2: c1 was written meanwhile)", c)
	}
	storetest.CheckCred(t, s, "c1", 0, rev2)
	storetest.CheckCred(t, s, "c1", 1, rev1)
	for _, r := range raw.Records(t) {
		if f, err := codec.FormatOf([]byte(r.Area), r.Value); err != nil || f != codec.FormatProto {
			t.Errorf("%s%s: format %q, %v; want protobuf", r.Area, r.Key, f, err)
		}
	}
}
