package chaos

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/boltstore"
)

// Environment of the crash child: the test binary re-executes itself as the gantry process.
const (
	envChildDataDir  = "GANTRY_CRASH_CHILD_DATA_DIR"
	envChildAddrFile = "GANTRY_CRASH_CHILD_ADDR_FILE"
	// envChildEtcd puts the child's secrets store on etcd: a comma list of client URLs (the child
	// does not read GANTRY_STORE itself, so a developer's own setting cannot move the bbolt test).
	envChildEtcd = "GANTRY_CRASH_CHILD_ETCD_ENDPOINTS"
	// envCycles selects the number of kill cycles (make chaos sets it; the default is the short form).
	envCycles = "GANTRY_CHAOS_CYCLES"
)

// TestCrashChild is not a test: it is the gantry process the crash test kills. It runs the whole
// stack on the data folder it is given, writes the REST address to a file, and serves until killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(envChildDataDir)
	if dir == "" {
		t.Skip("only runs as the child of TestCrashDurability")
	}
	cfg := loopbackConfig(t, dir)
	if endpoints := os.Getenv(envChildEtcd); endpoints != "" {
		cfg.Secrets.Store = "etcd"
		cfg.Etcd.Endpoints = strings.Split(endpoints, ",")
		cfg.Etcd.Prefix = chaosEtcdPrefix
		// A leader election answers a few writes 503 (Unavailable, which counts against the host).
		// The panic threshold keeps a lone ejected host routed, but this test is about what the store
		// keeps, not about outlier detection, so the gateway passes everything through.
		cfg.Gateway.Outlier.ConsecutiveFailures = 0
	}
	st, err := stack.Start(context.Background(), cfg, zap.NewNop())
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child: start:", err)
		os.Exit(3)
	}
	// Write then rename, so the parent never reads half an address.
	tmp := os.Getenv(envChildAddrFile) + ".tmp"
	if err := os.WriteFile(tmp, []byte(st.GatewayAddr+" "+st.AdminAddr), 0o600); err != nil {
		os.Exit(4)
	}
	if err := os.Rename(tmp, os.Getenv(envChildAddrFile)); err != nil {
		os.Exit(4)
	}
	_ = st.Wait()
	os.Exit(0)
}

// child is one run of the gantry process.
type child struct {
	cmd         *exec.Cmd
	rest, admin string // base URLs of the gateway and its admin port
}

