package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/etcdtest"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/codec"
	"github.com/gantry-dev/gantry/services/secrets/store/storetest"
)

// One embedded etcd member serves every test of the package (it takes about a second to start);
// each store gets its own key prefix, so each is empty.
var (
	etcdOnce    sync.Once
	etcdCluster *etcdtest.Cluster
	etcdDir     string
	etcdErr     error
	etcdSeq     atomic.Int64
)

func TestMain(m *testing.M) {
	code := m.Run()
	if etcdCluster != nil {
		etcdCluster.Close()
	}
	if etcdDir != "" {
		_ = os.RemoveAll(etcdDir)
	}
	os.Exit(code)
}

// testEtcdEndpoints returns the client URLs of the package's shared etcd member, starting it first.
func testEtcdEndpoints(t testing.TB) []string {
	t.Helper()
	etcdOnce.Do(func() {
		if etcdDir, etcdErr = os.MkdirTemp("", "gantry-etcd-"); etcdErr != nil {
			return
		}
		etcdCluster, etcdErr = etcdtest.Start(etcdDir, 1, zap.NewNop())
	})
	if etcdErr != nil {
		t.Fatalf("embedded etcd: %v", etcdErr)
	}
	return etcdCluster.Endpoints()
}

// newEtcdTestStore opens a store on a fresh prefix of the shared etcd member, closed at cleanup.
func newEtcdTestStore(t testing.TB, mutate func(*Options)) *Store {
	t.Helper()
	opts := DefaultOptions()
	opts.Endpoints = testEtcdEndpoints(t)
	opts.Prefix = fmt.Sprintf("/test/%d/", etcdSeq.Add(1))
	if mutate != nil {
		mutate(&opts)
	}
	s, err := Open(context.Background(), opts, logtest.New(t))
	if err != nil {
		t.Fatalf("Open() error = %v", err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			etcdCheckIndexes(t, s)
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close() error = %v", err)
		}
	})
	return s
}

