package e2e

import (
	"context"
	"encoding/binary"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/pkg/etcdtest"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/testwait"
	"github.com/gantry-dev/gantry/services/secrets/store/boltstore"
)

// createSecret creates a credential with one pair through the gateway and returns its id.
func createSecret(t *testing.T, s *testStack, name, value string) string {
	t.Helper()
	r := s.call("POST", "/v1/credentials", map[string]any{"name": name, "documentation": "storage faults",
		"credential_pairs": map[string]any{"v": value}})
	return r.must(t, http.StatusOK)["id"].(string)
}

// readSecret reads the pair "v" of a credential through the gateway.
func readSecret(t *testing.T, s *testStack, id string) string {
	t.Helper()
	pairs, _ := s.get("/v1/credentials/"+id).must(t, http.StatusOK)["credential_pairs"].(map[string]any)
	v, _ := pairs["v"].(string)
	return v
}

// startFails starts a stack on cfg, which must fail with an error containing every one of want.
func startFails(t *testing.T, cfg stack.Config, want ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := stack.Start(ctx, cfg, zap.NewNop())
	if err == nil {
		cancel()
		_ = st.Wait()
		t.Fatalf("the stack started; want a refusal mentioning %q", want)
	}
	t.Logf("refused as it should be: %v", err)
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("start error %q does not mention %q", err, w)
		}
	}
}

// TestKeyringLossRefusesStart: a data folder whose keyring.json went missing, or was replaced by
// another keyring, refuses to start, naming the file to restore, and creates no keyring of its own;
// with the original keyring restored it starts and every value reads back.
func TestKeyringLossRefusesStart(t *testing.T) {
	s := startStack(t, nil)
	id := createSecret(t, s, "keyring-loss", "kept")
	s.stop()
	ringPath := filepath.Join(s.cfg.DataDir, "keyring.json")
	original, err := os.ReadFile(ringPath)
	if err != nil {
		t.Fatal(err)
	}

	if err := os.Remove(ringPath); err != nil {
		t.Fatal(err)
	}
	startFails(t, s.cfg, ringPath, "restore keyring.json")
	if _, err := os.Stat(ringPath); err == nil {
		t.Fatal("a refused start created a new keyring")
	}

	// Another keyring in its place: gantry's own, created for another (empty) folder.
	other := filepath.Join(t.TempDir(), "keyring.json")
	if _, err := kms.OpenKeyring(other, zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	replacement, err := os.ReadFile(other)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ringPath, replacement, 0o600); err != nil {
		t.Fatal(err)
	}
	startFails(t, s.cfg, ringPath, "not the one the store")

	if err := os.WriteFile(ringPath, original, 0o600); err != nil {
		t.Fatal(err)
	}
	s = runStack(t, s.cfg)
	if got := readSecret(t, s, id); got != "kept" {
		t.Fatalf("after restoring the keyring the value reads %q, want kept", got)
	}
}

// boltPageSize reads the page size from the first meta page of a bbolt file.
func boltPageSize(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4)
	if _, err := f.ReadAt(buf, 16+8); err != nil { // page header, then magic and version
		t.Fatal(err)
	}
	return int64(binary.LittleEndian.Uint32(buf))
}

