package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/pkg/etcdtest"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/services/secrets/store/codec"
	"github.com/gantry-dev/gantry/services/secrets/store/etcdstore"
	"github.com/gantry-dev/gantry/services/secrets/storetest"
)

// boltRecordBuckets are the record buckets of the bbolt layout (boltstore.go) with their kinds.
var boltRecordBuckets = map[string]codec.Kind{
	"cred_current": codec.KindCred, "cred_history": codec.KindCred,
	"svc_current": codec.KindService, "svc_history": codec.KindService,
	"archive_current": codec.KindArchived, "archive_history": codec.KindArchived,
	"grants": codec.KindGrants,
}

// boltToVersion2 turns the database of a stopped data folder into what gantry of schema version 2
// left: every record JSON, the version 2. It returns how many records it rewrote.
func boltToVersion2(t *testing.T, dir string) int {
	t.Helper()
	db, err := boltdb.Open(filepath.Join(dir, "secrets.db"), boltdb.Options{}, nil)
	must(t, err)
	defer db.Close()
	n := 0
	must(t, db.Update(func(tx *bolt.Tx) error {
		for name, kind := range boltRecordBuckets {
			b := tx.Bucket([]byte(name))
			var keys, values [][]byte
			err := b.ForEach(func(k, v []byte) error {
				js, err := codec.EncodeJSON(kind, []byte(name), v)
				keys, values = append(keys, boltdb.Copy(k)), append(values, js)
				return err
			})
			if err != nil {
				return err
			}
			for i, k := range keys {
				if err := b.Put(k, values[i]); err != nil {
					return err
				}
				n++
			}
		}
		return nil
	}))
	must(t, boltdb.WriteSchemaVersion(db, []byte("meta"), 2))
	return n
}

