package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/etcdtest"
	"github.com/gantry-dev/gantry/pkg/internaltls"
)

// ackedWrite is a write the REST API acknowledged (200): a credential and the value it was given.
type ackedWrite struct {
	id, value string
	revision  int
}

// writeLoad writes through the REST API until stopped: one writer creates credentials, another
// updates one credential over and over. It records every acknowledged write, in order.
type writeLoad struct {
	s       *testStack
	mu      sync.Mutex
	acked   []ackedWrite
	started chan struct{} // closed once both writers have had writes acknowledged
	failed  chan struct{} // closed at the first unexpected answer
	failOne sync.Once
	stop    chan struct{}
	wg      sync.WaitGroup
	errs    []string
}

func startWriteLoad(s *testStack, id string) *writeLoad {
	w := &writeLoad{s: s, started: make(chan struct{}), failed: make(chan struct{}), stop: make(chan struct{})}
	var once sync.Once
	var creates, updates int
	note := func(a ackedWrite, update bool) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.acked = append(w.acked, a)
		if update {
			updates++
		} else {
			creates++
		}
		if creates >= 5 && updates >= 5 {
			once.Do(func() { close(w.started) })
		}
	}
	w.wg.Add(2)
	go func() {
		defer w.wg.Done()
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			value := fmt.Sprintf("created-%d", i)
			c, ok := w.send(http.MethodPost, "/v1/credentials", map[string]any{"name": fmt.Sprintf("load-%d", i), "credential_pairs": map[string]any{"v": value}, "documentation": "written under load"})
			if ok {
				note(ackedWrite{id: c["id"].(string), value: value, revision: int(c["revision"].(float64))}, false)
			}
		}
	}()
	go func() {
		defer w.wg.Done()
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			value := fmt.Sprintf("updated-%d", i)
			c, ok := w.send(http.MethodPut, "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"v": value}})
			if ok {
				note(ackedWrite{id: id, value: value, revision: int(c["revision"].(float64))}, true)
			}
		}
	}()
	return w
}

// send makes one request; only a 200 counts as acknowledged (a 429 or 503 under load is not).
func (w *writeLoad) send(method, path string, body any) (map[string]any, bool) {
	payload, _ := json.Marshal(body)
	req, err := http.NewRequest(method, w.s.rest+path, bytes.NewReader(payload))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", w.s.asUser)
	resp, err := client.Do(req)
	if err != nil {
		w.fail(fmt.Sprintf("%s %s: %v", method, path, err))
		return nil, false
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != http.StatusOK {
		if resp.StatusCode != http.StatusTooManyRequests {
			w.fail(fmt.Sprintf("%s %s: %d %v %v", method, path, resp.StatusCode, m, err))
		}
		return nil, false
	}
	return m, true
}

func (w *writeLoad) fail(msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs = append(w.errs, msg)
	w.failOne.Do(func() { close(w.failed) })
}

// waitStarted returns once both writers have writes acknowledged; a writer's failure first fails the test.
func (w *writeLoad) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-w.started:
	case <-w.failed:
		w.finish(t)
		t.FailNow()
	}
}

// snapshot returns the writes acknowledged so far.
func (w *writeLoad) snapshot() []ackedWrite {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]ackedWrite(nil), w.acked...)
}

// finish stops the writers and fails the test on any unexpected answer.
func (w *writeLoad) finish(t *testing.T) {
	t.Helper()
	close(w.stop)
	w.wg.Wait()
	for _, e := range w.errs {
		t.Errorf("writer: %s", e)
	}
}

// checkAcked fails the test unless every write in acked is in the restored stack: each created
// credential with its value, and the updated credential at least at the last acknowledged revision.
func checkAcked(t *testing.T, restored *testStack, acked []ackedWrite) {
	t.Helper()
	last := map[string]ackedWrite{}
	for _, a := range acked {
		if a.revision >= last[a.id].revision {
			last[a.id] = a
		}
	}
	for id, a := range last {
		got := restored.get("/v1/credentials/"+id).must(t, 200)
		rev := int(got["revision"].(float64))
		if rev < a.revision {
			t.Errorf("credential %s: revision %d restored, revision %d (%s) was acknowledged before the backup", id, rev, a.revision, a.value)
			continue
		}
		// Later writes (acknowledged while the backup ran) may be in the copy too: the value must be the
		// acknowledged one or a later one of the same writer (values count up).
		value, _ := asMap(t, got["credential_pairs"])["v"].(string)
		if rev == a.revision && value != a.value || !atOrAfter(value, a.value) {
			t.Errorf("credential %s: %q at revision %d restored, %q at revision %d acknowledged", id, value, rev, a.value, a.revision)
		}
	}
}