// etcdCheckIndexes fails t unless every index agrees with the current and history records: nothing
// missing, nothing left over (each conformance subtest thus also proves the indexes were maintained).
func etcdCheckIndexes(t testing.TB, s *Store) {
	t.Helper()
	resp, err := s.cli.Get(context.Background(), s.prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	areas := map[string]map[string]string{}
	for _, kv := range resp.Kvs {
		rel := string(kv.Key[len(s.prefix):])
		area := rel[:strings.Index(rel, "/")+1]
		if rest := rel[len(area):]; area == "cred/" || area == "svc/" {
			sub := rest[:strings.Index(rest, "/")+1]
			area, rest = area+sub, rest[len(sub):]
			if areas[area] == nil {
				areas[area] = map[string]string{}
			}
			areas[area][rest] = string(kv.Value)
		}
	}
	want := map[string]map[string]string{}
	add := func(area, k, v string) {
		if want[area] == nil {
			want[area] = map[string]string{}
		}
		want[area][k] = v
	}
	for id, raw := range areas[etcdCredCurrent] {
		rec, err := codec.DecodeCred(nil, []byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		add(etcdCredByName, string(codec.NameKey(rec.Name, id)), "")
		add(etcdCredName, rec.Name, id)
		if h := areas[etcdCredHistory][string(codec.RevKey(id, rec.Revision))]; h != raw {
			t.Errorf("current record of %s differs from its history revision %d", id, rec.Revision)
		}
	}
	for k, raw := range areas[etcdCredHistory] {
		rec, err := codec.DecodeCred(nil, []byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		if _, live := areas[etcdCredCurrent][rec.ID]; live {
			add(etcdCredHistName, string(codec.RevNameKey(rec.Name, rec.ID, rec.Revision)), "")
		} else if _, archived := areas[etcdCredArchive][rec.ID]; !archived {
			t.Errorf("history record %q belongs to no current or archived credential", k)
		}
	}
	for _, raw := range areas[etcdSvcCurrent] {
		rec, err := codec.DecodeService(nil, []byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		for _, cred := range rec.Credentials {
			add(etcdCredServices, string(codec.LinkKey(cred, rec.ID)), "")
		}
	}
	// Change requests: each under its own id, at version 1 or later.
	for _, kv := range resp.Kvs {
		id, ok := strings.CutPrefix(string(kv.Key), s.prefix+etcdChangeReqs)
		if !ok {
			continue
		}
		rec, err := codec.DecodeChangeRequest([]byte(etcdChangeReqs), kv.Value)
		if err != nil {
			t.Fatal(err)
		}
		if rec.ID != id || rec.Version < 1 {
			t.Errorf("changes/ key %q holds request %q version %d", id, rec.ID, rec.Version)
		}
	}
	for _, area := range []string{etcdCredByName, etcdCredName, etcdCredHistName, etcdCredServices} {
		got := areas[area]
		for k, v := range want[area] {
			if g, ok := got[k]; !ok {
				t.Errorf("%s: missing key %q", area, k)
			} else if g != v {
				t.Errorf("%s: key %q = %q, want %q", area, k, g, v)
			}
		}
		for k := range got {
			if _, ok := want[area][k]; !ok {
				t.Errorf("%s: stray key %q", area, k)
			}
		}
	}
}

func TestEtcdStoreTooLarge(t *testing.T) {
	ctx := context.Background()
	s := newEtcdTestStore(t, nil)
	big := storetest.NewCred("c1", "c1", 1)
	big.SealedPairs = make([]byte, 1<<20) // twice (history and current record), base64: > 1.5 MiB
	if err := s.PutCredential(ctx, big, 0); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("PutCredential(1 MiB) error = %v, want store.ErrTooLarge", err)
	}
	if _, err := s.GetCredential(ctx, "c1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetCredential after the refused write: error = %v, want store.ErrNotFound", err)
	}

	// A change request carries sealed pairs too: a create and an update too large are refused, and
	// the stored version stays.
	bigChange := storetest.NewChangeRequest("r1", 1)
	bigChange.SealedPairs = make([]byte, 2<<20)
	if err := s.PutChangeRequest(ctx, bigChange, 0); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("PutChangeRequest(2 MiB) error = %v, want store.ErrTooLarge", err)
	}
	if _, err := s.GetChangeRequest(ctx, "r1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetChangeRequest after the refused write: error = %v, want store.ErrNotFound", err)
	}
	small := storetest.NewChangeRequest("r1", 1)
	storetest.PutChange(t, s, small, 0)
	bigNext := storetest.NextChangeRequest(small)
	bigNext.Change = make([]byte, 2<<20)
	if err := s.PutChangeRequest(ctx, bigNext, 1); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("PutChangeRequest(version 2 of 2 MiB) error = %v, want store.ErrTooLarge", err)
	}
	storetest.CheckChange(t, s, "r1", small)

	// etcd's own limit is the backstop when the configured one is set above the server's.
	loose := newEtcdTestStore(t, func(o *Options) { o.MaxRequestBytes = 8 << 20 })
	if err := loose.PutCredential(ctx, big, 0); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("PutCredential(1 MiB) above the server's limit: error = %v, want store.ErrTooLarge", err)
	}
	if err := loose.PutChangeRequest(ctx, bigChange, 0); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("PutChangeRequest(2 MiB) above the server's limit: error = %v, want store.ErrTooLarge", err)
	}

	svc := storetest.NewService("svc", 1)
	for i := range 200 {
		id := fmt.Sprintf("c-%03d", i)
		svc.Credentials = append(svc.Credentials, id)
		storetest.PutCred(t, s, storetest.NewCred(id, id, 1), 0)
	}
	if err := s.PutService(ctx, svc, 0); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("PutService(200 credentials) error = %v, want store.ErrTooLarge", err)
	}
}