// writeAt overwrites bytes of a file in place (a disk fault, or someone's stray write).
func writeAt(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// credentialsRootPage is the page holding the root of the current-credentials bucket, which
// must be a page of its own (not inline in its parent: enough data makes it so).
func credentialsRootPage(t *testing.T, path string) int64 {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var root int64
	_ = db.View(func(tx *bolt.Tx) error {
		root = int64(tx.Bucket([]byte("cred_current")).Root())
		return nil
	})
	if root == 0 {
		t.Fatal("the credentials bucket is inline; write more data")
	}
	return root
}

// TestDamagedDatabaseRefused: an empty, truncated or damaged secrets.db next to its keyring stops the
// start with a message naming the file (bbolt alone would start an empty database, silently fall back
// to the older meta page, or panic later); an empty file in a folder that never had a keyring is a
// first start that was cut short, and starts afresh.
func TestDamagedDatabaseRefused(t *testing.T) {
	// prepare makes a data folder with a few credentials (large enough that the credentials bucket
	// gets pages of its own) and returns the stopped stack's configuration.
	prepare := func(t *testing.T) stack.Config {
		s := startStack(t, nil)
		for i := range 4 {
			createSecret(t, s, "damage-"+string(rune('a'+i)), strings.Repeat("x", 2000))
		}
		s.stop()
		return s.cfg
	}
	dbPath := func(cfg stack.Config) string { return filepath.Join(cfg.DataDir, "secrets.db") }

	t.Run("empty", func(t *testing.T) {
		cfg := prepare(t)
		if err := os.Truncate(dbPath(cfg), 0); err != nil {
			t.Fatal(err)
		}
		startFails(t, cfg, dbPath(cfg), "empty")
	})
	t.Run("truncated", func(t *testing.T) {
		cfg := prepare(t)
		info, err := os.Stat(dbPath(cfg))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(dbPath(cfg), info.Size()/2); err != nil {
			t.Fatal(err)
		}
		startFails(t, cfg, dbPath(cfg), "truncated")
	})
	t.Run("damaged meta page", func(t *testing.T) {
		cfg := prepare(t)
		ps := boltPageSize(t, dbPath(cfg))
		writeAt(t, dbPath(cfg), ps+16+40, []byte{0xff}) // meta page 1, inside its checksummed record
		startFails(t, cfg, dbPath(cfg), "meta page 1")
	})
	t.Run("damaged data page", func(t *testing.T) {
		cfg := prepare(t)
		root := credentialsRootPage(t, dbPath(cfg))
		writeAt(t, dbPath(cfg), root*boltPageSize(t, dbPath(cfg))+8, []byte{0xff, 0xff}) // page flags
		startFails(t, cfg, dbPath(cfg), "damaged")
	})
	t.Run("empty file in a new folder", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "secrets.db"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		s := startStack(t, func(c *stack.Config) { c.DataDir = dir })
		createSecret(t, s, "fresh", "start")
	})
}