// TestCheckUpgrade: gantry check -upgrade on a stopped data folder of schema version 2 (every
// record JSON) rewrites every record and says so per bucket, the folder then passes the check at
// version 3 and the credential still decrypts; a second run rewrites nothing. Without -upgrade the
// check reads the version 2 folder and changes nothing.
func TestCheckUpgrade(t *testing.T) {
	dir, id := newDataDir(t)
	n := boltToVersion2(t, dir)
	if n == 0 {
		t.Fatal("the data folder holds no record")
	}
	if code, out := check("-data-dir", dir); code != 0 || !strings.Contains(out, "secrets.db schema      ok: version 2") || strings.Contains(out, "upgrade") {
		t.Fatalf("check without -upgrade: exit %d, want 0 at version 2 and no upgrade:\n%s", code, out)
	}
	code, out := check("-upgrade", "-data-dir", dir)
	if code != 0 {
		t.Fatalf("check -upgrade: exit %d, want 0:\n%s", code, out)
	}
	t.Logf("gantry check -upgrade:\n%s", out)
	for _, want := range []string{
		"upgrade cred_current   ok: 1 records, 1 rewritten from JSON to protobuf",
		"upgrade cred_history   ok: 1 records, 1 rewritten from JSON to protobuf",
		"secrets.db schema      ok: version 3",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if got := readPairs(t, dir, id); got["password"] != testPairs["password"] {
		t.Errorf("pairs after the upgrade = %v", got)
	}
	code, out = check("-upgrade", "-data-dir", dir)
	if code != 0 || strings.Contains(out, "1 rewritten") || !strings.Contains(out, "upgrade cred_current   ok: 1 records, 0 rewritten") {
		t.Errorf("second check -upgrade: exit %d, want 0 rewriting nothing:\n%s", code, out)
	}
}

// TestCheckUpgradeLockedOrMissing: -upgrade refuses a data folder a gantry holds, and one without a
// database (it never makes one).
func TestCheckUpgradeLockedOrMissing(t *testing.T) {
	dir, _ := newDataDir(t)
	_, closeSvc := openService(t, dir)
	code, out := check("-upgrade", "-data-dir", dir)
	closeSvc()
	if code != 1 || !strings.Contains(out, "upgrade                FAILED") || !strings.Contains(out, "stop it first") {
		t.Errorf("-upgrade of a folder in use: exit %d, want 1 saying to stop gantry:\n%s", code, out)
	}
	empty := t.TempDir()
	code, out = check("-upgrade", "-data-dir", empty)
	if code != 1 || !strings.Contains(out, "no database at") {
		t.Errorf("-upgrade of a folder without a database: exit %d, want 1:\n%s", code, out)
	}
	if matches, _ := filepath.Glob(filepath.Join(empty, "*")); len(matches) != 0 {
		t.Errorf("-upgrade created %v", matches)
	}
}

// TestCheckUpgradeEtcd: gantry check -store etcd -upgrade rewrites the JSON records of a prefix
// online, beside the running replica that serves it, which reads them the same before and after.
func TestCheckUpgradeEtcd(t *testing.T) {
	cluster := etcdtest.New(t, 1, logtest.New(t))
	endpoints := strings.Join(cluster.Endpoints(), ",")
	dir := filepath.Join(t.TempDir(), "data")
	cfg := stack.DefaultConfig()
	cfg.Target = stack.RoleSecrets
	cfg.DataDir = dir
	cfg.Secrets.Listen = "127.0.0.1:0"
	cfg.Secrets.Store = "etcd"
	cfg.Secrets.Etcd.Endpoints = cluster.Endpoints()
	cfg.Secrets.Etcd.Prefix = "/cli-upgrade/"
	ctx, cancel := context.WithCancel(context.Background())
	st, err := stack.Start(ctx, cfg, logtest.New(t))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = st.Wait()
	})
	// A second replica of the same prefix writes records, which are then turned into JSON.
	store, err := etcdstore.Open(ctx, cfg.Secrets.Etcd, logtest.New(t))
	must(t, err)
	defer store.Close()
	rec := storetest.NewCred("c1", "db", 1)
	storetest.PutCred(t, store, rec, 0)
	storetest.PutService(t, store, storetest.NewService("svc", 1, "c1"), 0)
	cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints()})
	must(t, err)
	defer cli.Close()
	for area, kind := range map[string]codec.Kind{"cred/cur/": codec.KindCred, "cred/hist/": codec.KindCred, "svc/cur/": codec.KindService, "svc/hist/": codec.KindService} {
		resp, err := cli.Get(ctx, "/cli-upgrade/secrets/"+area, clientv3.WithPrefix())
		must(t, err)
		for _, kv := range resp.Kvs {
			js, err := codec.EncodeJSON(kind, []byte(area), kv.Value)
			must(t, err)
			_, err = cli.Put(ctx, string(kv.Key), string(js))
			must(t, err)
		}
	}
	storetest.CheckCred(t, store, "c1", 0, rec)

	code, out := check("-store", "etcd", "-upgrade", "-etcd-endpoints", endpoints, "-etcd-prefix", "/cli-upgrade/", "-data-dir", dir)
	t.Logf("gantry check -store etcd -upgrade:\n%s", out)
	if code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	for _, want := range []string{
		"upgrade cred/cur       ok: 1 records, 1 rewritten from JSON to protobuf",
		"upgrade cred/hist      ok: 1 records, 1 rewritten from JSON to protobuf",
		"upgrade svc/cur        ok: 1 records, 1 rewritten from JSON to protobuf",
		"upgrade grants         ok: 0 records, 0 rewritten",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	resp, err := cli.Get(ctx, "/cli-upgrade/secrets/cred/cur/c1")
	must(t, err)
	if len(resp.Kvs) != 1 || resp.Kvs[0].Value[0] != byte(codec.FormatProto) {
		t.Errorf("cred/cur/c1 after the upgrade = %q, want the protobuf format", resp.Kvs)
	}
	storetest.CheckCred(t, store, "c1", 0, rec)
	if code, out := check("-store", "etcd", "-upgrade", "-etcd-endpoints", endpoints, "-etcd-prefix", "/cli-upgrade/", "-data-dir", dir); code != 0 || strings.Contains(out, "1 rewritten") {
		t.Errorf("second run: exit %d, want 0 rewriting nothing:\n%s", code, out)
	}
}