func TestEtcdStoreUnavailable(t *testing.T) {
	c := etcdtest.New(t, 1, zap.NewNop())
	opts := DefaultOptions()
	opts.Endpoints = c.Endpoints()
	opts.RequestTimeout = 500 * time.Millisecond
	s, err := Open(context.Background(), opts, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.PutCred(t, s, storetest.NewCred("c1", "c1", 1), 0)
	storetest.PutChange(t, s, storetest.NewChangeRequest("r1", 1), 0)
	c.Close()
	if _, err := s.GetCredential(context.Background(), "c1"); !errors.Is(err, store.ErrStorage) {
		t.Errorf("GetCredential with etcd down: error = %v, want store.ErrStorage", err)
	}
	if _, err := s.GetChangeRequest(context.Background(), "r1"); !errors.Is(err, store.ErrStorage) {
		t.Errorf("GetChangeRequest with etcd down: error = %v, want store.ErrStorage", err)
	}
	if err := s.PutChangeRequest(context.Background(), storetest.NextChangeRequest(storetest.NewChangeRequest("r1", 1)), 1); !errors.Is(err, store.ErrStorage) {
		t.Errorf("PutChangeRequest with etcd down: error = %v, want store.ErrStorage", err)
	}
	if _, _, err := s.ListChangeRequests(context.Background(), store.Page{}); !errors.Is(err, store.ErrStorage) {
		t.Errorf("ListChangeRequests with etcd down: error = %v, want store.ErrStorage", err)
	}
	if err := s.Probe(context.Background()); !errors.Is(err, store.ErrStorage) {
		t.Errorf("Probe with etcd down: error = %v, want store.ErrStorage", err)
	}
}

func TestEtcdStoreSchemaVersion(t *testing.T) {
	s := newEtcdTestStore(t, nil)
	if _, err := s.cli.Put(context.Background(), s.prefix+etcdSchemaKey, "99"); err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.Endpoints = testEtcdEndpoints(t)
	opts.Prefix = strings.TrimSuffix(s.prefix, "secrets/")
	if other, err := Open(context.Background(), opts, logtest.New(t)); err == nil {
		_ = other.Close()
		t.Fatal("Open on schema version 99: error = nil")
	} else if !strings.Contains(err.Error(), "schema version 99") {
		t.Errorf("error = %v, want it to name the schema version", err)
	}
}

// TestEtcdStoreUpgradesSchema: a prefix written by version 1 (no grants/, JSON records) is moved to
// version 2 when a replica of this build opens it, one of version 2 stays at 2 (replicas of a
// version 2 build may still share it); its records read as before, and the replica writes JSON until
// UpgradeRecords moves the prefix to 3.
func TestEtcdStoreUpgradesSchema(t *testing.T) {
	for _, version := range []string{"1", "2"} {
		t.Run("version "+version, func(t *testing.T) {
			s := newEtcdTestStore(t, nil)
			ctx := context.Background()
			want := storetest.NewService("api", 1)
			storetest.PutService(t, s, want, 0)
			raw := etcdRaw{s}
			for _, r := range raw.Records(t) {
				js, err := codec.EncodeJSON(r.Kind, []byte(r.Area), r.Value)
				if err != nil {
					t.Fatal(err)
				}
				raw.Replace(t, r, js)
			}
			if _, err := s.cli.Put(ctx, s.prefix+etcdSchemaKey, version); err != nil {
				t.Fatal(err)
			}
			opts := DefaultOptions()
			opts.Endpoints = testEtcdEndpoints(t)
			opts.Prefix = strings.TrimSuffix(s.prefix, "secrets/")
			other, err := Open(ctx, opts, logtest.New(t))
			if err != nil {
				t.Fatalf("Open on schema version %s: %v", version, err)
			}
			defer other.Close()
			if v := schemaOf(t, s); v != etcdSchemaJSON {
				t.Errorf("schema version after Open = %s, want %s", v, etcdSchemaJSON)
			}
			storetest.CheckService(t, other, "api", 0, want)
			grantsFormat := func() codec.Format {
				t.Helper()
				if err := other.PutGrants(ctx, "api", store.GrantsRecord{Encrypt: true, Decrypt: true}); err != nil {
					t.Fatalf("PutGrants: %v", err)
				}
				got, err := s.cli.Get(ctx, s.prefix+etcdGrants+"api")
				if err != nil {
					t.Fatal(err)
				}
				return codec.Format(got.Kvs[0].Value[0])
			}
			if f := grantsFormat(); f != codec.FormatJSON {
				t.Errorf("grants written at version 2 in format %q, want JSON", f)
			}
			other.schemaSettle = 0
			if _, err := other.UpgradeRecords(ctx); err != nil {
				t.Fatalf("UpgradeRecords: %v", err)
			}
			if v := schemaOf(t, s); v != etcdSchemaVersion {
				t.Errorf("schema version after UpgradeRecords = %s, want %s", v, etcdSchemaVersion)
			}
			storetest.CheckService(t, other, "api", 0, want)
			if f := grantsFormat(); f != codec.FormatProto {
				t.Errorf("grants written after UpgradeRecords in format %q, want protobuf", f)
			}
		})
	}
}

// A listing survives etcd compacting its snapshot between the index read and the record reads: the
// page is read again from a newer revision instead of answering a storage failure.
func TestEtcdStoreListingSurvivesCompaction(t *testing.T) {
	ctx := context.Background()
	s := newEtcdTestStore(t, nil)
	for i := range 3 {
		id := fmt.Sprintf("c%d", i)
		storetest.PutCred(t, s, storetest.NewCred(id, id, 1), 0)
	}
	compactions := 0
	s.afterIndexRead = func() {
		if compactions > 0 {
			return
		}
		compactions++
		// A write moves the revision on; compacting up to it removes the index read's revision.
		storetest.PutCred(t, s, storetest.NewCred("c0", "c0", 2), 1)
		resp, err := s.cli.Get(ctx, "compaction-probe")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.cli.Compact(ctx, resp.Header.Revision); err != nil {
			t.Fatal(err)
		}
	}
	recs, _, err := s.ListCredentials(ctx, store.Page{Limit: 10})
	if err != nil {
		t.Fatalf("ListCredentials across a compaction: %v", err)
	}
	if compactions != 1 || len(recs) != 3 {
		t.Fatalf("got %d records after %d compactions, want 3 after 1", len(recs), compactions)
	}
	for _, r := range recs {
		if r.ID == "c0" && r.Revision != 2 {
			t.Errorf("c0 at revision %d, want the newer snapshot's 2", r.Revision)
		}
	}
}

// TestEtcdStoreQuorumLostFailsFast: with two of three members stopped (quorum lost), reads, writes
// and the health probe fail with store.ErrStorage (503) at once, well within the request timeout,
// once the member probe has seen the cluster without a leader; on main each waited the whole request
// timeout (5 s by default), and reads through the gateway ran into its per-try timeouts (504). With
// one member restarted (quorum back) the store serves reads and writes again.
func TestEtcdStoreQuorumLostFailsFast(t *testing.T) {
	c := etcdtest.New(t, 3, zap.NewNop())
	opts := DefaultOptions()
	opts.Endpoints = c.Endpoints()
	opts.ProbeInterval = 100 * time.Millisecond
	opts.ProbeTimeout = 500 * time.Millisecond
	const requestTimeout = 5 * time.Second
	opts.RequestTimeout = requestTimeout
	s, err := Open(context.Background(), opts, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.PutCred(t, s, storetest.NewCred("c1", "c1", 1), 0)
	c.Member(1).Stop()
	c.Member(2).Stop()

	// The member left notices the lost quorum after an election timeout, the probe after that; then
	// every call fails fast. A call that still waits is the failure this test is about.
	fast := requestTimeout / 5
	calls := map[string]func(context.Context) error{
		"GetCredential": func(ctx context.Context) error { _, err := s.GetCredential(ctx, "c1"); return err },
		"PutCredential": func(ctx context.Context) error { return s.PutCredential(ctx, storetest.NewCred("c1", "c1", 2), 1) },
		"ListCredentials": func(ctx context.Context) error {
			_, _, err := s.ListCredentials(ctx, store.Page{Limit: 10})
			return err
		},
		"KeyCheck": func(ctx context.Context) error { _, err := s.KeyCheck(ctx); return err },
		"RewrapCredential": func(ctx context.Context) error {
			return s.RewrapCredential(ctx, "c1", 1, []byte("wrapped-c1"), []byte("rewrapped"))
		},
		"ReplaceKeyCheck": func(ctx context.Context) error { return s.ReplaceKeyCheck(ctx, []byte("a"), []byte("b")) },
		"Probe":           s.Probe,
	}
	deadline := time.Now().Add(30 * time.Second)
	for streak := 0; streak < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("30 s after losing quorum calls still wait for the request timeout (%v)", requestTimeout)
		}
		streak++
		for name, call := range calls {
			start := time.Now()
			err := call(context.Background())
			took := time.Since(start)
			if !errors.Is(err, store.ErrStorage) || took > fast {
				t.Logf("%s without quorum: %v after %v", name, err, took)
				streak = 0
			}
		}
	}

	// With a second member back the cluster elects a leader, the probe sees it, and the store serves
	// again: reads and writes succeed.
	if err := c.Member(1).Restart(); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		_, err := s.GetCredential(context.Background(), "c1")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the quorum came back the store still fails: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	storetest.PutCred(t, s, storetest.NewCred("c1", "c1", 2), 1)
}

// TestLeaderlessAfter: a minority of members answering without a leader is a lost quorum at the first
// probe; a majority without a leader is an election, which requests wait out, unless it lasts five
// probes; no member answering counts after three.
func TestLeaderlessAfter(t *testing.T) {
	for _, tc := range []struct{ answering, configured, want int }{
		{1, 3, 1}, {2, 5, 1}, {1, 2, 1},
		{2, 3, 5}, {3, 3, 5}, {1, 1, 5}, {3, 5, 5},
		{0, 3, 3}, {0, 1, 3},
	} {
		if got := leaderlessAfter(tc.answering, tc.configured); got != tc.want {
			t.Errorf("leaderlessAfter(%d answering of %d) = %d, want %d", tc.answering, tc.configured, got, tc.want)
		}
	}
}
