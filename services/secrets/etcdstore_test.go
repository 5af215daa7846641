package secrets

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
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/etcdtest"
	"github.com/gantry-dev/gantry/pkg/rpcerr"
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
func newEtcdTestStore(t testing.TB, mutate func(*EtcdOptions)) *EtcdStore {
	t.Helper()
	opts := DefaultEtcdOptions()
	opts.Endpoints = testEtcdEndpoints(t)
	opts.Prefix = fmt.Sprintf("/test/%d/", etcdSeq.Add(1))
	if mutate != nil {
		mutate(&opts)
	}
	s, err := OpenEtcdStore(context.Background(), opts, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("OpenEtcdStore() error = %v", err)
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
func etcdCheckIndexes(t testing.TB, s *EtcdStore) {
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
		rec, err := decodeCred(nil, []byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		add(etcdCredByName, string(nameKey(rec.Name, id)), "")
		add(etcdCredName, rec.Name, id)
		if h := areas[etcdCredHistory][string(revKey(id, rec.Revision))]; h != raw {
			t.Errorf("current record of %s differs from its history revision %d", id, rec.Revision)
		}
	}
	for k, raw := range areas[etcdCredHistory] {
		rec, err := decodeCred(nil, []byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		if _, live := areas[etcdCredCurrent][rec.ID]; live {
			add(etcdCredHistName, string(revNameKey(rec.Name, rec.ID, rec.Revision)), "")
		} else if _, archived := areas[etcdCredArchive][rec.ID]; !archived {
			t.Errorf("history record %q belongs to no current or archived credential", k)
		}
	}
	for _, raw := range areas[etcdSvcCurrent] {
		rec, err := decodeService(nil, []byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		for _, cred := range rec.Credentials {
			add(etcdCredServices, string(linkKey(cred, rec.ID)), "")
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
	big := confCred("c1", "c1", 1)
	big.SealedPairs = make([]byte, 1<<20) // twice (history and current record), base64: > 1.5 MiB
	if err := s.PutCredential(ctx, big, 0); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("PutCredential(1 MiB) error = %v, want ErrTooLarge", err)
	}
	if _, err := s.GetCredential(ctx, "c1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetCredential after the refused write: error = %v, want ErrNotFound", err)
	}
	if st := toStatus(zap.NewNop(), fmt.Errorf("wrapped: %w", ErrTooLarge)); !strings.Contains(st.Error(), "InvalidArgument") {
		t.Errorf("toStatus(ErrTooLarge) = %v, want InvalidArgument", st)
	}

	// etcd's own limit is the backstop when the configured one is set above the server's.
	loose := newEtcdTestStore(t, func(o *EtcdOptions) { o.MaxRequestBytes = 8 << 20 })
	if err := loose.PutCredential(ctx, big, 0); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("PutCredential(1 MiB) above the server's limit: error = %v, want ErrTooLarge", err)
	}

	svc := confService("svc", 1)
	for i := range 200 {
		id := fmt.Sprintf("c-%03d", i)
		svc.Credentials = append(svc.Credentials, id)
		confPutCred(t, s, confCred(id, id, 1), 0)
	}
	if err := s.PutService(ctx, svc, 0); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("PutService(200 credentials) error = %v, want ErrTooLarge", err)
	}
}

func TestEtcdStoreUnavailable(t *testing.T) {
	c := etcdtest.New(t, 1, zap.NewNop())
	opts := DefaultEtcdOptions()
	opts.Endpoints = c.Endpoints()
	opts.RequestTimeout = 500 * time.Millisecond
	s, err := OpenEtcdStore(context.Background(), opts, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	confPutCred(t, s, confCred("c1", "c1", 1), 0)
	c.Close()
	if _, err := s.GetCredential(context.Background(), "c1"); !errors.Is(err, ErrStorage) {
		t.Errorf("GetCredential with etcd down: error = %v, want ErrStorage", err)
	}
	if err := s.Probe(context.Background()); !errors.Is(err, ErrStorage) {
		t.Errorf("Probe with etcd down: error = %v, want ErrStorage", err)
	}
	st := toStatus(zap.NewNop(), fmt.Errorf("wrapped: %w", ErrStorage))
	if status.Code(st) != codes.Unavailable || status.Convert(st).Message() != "storage unavailable" || !rpcerr.IsDependencyFailure(st) {
		t.Errorf("toStatus(ErrStorage) = %v, want Unavailable \"storage unavailable\" marked as a dependency failure", st)
	}
}

func TestEtcdStoreSchemaVersion(t *testing.T) {
	s := newEtcdTestStore(t, nil)
	if _, err := s.cli.Put(context.Background(), s.prefix+etcdSchemaKey, "99"); err != nil {
		t.Fatal(err)
	}
	opts := DefaultEtcdOptions()
	opts.Endpoints = testEtcdEndpoints(t)
	opts.Prefix = strings.TrimSuffix(s.prefix, "secrets/")
	if other, err := OpenEtcdStore(context.Background(), opts, zaptest.NewLogger(t)); err == nil {
		_ = other.Close()
		t.Fatal("OpenEtcdStore on schema version 99: error = nil")
	} else if !strings.Contains(err.Error(), "schema version 99") {
		t.Errorf("error = %v, want it to name the schema version", err)
	}
}

// TestEtcdStoreUpgradesSchema1: a prefix written by version 1 (no grants/) is upgraded when a
// replica of this build opens it, and keeps its records.
func TestEtcdStoreUpgradesSchema1(t *testing.T) {
	s := newEtcdTestStore(t, nil)
	ctx := context.Background()
	confPutService(t, s, confService("api", 1), 0)
	if _, err := s.cli.Put(ctx, s.prefix+etcdSchemaKey, "1"); err != nil {
		t.Fatal(err)
	}
	opts := DefaultEtcdOptions()
	opts.Endpoints = testEtcdEndpoints(t)
	opts.Prefix = strings.TrimSuffix(s.prefix, "secrets/")
	other, err := OpenEtcdStore(ctx, opts, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("OpenEtcdStore on schema version 1: %v", err)
	}
	defer other.Close()
	got, err := s.cli.Get(ctx, s.prefix+etcdSchemaKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != etcdSchemaVersion {
		t.Errorf("schema version after the upgrade = %v, want %s", got.Kvs, etcdSchemaVersion)
	}
	if _, err := other.GetService(ctx, "api"); err != nil {
		t.Errorf("GetService after the upgrade: %v", err)
	}
	if err := other.PutGrants(ctx, "api", GrantsRecord{Encrypt: true, Decrypt: true}); err != nil {
		t.Errorf("PutGrants after the upgrade: %v", err)
	}
}

func TestEtcdConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string // "" = valid
	}{
		{"bolt ignores etcd settings", func(c *Config) { c.Etcd.Endpoints = nil }, ""},
		{"etcd defaults", func(c *Config) { c.Store = "etcd" }, ""},
		{"unknown store", func(c *Config) { c.Store = "dynamo" }, "GANTRY_STORE"},
		{"bare host:port endpoints", func(c *Config) { c.Store = "etcd"; c.Etcd.Endpoints = []string{"etcd-0:2379", "etcd-1:2379"} }, ""},
		{"no endpoints", func(c *Config) { c.Store = "etcd"; c.Etcd.Endpoints = nil }, "GANTRY_ETCD_ENDPOINTS"},
		{"bad scheme", func(c *Config) { c.Store = "etcd"; c.Etcd.Endpoints = []string{"unix://x:1"} }, "GANTRY_ETCD_ENDPOINTS"},
		{"no port", func(c *Config) { c.Store = "etcd"; c.Etcd.Endpoints = []string{"http://etcd"} }, "GANTRY_ETCD_ENDPOINTS"},
		{"empty prefix", func(c *Config) { c.Store = "etcd"; c.Etcd.Prefix = "" }, "GANTRY_ETCD_PREFIX"},
		{"cert without key", func(c *Config) { c.Store = "etcd"; c.Etcd.CertFile = "/etc/hostname" }, "GANTRY_ETCD_CERT_FILE"},
		{"missing CA file", func(c *Config) { c.Store = "etcd"; c.Etcd.CAFile = "/nonexistent/ca.pem" }, "GANTRY_ETCD_CA_FILE"},
		{"zero dial timeout", func(c *Config) { c.Store = "etcd"; c.Etcd.DialTimeout = 0 }, "GANTRY_ETCD_DIAL_TIMEOUT"},
		{"zero request timeout", func(c *Config) { c.Store = "etcd"; c.Etcd.RequestTimeout = 0 }, "GANTRY_ETCD_REQUEST_TIMEOUT"},
		{"tiny request limit", func(c *Config) { c.Store = "etcd"; c.Etcd.MaxRequestBytes = 1000 }, "GANTRY_ETCD_MAX_REQUEST_BYTES"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.mutate(&cfg)
			err := cfg.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate() error = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate() error = %v, want one naming %s", err, tt.wantErr)
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
		confPutCred(t, s, confCred(id, id, 1), 0)
	}
	compactions := 0
	s.afterIndexRead = func() {
		if compactions > 0 {
			return
		}
		compactions++
		// A write moves the revision on; compacting up to it removes the index read's revision.
		confPutCred(t, s, confCred("c0", "c0", 2), 1)
		resp, err := s.cli.Get(ctx, "compaction-probe")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.cli.Compact(ctx, resp.Header.Revision); err != nil {
			t.Fatal(err)
		}
	}
	recs, _, err := s.ListCredentials(ctx, Page{Limit: 10})
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