// startChild re-executes the test binary as a gantry process on dataDir and waits for its address;
// env adds settings (the etcd endpoints).
func startChild(t *testing.T, dataDir string, env ...string) *child {
	t.Helper()
	addrFile := filepath.Join(t.TempDir(), "addr")
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), envChildDataDir+"="+dataDir, envChildAddrFile+"="+addrFile), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for {
		if addrs, err := os.ReadFile(addrFile); err == nil {
			rest, admin, _ := strings.Cut(string(addrs), " ")
			c := &child{cmd: cmd, rest: "http://" + rest, admin: "http://" + admin}
			// Reap the process in the background once it is killed.
			t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
			return c
		}
		select {
		case err := <-exited:
			t.Fatalf("gantry child exited before serving: %v\n%s", err, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
}

// ack is one update a client saw acknowledged: the revision the server reported and the value written.
type ack struct {
	revision int
	value    string
}

// TestCrashDurability drives concurrent credential updates through the gateway of a gantry process,
// kills it with SIGKILL at a random moment, restarts it on the same data folder, and checks that every
// acknowledged update is there with its value, every revision chain is complete and decrypts, and the
// database opens cleanly and passes bbolt's consistency check. GANTRY_CHAOS_CYCLES sets the number of
// cycles (make chaos); the short form runs in make test.
func TestCrashDurability(t *testing.T) {
	if os.Getenv(envChildDataDir) != "" || os.Getenv(envMemberConfig) != "" {
		t.Skip("child process")
	}
	cycles := chaosCycles(t, 5, 2)
	dataDir := filepath.Join(t.TempDir(), "data")
	const creds, writersPerCred = 4, 3
	start := time.Now()

	c := startChild(t, dataDir)
	auth := userAuth(t, dataDir)
	ids, acked := createCrashCredentials(t, c.rest, auth, "crash", creds)
	load := &crashLoad{acked: acked}
	for cycle := range cycles {
		// Writers update until the process dies under them.
		wg := load.run(t, c.rest, auth, ids, writersPerCred, cycle, nil, fmt.Sprintf("cycle %d", cycle))
		time.Sleep(time.Duration(20+rand.IntN(300)) * time.Millisecond)
		c.kill(t)
		wg.Wait()
		if t.Failed() {
			return
		}

		// With the process dead, the file must open and pass bbolt's own consistency check.
		checkBolt(t, filepath.Join(dataDir, "secrets.db"))
		checkChains(t, dataDir, acked)

		// Restarted on the same folder, it serves every acknowledged update.
		c = startChild(t, dataDir)
		for _, id := range ids {
			r := request(t, c.rest, auth, "GET", "/v1/credentials/"+id, nil)
			if r.code != 200 {
				t.Fatalf("cycle %d: read %s after restart: %d %s", cycle, id, r.code, r.body)
			}
			last := acked[id][len(acked[id])-1]
			if rev := int(r.json["revision"].(float64)); rev < maxRevision(acked[id]) {
				t.Fatalf("cycle %d: %s at revision %d after restart, but revision %d was acknowledged", cycle, id, rev, last.revision)
			}
		}
	}
	c.kill(t)
	msg := fmt.Sprintf("crash durability: %d SIGKILL cycles, %d acknowledged updates kept (%d requests cut by the kills), %d credentials, %v",
		cycles, load.acknowledged, load.cut, creds, time.Since(start).Round(time.Millisecond))
	if os.Getenv(envCycles) != "" {
		fmt.Println(msg)
	} else {
		t.Log(msg)
	}
}

// chaosCycles is GANTRY_CHAOS_CYCLES when set (make chaos), otherwise the short form's count.
func chaosCycles(t *testing.T, normal, short int) int {
	t.Helper()
	cycles := normal
	if testing.Short() {
		cycles = short
	}
	if v := os.Getenv(envCycles); v != "" {
		if _, err := fmt.Sscan(v, &cycles); err != nil || cycles < 1 {
			t.Fatalf("%s=%q is not a positive number", envCycles, v)
		}
	}
	return cycles
}

func maxRevision(acks []ack) int {
	m := 0
	for _, a := range acks {
		m = max(m, a.revision)
	}
	return m
}

// checkBolt opens the database file the way gantry does and runs bbolt's consistency check.
func checkBolt(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatalf("the database does not open after SIGKILL: %v", err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("bbolt consistency check after SIGKILL: %v", err)
	}
}

// checkChains reads every revision of every credential from the stopped process's database, unwraps
// its data key with the keyring and decrypts its pairs: revisions must run 1..N without gaps, each
// must decrypt, and each acknowledged update must be stored at its revision with its value.
func checkChains(t *testing.T, dataDir string, acked map[string][]ack) {
	t.Helper()
	store, err := boltstore.Open(filepath.Join(dataDir, "secrets.db"), boltdb.Options{Timeout: time.Second}, zap.NewNop())
	if err != nil {
		t.Fatalf("open the store after SIGKILL: %v", err)
	}
	defer store.Close()
	checkStoreChains(t, store, dataDir, acked)
}

// checkStoreChains is checkChains on an open store (bbolt or etcd), with the keyring of dataDir.
func checkStoreChains(t *testing.T, store store.Store, dataDir string, acked map[string][]ack) {
	t.Helper()
	ring, err := kms.OpenKeyring(filepath.Join(dataDir, "keyring.json"), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	for id, acks := range acked {
		revs := stableHistory(t, store, id)
		values := map[int]string{}
		for i, r := range revs {
			if int(r.Revision) != i+1 {
				t.Fatalf("%s: history holds revision %d at position %d: the chain has a gap", id, r.Revision, i+1)
			}
			values[int(r.Revision)] = decryptPairs(t, ring, r)["v"]
		}
		for _, a := range acks {
			if got, ok := values[a.revision]; !ok || got != a.value {
				t.Fatalf("%s: acknowledged revision %d = %q is stored as %q (present %v)", id, a.revision, a.value, got, ok)
			}
		}
	}
}

// stableHistory reads a credential's history and current record until they agree: the current
// record's revision is the last of a gapless history. On etcd a write refused with 503 (its request
// timed out while a member died or a leader was elected) is indeterminate, as with any timed-out
// etcd request: the proposal may still be applied a moment later, so a read of the history and one
// of the current record may straddle it. Only that window is waited out; a store whose two reads
// keep disagreeing fails the test.
func stableHistory(t *testing.T, st store.Store, id string) []*store.CredentialRecord {
	t.Helper()
	ctx := context.Background()
	for attempt := 0; ; attempt++ {
		revs, _, err := st.ListCredentialRevisions(ctx, id, store.Page{})
		if err != nil {
			t.Fatal(err)
		}
		cur, err := st.GetCredential(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if int(cur.Revision) == len(revs) {
			return revs
		}
		if attempt == 20 {
			t.Fatalf("%s: current revision %d, history has %d (still after %d reads)", id, cur.Revision, len(revs), attempt+1)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// decryptPairs opens a stored revision independently of the service: the KMS unwraps the data key
// with the credential id as encryption context, AES-256-GCM opens the pairs (format byte, nonce,
// ciphertext, bound to the id and, in format 2, the revision).
func decryptPairs(t *testing.T, ring kms.Provider, r *store.CredentialRecord) map[string]string {
	t.Helper()
	key, _, err := ring.Decrypt(context.Background(), r.WrappedKey, map[string]string{"id": r.ID})
	if err != nil {
		t.Fatalf("%s-%d: data key does not unwrap: %v", r.ID, r.Revision, err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	sealed := r.SealedPairs
	// Format 2 (every write since issue 14) binds the id and the revision; format 1 only the id.
	var aad string
	switch {
	case len(sealed) < 1+aead.NonceSize():
		t.Fatalf("%s-%d: sealed pairs too short", r.ID, r.Revision)
	case sealed[0] == 0x02:
		aad = fmt.Sprintf("gantry/credential_pairs/v2/%s/%d", r.ID, r.Revision)
	case sealed[0] == 0x01:
		aad = "gantry/credential_pairs/v1/" + r.ID
	default:
		t.Fatalf("%s-%d: sealed pairs in an unknown format %#x", r.ID, r.Revision, sealed[0])
	}
	plain, err := aead.Open(nil, sealed[1:1+aead.NonceSize()], sealed[1+aead.NonceSize():], []byte(aad))
	if err != nil {
		t.Fatalf("%s-%d: pairs do not decrypt: %v", r.ID, r.Revision, err)
	}
	var pairs map[string]string
	if err := json.Unmarshal(plain, &pairs); err != nil {
		t.Fatal(err)
	}
	return pairs
}

// reply is a decoded answer of the gateway.
type reply struct {
	code int
	body []byte
	json map[string]any
}

var httpClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

func tryRequest(base, auth, method, path string, body any) (reply, error) {
	return tryRequestHeader(base, http.Header{"Authorization": {auth}}, method, path, body)
}

// tryRequestHeader is tryRequest with the caller's own headers (chat callers identify themselves by
// the downstream service cluster header, not by Authorization).
func tryRequestHeader(base string, header http.Header, method, path string, body any) (reply, error) {
	var payload io.Reader = http.NoBody
	if body != nil {
		b, _ := json.Marshal(body)
		payload = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, payload)
	if err != nil {
		return reply{}, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	r := reply{code: resp.StatusCode, body: data}
	_ = json.Unmarshal(data, &r.json)
	return r, nil
}

func request(t testing.TB, base, auth, method, path string, body any) reply {
	t.Helper()
	r, err := tryRequest(base, auth, method, path, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// userAuth is a Basic header with a kmsauth token of the user "alice", minted with the data
// folder's keyring as `gantry token` does.
func userAuth(t testing.TB, dataDir string) string {
	t.Helper()
	return "Basic " + base64.StdEncoding.EncodeToString([]byte("2/user/alice:"+mintToken(t, dataDir, "alice", "user")))
}

// createCrashCredentials creates n credentials named <prefix>-<i> with the pair v=initial, and returns
// their ids with revision 1 recorded as acknowledged.
func createCrashCredentials(t *testing.T, base, auth, prefix string, n int) ([]string, map[string][]ack) {
	t.Helper()
	ids := make([]string, n)
	acked := map[string][]ack{}
	for i := range ids {
		r := request(t, base, auth, "POST", "/v1/credentials", map[string]any{"name": fmt.Sprintf("%s-%d", prefix, i),
			"documentation": "crash test", "credential_pairs": map[string]any{"v": "initial"}})
		if r.code != 200 {
			t.Fatalf("create: %d %s", r.code, r.body)
		}
		ids[i] = r.json["id"].(string)
		acked[ids[i]] = []ack{{1, "initial"}}
	}
	return ids, acked
}

// crashLoad is the write load of the crash tests: writers that update credentials with fresh values
// until stopped or until the process dies under them, and a tally of what became of the updates.
// Reads of its fields are safe once the writers of a cycle have finished.
type crashLoad struct {
	mu    sync.Mutex
	acked map[string][]ack // per credential, the revisions acknowledged to a client
	// acknowledged: 200s; refused: 503s (only when refusals are expected, during an etcd leader
	// election); cut: requests the killed process never answered.
	acknowledged, refused, cut int
	refusalsExpected           bool
}

// run starts writersPerCred writers per credential and returns their WaitGroup. A writer ends when
// stop closes (nil: never), when its request gets no answer (the process died), or on an answer the
// test does not expect, which fails t. Writers of one credential queue in the service, so a 409 is
// such an answer (there is none without If-Match).
func (l *crashLoad) run(t *testing.T, base, auth string, ids []string, writersPerCred, cycle int, stop <-chan struct{}, label string) *sync.WaitGroup {
	var wg sync.WaitGroup
	for ci, id := range ids {
		for w := range writersPerCred {
			wg.Go(func() {
				for seq := 0; ; seq++ {
					select {
					case <-stop:
						return
					default:
					}
					value := fmt.Sprintf("c%d-cred%d-w%d-%d", cycle, ci, w, seq)
					r, err := tryRequest(base, auth, "PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"v": value}})
					l.mu.Lock()
					switch {
					case err != nil:
						l.cut++
						l.mu.Unlock()
						return // the process is gone
					case r.code == 200:
						l.acked[id] = append(l.acked[id], ack{int(r.json["revision"].(float64)), value})
						l.acknowledged++
					case r.code == 503 && l.refusalsExpected:
						l.refused++
					default:
						l.mu.Unlock()
						t.Errorf("%s: update: %d %s", label, r.code, r.body)
						return
					}
					l.mu.Unlock()
				}
			})
		}
	}
	return &wg
}