// TestStorePanicContained damages a page of the running database so that bbolt panics when it reads
// it: the request gets a JSON 503, the secrets service reports NOT_SERVING from then on (its store
// failed), and the rest of the process — the gateway, its admin port, chat — keeps serving. A copy of
// the damaged file is then refused at start.
func TestStorePanicContained(t *testing.T) {
	s := startStack(t, func(c *stack.Config) { c.Secrets.StoreProbeInterval = 50 * time.Millisecond })
	var ids []string
	for i := range 4 {
		ids = append(ids, createSecret(t, s, "panic-"+string(rune('a'+i)), strings.Repeat("y", 2000)))
	}
	s = s.restart() // the pages are where the file says once no write follows
	dbPath := filepath.Join(s.cfg.DataDir, "secrets.db")
	health := healthpb.NewHealthClient(s.dial(s.SecretsAddr))
	serving := func() healthpb.HealthCheckResponse_ServingStatus {
		r, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatalf("health check: %v", err)
		}
		return r.GetStatus()
	}
	if got := serving(); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("secrets health before the damage = %v", got)
	}
	if got := readSecret(t, s, ids[0]); got != strings.Repeat("y", 2000) {
		t.Fatalf("read before the damage = %q", got)
	}

	// Offline, find the page; the running process has it mapped, so the write shows at once.
	root := func() int64 {
		// bbolt's lock is held by the running stack: read the page id from a copy.
		data, err := os.ReadFile(dbPath)
		if err != nil {
			t.Fatal(err)
		}
		cp := filepath.Join(t.TempDir(), "copy.db")
		if err := os.WriteFile(cp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return credentialsRootPage(t, cp)
	}()
	writeAt(t, dbPath, root*boltPageSize(t, dbPath)+8, []byte{0xff, 0xff})

	r := s.get("/v1/credentials/" + ids[1])
	if r.code != http.StatusServiceUnavailable || r.json(t)["error"] != "storage unavailable" {
		t.Fatalf("read of a damaged page: %d %s, want 503 storage unavailable", r.code, r.body)
	}
	// The store stays failed: even reads that would not touch the page are refused (its in-memory
	// state can no longer be trusted), and health says so.
	if r := s.get("/v1/services"); r.code != http.StatusServiceUnavailable {
		t.Errorf("a read after the failure: %d %s, want 503", r.code, r.body)
	}
	testwait.Until(t, "the secrets service to report NOT_SERVING", func() bool {
		return serving() == healthpb.HealthCheckResponse_NOT_SERVING
	})
	// The process lives on: chat answers (404 from the chat host for an unknown team), so does admin.
	if r := s.getTeam(t); r.code != http.StatusNotFound {
		t.Errorf("chat after the store failed: %d %s", r.code, r.body)
	}
	if r := s.admin("/clusters"); r.code != http.StatusOK {
		t.Errorf("admin after the store failed: %d", r.code)
	}

	// A restart on the damaged file is refused (on a copy: the failed store keeps its lock).
	data, err := os.ReadFile(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	ring, err := os.ReadFile(filepath.Join(s.cfg.DataDir, "keyring.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.cfg
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.DataDir, "secrets.db"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.DataDir, "keyring.json"), ring, 0o600); err != nil {
		t.Fatal(err)
	}
	startFails(t, cfg, "damaged")
}

// TestEtcdReplicaWithAnotherKeyringRefused: on etcd the store is shared, so the key check is what
// keeps a replica started with a keyring of its own (forgotten copy) from writing credentials no
// other replica can read: it refuses to start, while a replica with the right keyring starts.
func TestEtcdReplicaWithAnotherKeyringRefused(t *testing.T) {
	cluster := etcdtest.New(t, 1, zap.NewNop())
	first := startStack(t, func(c *stack.Config) { onEtcd(cluster.Endpoints(), "/keycheck/")(c); c.Target = "secrets,gateway" })
	waitServing(first)
	createSecret(t, first, "shared", "value")

	second := first.cfg
	second.DataDir = filepath.Join(t.TempDir(), "replica-b") // no keyring: it would make its own
	second.Secrets.Listen, second.Gateway.Listen, second.Gateway.AdminListen, second.Gateway.AdminGRPCListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	startFails(t, second, "keyring.json", "already holds data")
	if _, err := os.Stat(filepath.Join(second.DataDir, "keyring.json")); err == nil {
		t.Error("the refused replica created a keyring")
	}
	// Its own keyring, made beforehand: not the store's.
	if _, err := kms.OpenKeyring(filepath.Join(second.DataDir, "keyring.json"), zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	startFails(t, second, "not the one the store")
}

// TestUsedKeyringRefusesEmptyStore: a keyring that has protected a store, beside a secrets.db that
// is missing or empty (a new bbolt file without key-check value or data), refuses to start, saying
// how to start fresh on purpose, and creates no database; with the store restored everything reads
// back; with the keyring moved away a new, empty store starts. Before, the missing file started
// silently on an empty store: every credential 404, new writes accepted.
func TestUsedKeyringRefusesEmptyStore(t *testing.T) {
	s := startStack(t, nil)
	id := createSecret(t, s, "used-keyring", "kept")
	s.stop()
	dbPath := filepath.Join(s.cfg.DataDir, "secrets.db")
	saved := filepath.Join(t.TempDir(), "secrets.db")
	if err := os.Rename(dbPath, saved); err != nil {
		t.Fatal(err)
	}
	startFails(t, s.cfg, dbPath, "does not exist", "has protected a store since", "move keyring.json out of the data folder")
	if _, err := os.Stat(dbPath); err == nil {
		t.Fatal("the refused start created a database")
	}

	empty, err := boltstore.Open(dbPath, boltdb.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := empty.Close(); err != nil {
		t.Fatal(err)
	}
	startFails(t, s.cfg, dbPath, "is empty", "move keyring.json out of the data folder")

	if err := os.Rename(saved, dbPath); err != nil {
		t.Fatal(err)
	}
	s = runStack(t, s.cfg)
	if got := readSecret(t, s, id); got != "kept" {
		t.Fatalf("with the store restored the value reads %q, want kept", got)
	}
	s.stop()

	// Starting fresh on purpose, as the message says: the keyring moved away, the store with it.
	ringPath := filepath.Join(s.cfg.DataDir, "keyring.json")
	if err := os.Rename(ringPath, filepath.Join(t.TempDir(), "keyring.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dbPath); err != nil {
		t.Fatal(err)
	}
	s = runStack(t, s.cfg)
	s.get("/v1/credentials/"+id).must(t, http.StatusNotFound)
	s.stop()
}

// TestUsedKeyringRefusesEmptyEtcdPrefix: on etcd, the keyring of a replica that has served a prefix
// refuses an empty prefix (a mistyped -etcd-prefix, a wiped cluster) the same way.
func TestUsedKeyringRefusesEmptyEtcdPrefix(t *testing.T) {
	cluster := etcdtest.New(t, 1, zap.NewNop())
	first := startStack(t, func(c *stack.Config) { onEtcd(cluster.Endpoints(), "/used-keyring/")(c); c.Target = "secrets,gateway" })
	waitServing(first)
	createSecret(t, first, "on-etcd", "value")
	first.stop()
	cfg := first.cfg
	cfg.Etcd.Prefix = "/used-keyring-typo/"
	startFails(t, cfg, "etcd prefix /used-keyring-typo/", "is empty", "-etcd-prefix")
}

// TestWriteStallFailsHealthAndRecovers: a write that has not committed within
// -store-write-stall-timeout (here bbolt's write lock held by the test, as a commit stuck on a frozen
// disk holds it: fsfreeze needs root and a filesystem of its own) turns the secrets health
// NOT_SERVING, /healthcheck and /ready 503, the gateway's view of the host unhealthy, and makes
// writes answer 503 with Retry-After at once instead of waiting for the disk; reads go on. Once the
// lock is released the held write commits and everything recovers by itself. Before, every write
// waited for the whole stall and health stayed SERVING.
func TestWriteStallFailsHealthAndRecovers(t *testing.T) {
	s := startStack(t, func(c *stack.Config) {
		c.Secrets.WriteStallTimeout = 200 * time.Millisecond
		c.Secrets.StoreProbeInterval = 20 * time.Millisecond
		c.Gateway.HealthCheck.Interval = 20 * time.Millisecond
		c.Gateway.HealthCheck.UnhealthyThreshold = 1
		c.Gateway.HealthCheck.HealthyThreshold = 1
		c.StatsListen = "127.0.0.1:0" // its /ready is a kubelet's readiness probe (the Helm chart's)
	})
	statsProbe := func(path string) response { return s.do("GET", "http://"+s.StatsAddr+path, "", nil) }
	if r := statsProbe("/ready"); r.code != http.StatusOK {
		t.Fatalf("the stats listener's /ready before the stall: %d %s", r.code, r.body)
	}
	kept := createSecret(t, s, "before-stall", "kept")
	health := healthpb.NewHealthClient(s.dial(s.SecretsAddr))
	serving := func() healthpb.HealthCheckResponse_ServingStatus {
		r, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatalf("health check: %v", err)
		}
		return r.GetStatus()
	}
	if r := s.get("/healthcheck"); r.code != http.StatusOK {
		t.Fatalf("/healthcheck before the stall: %d %s", r.code, r.body)
	}

	release, err := s.HoldWrites()
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	// The held write: its commit waits for the lock, as one waits for a frozen disk.
	held := make(chan response, 1)
	go func() {
		held <- s.call("POST", "/v1/credentials", map[string]any{"name": "during-stall", "documentation": "held",
			"credential_pairs": map[string]any{"v": "held"}})
	}()
	testwait.Until(t, "the secrets service to report NOT_SERVING", func() bool {
		return serving() == healthpb.HealthCheckResponse_NOT_SERVING
	})
	r := s.call("POST", "/v1/credentials", map[string]any{"name": "refused", "documentation": "stall",
		"credential_pairs": map[string]any{"v": "x"}})
	if r.code != http.StatusServiceUnavailable || !strings.Contains(r.json(t)["error"].(string), "writes are stalled") {
		t.Fatalf("a write during the stall: %d %s, want 503 writes are stalled", r.code, r.body)
	}
	if ra := r.header.Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After %q, want 1 (the 200ms stall timeout, in whole seconds)", ra)
	}
	if r := s.get("/healthcheck"); r.code != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "NOT_SERVING") {
		t.Errorf("/healthcheck during the stall: %d %s, want 503", r.code, r.body)
	}
	// The gauge of GantryStoreStalled: the stall in whole seconds, rounded up.
	if v := series(s.scrape(t), "envoy_secrets_store_write_stalled_seconds", ""); v < 1 {
		t.Errorf("envoy_secrets_store_write_stalled_seconds during the stall = %v, want at least 1", v)
	}
	if r := s.admin("/ready"); r.code != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "UNHEALTHY") {
		t.Errorf("/ready during the stall: %d %s, want 503 UNHEALTHY", r.code, r.body)
	}
	if r := statsProbe("/ready"); r.code != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "NOT_SERVING") {
		t.Errorf("the stats listener's /ready during the stall: %d %s, want 503 NOT_SERVING", r.code, r.body)
	}
	if r := statsProbe("/live"); r.code != http.StatusOK {
		t.Errorf("the stats listener's /live during the stall: %d %s, want 200 (the process is alive)", r.code, r.body)
	}
	testwait.Until(t, "the gateway to mark the secrets host /failed_active_hc", func() bool {
		return strings.Contains(s.hostLines("secrets", s.SecretsAddr)["health_flags"], "/failed_active_hc")
	})
	if got := readSecret(t, s, kept); got != "kept" {
		t.Errorf("a read during the stall = %q, want kept", got)
	}
	select {
	case r := <-held:
		t.Fatalf("the held write answered %d %s while its commit was held", r.code, r.body)
	default:
	}

	release()
	if r := <-held; r.code != http.StatusOK {
		t.Fatalf("the held write after the stall: %d %s, want 200 (its commit completed)", r.code, r.body)
	}
	testwait.Until(t, "the secrets service to report SERVING again", func() bool {
		return serving() == healthpb.HealthCheckResponse_SERVING
	})
	testwait.Until(t, "/healthcheck to pass again", func() bool { return s.get("/healthcheck").code == http.StatusOK })
	testwait.Until(t, "/ready to pass again", func() bool { return s.admin("/ready").code == http.StatusOK })
	testwait.Until(t, "the stats listener's /ready to pass again", func() bool { return statsProbe("/ready").code == http.StatusOK })
	if v := series(s.scrape(t), "envoy_secrets_store_write_stalled_seconds", ""); v != 0 {
		t.Errorf("envoy_secrets_store_write_stalled_seconds after the stall = %v, want 0", v)
	}
	testwait.Until(t, "the gateway to mark the secrets host healthy", func() bool {
		return !strings.Contains(s.hostLines("secrets", s.SecretsAddr)["health_flags"], "/failed_active_hc")
	})
	createSecret(t, s, "after-stall", "written")
	if got := readSecret(t, s, kept); got != "kept" {
		t.Fatalf("read after the stall = %q", got)
	}
}

