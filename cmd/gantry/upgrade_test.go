package main

import (
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/internal/stacktest"
	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/pkg/etcdtest"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/services/secrets/store/codec"
	"github.com/gantry-dev/gantry/services/secrets/store/etcdstore"
	"github.com/gantry-dev/gantry/services/secrets/store/storetest"
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

// TestCheckUpgradeEtcd: replicas of this build on a prefix of schema version 2 write JSON; gantry
// check -store etcd -upgrade moves the prefix to version 3 and rewrites the JSON records online,
// beside the running replicas, which read them the same before and after and write protobuf from
// their next probe.
func TestCheckUpgradeEtcd(t *testing.T) {
	cluster := etcdtest.New(t, 1, logtest.New(t))
	endpoints := strings.Join(cluster.Endpoints(), ",")
	cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints()})
	must(t, err)
	defer cli.Close()
	// The prefix as a version 2 build left it.
	_, err = cli.Put(context.Background(), "/cli-upgrade/secrets/meta/schema", "2")
	must(t, err)
	dir := filepath.Join(t.TempDir(), "data")
	cfg := stacktest.Config(t)
	cfg.Target = stack.RoleSecrets
	cfg.DataDir = dir
	cfg.Secrets.Store = "etcd"
	cfg.Etcd.Endpoints = cluster.Endpoints()
	cfg.Etcd.Prefix = "/cli-upgrade/"
	// The running replica's store says when it is at version 2 (once) and when it follows the move.
	var jsonNotices atomic.Int32
	protobuf := make(chan time.Time, 1)
	hook := zap.Hooks(func(e zapcore.Entry) error {
		switch {
		case strings.HasPrefix(e.Message, "the etcd store is at schema version 2"):
			jsonNotices.Add(1)
		case strings.HasPrefix(e.Message, "the etcd store's schema version changed: records are now written in protobuf"):
			select {
			case protobuf <- time.Now():
			default:
			}
		}
		return nil
	})
	ctx := t.Context()
	stacktest.Start(t, cfg, stacktest.Logger(logtest.New(t, hook)), stacktest.UncheckedStop())
	// A second replica of the same prefix writes records: in JSON, which version 2 replicas read.
	store, err := etcdstore.Open(ctx, cfg.Etcd, logtest.New(t))
	must(t, err)
	defer store.Close()
	rec := storetest.NewCred("c1", "db", 1)
	storetest.PutCred(t, store, rec, 0)
	storetest.PutService(t, store, storetest.NewService("svc", 1, "c1"), 0)
	format := func(key string) codec.Format {
		t.Helper()
		resp, err := cli.Get(ctx, "/cli-upgrade/secrets/"+key)
		must(t, err)
		if len(resp.Kvs) != 1 {
			t.Fatalf("no record %q", key)
		}
		return codec.Format(resp.Kvs[0].Value[0])
	}
	resp, err := cli.Get(ctx, "/cli-upgrade/secrets/meta/schema")
	must(t, err)
	if string(resp.Kvs[0].Value) != "2" {
		t.Fatalf("schema version with replicas of this build running = %s, want 2", resp.Kvs[0].Value)
	}
	for _, key := range []string{"cred/cur/c1", "svc/cur/svc\x00svc"} {
		if f := format(key); f != codec.FormatJSON {
			t.Errorf("%q written at version 2 in format %q, want JSON", key, f)
		}
	}
	storetest.CheckCred(t, store, "c1", 0, rec)

	code, out := check("-store", "etcd", "-upgrade", "-etcd-endpoints", endpoints, "-etcd-prefix", "/cli-upgrade/", "-data-dir", dir)
	checked := time.Now()
	t.Logf("gantry check -store etcd -upgrade:\n%s", out)
	if code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	// The running replica follows without a restart, at a store probe (each second), during the
	// 3 s the command waits after the move at the latest. The deadline only bounds a broken build.
	select {
	case at := <-protobuf:
		t.Logf("the running replica writes protobuf %v before the command returned", checked.Sub(at).Round(time.Millisecond))
	case <-time.After(time.Minute):
		t.Fatal("the running replica never logged its switch to protobuf")
	}
	if n := jsonNotices.Load(); n != 1 {
		t.Errorf("the running replica logged %d times that it writes JSON, want once", n)
	}
	for _, want := range []string{
		"upgrade schema         ok: moved from version 2 to 3",
		"upgrade cred/cur       ok: 1 records, 1 rewritten from JSON to protobuf",
		"upgrade cred/hist      ok: 1 records, 1 rewritten from JSON to protobuf",
		"upgrade svc/cur        ok: 1 records, 1 rewritten from JSON to protobuf",
		"upgrade grants         ok: 0 records, 0 rewritten",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if f := format("cred/cur/c1"); f != codec.FormatProto {
		t.Errorf("cred/cur/c1 after the upgrade in format %q, want protobuf", f)
	}
	storetest.CheckCred(t, store, "c1", 0, rec)
	// The replica writes protobuf from its next probe.
	must(t, store.Probe(ctx))
	storetest.PutCred(t, store, storetest.NewCred("c2", "new", 1), 0)
	if f := format("cred/cur/c2"); f != codec.FormatProto {
		t.Errorf("cred/cur/c2 written after the probe in format %q, want protobuf", f)
	}
	// The second run takes everything from the environment, as inside a secrets pod of the Helm
	// chart (docs/operations.md, Kubernetes: kubectl exec ... /gantry check -upgrade).
	t.Setenv("GANTRY_STORE", "etcd")
	t.Setenv("GANTRY_ETCD_ENDPOINTS", endpoints)
	t.Setenv("GANTRY_ETCD_PREFIX", "/cli-upgrade/")
	t.Setenv("GANTRY_DATA_DIR", dir)
	if code, out := check("-upgrade"); code != 0 || strings.Contains(out, "1 rewritten") ||
		!strings.Contains(out, "upgrade schema         ok: version 3 already") {
		t.Errorf("second run: exit %d, want 0 rewriting nothing:\n%s", code, out)
	}
}