// atOrAfter reports whether value is want or a later value of the same writer ("updated-12" after
// "updated-9").
func atOrAfter(value, want string) bool {
	vp, vn, ok1 := strings.Cut(value, "-")
	wp, wn, ok2 := strings.Cut(want, "-")
	v, err1 := strconv.Atoi(vn)
	w, err2 := strconv.Atoi(wn)
	return ok1 && ok2 && vp == wp && err1 == nil && err2 == nil && v >= w
}

// TestOnlineBackupUnderLoad: a backup of a RUNNING gantry on bbolt (the database streamed from the
// secrets service in one read transaction, as gantry backup does) taken while two writers have writes
// acknowledged through the REST API restores into a new folder on which gantry starts with every
// write acknowledged before the backup began. No timing: the backup starts once both writers have
// writes acknowledged, and the writers run until it ends.
func TestOnlineBackupUnderLoad(t *testing.T) {
	s := startStack(t, nil)
	id := s.createCredential("updated-under-load", map[string]any{"v": "initial"})
	load := startWriteLoad(s, id)
	load.waitStarted(t)
	before := load.snapshot()
	out := filepath.Join(t.TempDir(), "backup")
	tlsDir := s.cfg.InternalTLS.Dir
	written, err := stack.BackupDataDir(s.cfg.DataDir, out, stack.BackupOptions{Online: &stack.OnlineBackup{Addr: s.SecretsAddr, ChatAddr: s.ChatAddr,
		Credentials: func() (credentials.TransportCredentials, error) {
			return internaltls.GatewayClientCredentials(tlsDir, internaltls.DefaultServerName)
		}}})
	during := len(load.snapshot()) - len(before)
	load.finish(t)
	if err != nil {
		t.Fatalf("online backup: %v (wrote %v)", err, written)
	}
	t.Logf("backup under load: %d writes acknowledged before it, %d while it ran; files %v", len(before), during, written)
	results := stack.CheckDataDir(context.Background(), out, stack.CheckOptions{TLSDir: tlsDir})
	for _, r := range results {
		if r.Err != nil {
			t.Errorf("check of the copy: %s: %v", r.Name, r.Err)
		}
	}

	// Restore: a new gantry on the backup folder (the original keeps running), every acknowledged write there.
	cfg := s.cfg
	cfg.DataDir = out
	restored := runStack(t, cfg)
	checkAcked(t, restored, before)
}

// TestEtcdBackupUnderLoad: a backup of an installation on etcd (an etcd snapshot through its
// Maintenance API plus the data folder's keyring, as gantry backup -store etcd does) taken while two
// REST writers are acknowledged restores into a NEW etcd (etcdutl's snapshot restore) on which a new
// gantry, given the backed-up folder, starts with every write acknowledged before the backup began.
func TestEtcdBackupUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end suite skipped with -short")
	}
	cluster := etcdtest.New(t, 3, zap.NewNop())
	s := startStack(t, func(c *stack.Config) {
		onEtcd(cluster.Endpoints(), "/backup-test/")(c)
		c.Target = "secrets,gateway"
	})
	id := s.createCredential("updated-under-load", map[string]any{"v": "initial"})
	load := startWriteLoad(s, id)
	load.waitStarted(t)
	before := load.snapshot()
	out := filepath.Join(t.TempDir(), "backup")
	written, _, err := stack.BackupEtcd(context.Background(), s.cfg.DataDir, out, s.cfg.Etcd, false)
	during := len(load.snapshot()) - len(before)
	load.finish(t)
	if err != nil {
		t.Fatalf("etcd backup: %v (wrote %v)", err, written)
	}
	t.Logf("etcd backup under load: %d writes acknowledged before it, %d while it ran; files %v", len(before), during, written)
	for _, r := range stack.CheckDataDir(context.Background(), out, stack.CheckOptions{Store: "etcd", EtcdPrefix: "/backup-test/", TLSDir: s.cfg.InternalTLS.Dir}) {
		if r.Err != nil {
			t.Errorf("check of the copy: %s: %v", r.Name, r.Err)
		} else {
			t.Logf("check of the copy: %s: %s", r.Name, r.Detail)
		}
	}

	restoredEtcd := etcdtest.NewRestored(t, filepath.Join(out, stack.EtcdSnapshotFile), zap.NewNop())
	cfg := s.cfg
	cfg.DataDir = out
	cfg.Etcd.Endpoints = restoredEtcd.Endpoints()
	restored := runStack(t, cfg)
	checkAcked(t, restored, before)
}