// TestReadStallFailsHealthAndAnswers503: reads of the secrets store that cannot begin (here held at
// the store boundary, as bbolt's mmap lock holds them while a commit that grows the file is stuck on
// a frozen disk: fsfreeze needs root and a filesystem of its own) turn the secrets health
// NOT_SERVING and /healthcheck 503 while they are held, and a read through the gateway answers 503
// with Retry-After after -store-write-stall-timeout, well within its deadline, instead of hanging
// until the disk thaws. Once released, everything recovers by itself. Before, the health probe
// waited behind the stalled store and held its last value (SERVING), and reads hung.
func TestReadStallFailsHealthAndAnswers503(t *testing.T) {
	s := startStack(t, func(c *stack.Config) {
		c.Secrets.WriteStallTimeout = 200 * time.Millisecond
		c.Secrets.StoreProbeInterval = 20 * time.Millisecond
		c.Secrets.StoreProbeTimeout = 100 * time.Millisecond
		c.Gateway.UpstreamTimeout = 20 * time.Second
	})
	kept := createSecret(t, s, "before-read-stall", "kept")
	health := healthpb.NewHealthClient(s.dial(s.SecretsAddr))
	serving := func() healthpb.HealthCheckResponse_ServingStatus {
		r, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatalf("health check: %v", err)
		}
		return r.GetStatus()
	}

	release, err := s.HoldReads()
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	testwait.Until(t, "the secrets service to report NOT_SERVING", func() bool {
		return serving() == healthpb.HealthCheckResponse_NOT_SERVING
	})
	if r := s.get("/healthcheck"); r.code != http.StatusServiceUnavailable {
		t.Errorf("/healthcheck during the read stall: %d %s, want 503", r.code, r.body)
	}
	r := s.get("/v1/credentials/" + kept)
	if r.code != http.StatusServiceUnavailable || !strings.Contains(r.json(t)["error"].(string), "stalled") {
		t.Fatalf("a read during the stall: %d %s, want 503 ... stalled (before its 20s deadline, not a 504)", r.code, r.body)
	}
	if ra := r.header.Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After %q, want 1 (the 200ms stall timeout, in whole seconds)", ra)
	}

	release()
	testwait.Until(t, "the secrets service to report SERVING again", func() bool {
		return serving() == healthpb.HealthCheckResponse_SERVING
	})
	testwait.Until(t, "/healthcheck to pass again", func() bool { return s.get("/healthcheck").code == http.StatusOK })
	if got := readSecret(t, s, kept); got != "kept" {
		t.Fatalf("read after the stall = %q", got)
	}
}
