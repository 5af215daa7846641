package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/internal/stacktest"
	"github.com/gantry-dev/gantry/pkg/etcdtest"
	"github.com/gantry-dev/gantry/pkg/internaltls"
	"github.com/gantry-dev/gantry/pkg/kms"
	secretsadminv1 "github.com/gantry-dev/gantry/proto/secretsadmin/v1"
)

// keyring runs gantry keyring and returns its exit code and output.
func keyring(args ...string) (int, string) {
	var out, errOut bytes.Buffer
	code := runKeyring(args, &out, &errOut)
	return code, out.String() + errOut.String()
}

// fleetReplica is one secrets replica with its own gateway, on the shared etcd store.
type fleetReplica struct {
	st   *stack.Stack
	dir  string
	rest string
}

func startFleetReplica(t *testing.T, dir string, endpoints []string, adjust ...func(*stack.Config)) *fleetReplica {
	t.Helper()
	cfg := stacktest.Config(t)
	cfg.Target = "secrets,gateway"
	cfg.DataDir = dir
	cfg.Secrets.Store = "etcd"
	cfg.Etcd.Endpoints = endpoints
	cfg.Etcd.Prefix = "/fleet/"
	cfg.Etcd.RequestTimeout = 10 * time.Second
	cfg.Secrets.Auth.UseAuth = false // the anonymous principal may do everything: this test is about keys
	cfg.Secrets.Limits.WriteRate = 0 // the load writes as one principal
	cfg.Secrets.KeyringReloadInterval = 100 * time.Millisecond
	cfg.Secrets.SealedScanInterval = 0
	for _, f := range adjust {
		f(&cfg)
	}
	st := stacktest.Start(t, cfg).Stack
	return &fleetReplica{st: st, dir: dir, rest: "http://" + st.GatewayAddr}
}

// copyFile copies the keyring (or session key) from one replica's folder to another's, replacing it
// whole as an operator's tooling (or a Kubernetes Secret update) does.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	must(t, err)
	must(t, os.WriteFile(to+".tmp", data, 0o600))
	must(t, os.Rename(to+".tmp", to))
}

// activeOn asks a replica's admin interface which master key version it wraps data keys under.
func activeOn(t *testing.T, r *fleetReplica) string {
	t.Helper()
	creds, err := internaltls.GatewayClientCredentials(filepath.Join(r.dir, "tls"), internaltls.DefaultServerName)
	must(t, err)
	cc, err := grpc.NewClient(r.st.SecretsAddr, grpc.WithTransportCredentials(creds))
	must(t, err)
	defer cc.Close()
	resp, err := secretsadminv1.NewSecretsAdminServiceClient(cc).Rewrap(context.Background(), &secretsadminv1.RewrapRequest{DryRun: true, BatchSize: 1})
	must(t, err)
	return resp.GetActive()
}

// waitActive waits until the replica has reloaded its keyring and wraps under want.
func waitActive(t *testing.T, r *fleetReplica, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for got := activeOn(t, r); got != want; got = activeOn(t, r) {
		if time.Now().After(deadline) {
			t.Fatalf("replica %s still wraps under %s, want %s", r.dir, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKeyRotationAcrossReplicasUnderLoad is the documented fleet procedure (docs/operations.md, Key
// rotation) run with the real CLI against two replicas sharing etcd, while readers and writers go
// through both: stage a new version, distribute the keyring, activate, distribute, rewrap online,
// retire the old version, distribute. Not one request may fail, every credential must read back from
// both replicas after a restart, and retiring before the rewrap must be refused.
func TestKeyRotationAcrossReplicasUnderLoad(t *testing.T) {
	cluster := etcdtest.New(t, 1, zap.NewNop())
	dirA := filepath.Join(t.TempDir(), "a")
	a := startFleetReplica(t, dirA, cluster.Endpoints())
	dirB := filepath.Join(t.TempDir(), "b")
	must(t, os.MkdirAll(dirB, 0o700))
	for _, name := range []string{"keyring.json", "session.key"} {
		copyFile(t, filepath.Join(dirA, name), filepath.Join(dirB, name))
	}
	b := startFleetReplica(t, dirB, cluster.Endpoints())
	replicas := []*fleetReplica{a, b}

	var ids []string
	for i := range 12 {
		body := fmt.Sprintf(`{"name":"c%d","documentation":"d","credential_pairs":{"n":"0"}}`, i)
		resp := httpDo(t, "POST", a.rest+"/v1/credentials", body)
		var created struct {
			ID string `json:"id"`
		}
		must(t, json.Unmarshal([]byte(resp), &created))
		ids = append(ids, created.ID)
		httpDo(t, "PUT", b.rest+"/v1/credentials/"+created.ID, `{"credential_pairs":{"n":"1"}}`)
	}

	// The load: a reader and a writer on each replica, until stop.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ok, failed atomic.Int64
	var failures sync.Map
	for _, r := range replicas {
		for _, write := range []bool{false, true} {
			wg.Go(func() {
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					id := ids[rand.IntN(len(ids))]
					method, body := "GET", ""
					if write {
						method, body = "PUT", fmt.Sprintf(`{"credential_pairs":{"n":"%d"}}`, n)
					}
					code, text := httpCode(method, r.rest+"/v1/credentials/"+id, body)
					if code == http.StatusOK && (write || strings.Contains(text, `"credential_pairs":{"n":"`)) {
						ok.Add(1)
					} else {
						failed.Add(1)
						failures.Store(fmt.Sprintf("%s %s: %d %.200s", method, id, code, text), true)
					}
				}
			})
		}
	}
	stopLoad := func() {
		close(stop)
		wg.Wait()
	}
	defer func() {
		select {
		case <-stop:
		default:
			stopLoad()
		}
	}()

	ctx := context.Background()
	ringA := func() *kms.Keyring {
		ring, err := kms.LoadKeyring(filepath.Join(dirA, "keyring.json"), nil)
		must(t, err)
		return ring
	}
	v1, err := ringA().ActiveKeyVersion(ctx, kms.AliasMaster)
	must(t, err)
	addr := "--secrets-addr=" + a.st.SecretsAddr

	// 1. Stage on A; every replica must decrypt the new version before any encrypts with it.
	if code, out := keyring("rotate", "--stage", "--data-dir", dirA); code != 0 {
		t.Fatalf("rotate --stage: exit %d\n%s", code, out)
	}
	copyFile(t, filepath.Join(dirA, "keyring.json"), filepath.Join(dirB, "keyring.json"))
	for _, r := range replicas {
		must(t, r.st.Reload()) // SIGHUP; the reload interval would pick it up too
	}
	// 2. Activate; B picks the copy up by itself (-keyring-reload-interval).
	if code, out := keyring("activate", "--data-dir", dirA); code != 0 {
		t.Fatalf("activate: exit %d\n%s", code, out)
	}
	v2, err := ringA().ActiveKeyVersion(ctx, kms.AliasMaster)
	must(t, err)
	if v2.Version != v1.Version+1 {
		t.Fatalf("active after activate: %v, want version %d", v2, v1.Version+1)
	}
	copyFile(t, filepath.Join(dirA, "keyring.json"), filepath.Join(dirB, "keyring.json"))
	waitActive(t, a, v2.String())
	waitActive(t, b, v2.String())

	// 3. Retiring version 1 now is refused: revisions are still wrapped under it.
	if code, out := keyring("retire", "--data-dir", dirA, addr, "--key", kms.AliasMaster, "--version", fmt.Sprint(v1.Version)); code != 1 || !strings.Contains(out, "refused") {
		t.Fatalf("retire before the rewrap: exit %d, want 1 refused\n%s", code, out)
	}
	// 4. Rewrap online, in small batches, while both replicas serve.
	code, out := keyring("rewrap", "--data-dir", dirA, addr, "--batch", "5")
	t.Logf("gantry keyring rewrap:\n%s", out)
	if code != 0 || !strings.Contains(out, "key-check value: rewrapped") || !strings.Contains(out, "older master key versions can be retired") {
		t.Fatalf("rewrap: exit %d\n%s", code, out)
	}
	// 5. Retire version 1, destroy it (the same checks again) and distribute.
	if code, out := keyring("retire", "--data-dir", dirA, addr, "--key", kms.AliasMaster, "--version", fmt.Sprint(v1.Version)); code != 0 {
		t.Fatalf("retire after the rewrap: exit %d\n%s", code, out)
	}
	if code, out := keyring("destroy", "--data-dir", dirA, addr, "--key", kms.AliasMaster, "--version", fmt.Sprint(v1.Version)); code != 0 {
		t.Fatalf("destroy after the retire: exit %d\n%s", code, out)
	}
	copyFile(t, filepath.Join(dirA, "keyring.json"), filepath.Join(dirB, "keyring.json"))
	for _, r := range replicas {
		must(t, r.st.Reload())
	}
	time.Sleep(300 * time.Millisecond) // more load on the final keyring
	stopLoad()

	t.Logf("requests during the rotation: %d ok, %d failed", ok.Load(), failed.Load())
	failures.Range(func(k, _ any) bool { t.Errorf("failed: %s", k); return true })
	if ok.Load() < 50 {
		t.Errorf("only %d requests ran during the rotation", ok.Load())
	}
	master := fmt.Sprintf("%s  %s\n  versions: %d (active)\n", kms.AliasMaster, v2.KeyID, v2.Version)
	if code, out := keyring("list", "--data-dir", dirB); code != 0 || !strings.Contains(out, master) {
		t.Errorf("B's keyring after the retire: exit %d\n%s", code, out)
	}
	// A fresh replica on the final keyring (nothing cached) reads every credential; its start checks
	// the store's key-check value, which the rewrap moved to version 2.
	dirC := filepath.Join(t.TempDir(), "c")
	must(t, os.MkdirAll(dirC, 0o700))
	for _, name := range []string{"keyring.json", "session.key"} {
		copyFile(t, filepath.Join(dirA, name), filepath.Join(dirC, name))
	}
	c := startFleetReplica(t, dirC, cluster.Endpoints())
	for _, id := range ids {
		if code, text := httpCode("GET", c.rest+"/v1/credentials/"+id, ""); code != http.StatusOK {
			t.Errorf("credential %s on a fresh replica: %d %s", id, code, text)
		}
	}
}

func httpCode(method, url, body string) (int, string) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

func httpDo(t *testing.T, method, url, body string) string {
	t.Helper()
	code, text := httpCode(method, url, body)
	if code != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, url, code, text)
	}
	return text
}

// The rewrap and retire commands refuse what would do harm, saying why: bad flags (2), a certificate
// other than the gateway's, a running service that has not reloaded the keyring yet, a retire of the
// version the service still encrypts with.
func TestKeyringRewrapRefusals(t *testing.T) {
	dir, _ := newDataDir(t)
	st := runSecrets(t, dir, io.Discard)
	addr := "--secrets-addr=" + st.SecretsAddr
	for _, args := range [][]string{
		{"rewrap", "--batch", "0"}, {"rewrap", "--batch", "2001"}, {"rewrap", "extra"},
		{"retire", "--key", kms.AliasMaster}, {"retire", "--version", "1"}, {"activate", "--version", "-1"},
		{"rotate", "extra"}, {"list", "extra"}, {"nope"},
	} {
		if code, out := keyring(args...); code != 2 {
			t.Errorf("gantry keyring %v: exit %d, want 2\n%s", args, code, out)
		}
	}
	tls := filepath.Join(dir, "tls")
	code, out := keyring("rewrap", "--data-dir", dir, addr, "--grpc-tls-ca-file", filepath.Join(tls, "ca.crt"),
		"--grpc-tls-cert-file", filepath.Join(tls, "client.crt"), "--grpc-tls-key-file", filepath.Join(tls, "client.key"))
	if code != 1 || !strings.Contains(out, "only with the gateway's certificate") {
		t.Errorf("rewrap with client.crt: exit %d, want 1 naming the gateway's certificate\n%s", code, out)
	}
	// Rotated here, not reloaded there (the reload interval is 30 s): the rewrap waits, then says what to do.
	if code, out := keyring("rotate", "--data-dir", dir, "--key", kms.AliasMaster); code != 0 {
		t.Fatalf("rotate: exit %d\n%s", code, out)
	}
	code, out = keyring("rewrap", "--data-dir", dir, addr, "--wait", "1s")
	if code != 1 || !strings.Contains(out, "copy the keyring to it and let it reload") {
		t.Errorf("rewrap before the service reloaded: exit %d\n%s", code, out)
	}
	code, out = keyring("retire", "--data-dir", dir, addr, "--key", kms.AliasMaster, "--version", "1")
	if code != 1 || !strings.Contains(out, "still encrypts with it") {
		t.Errorf("retire of the version the service encrypts with: exit %d\n%s", code, out)
	}
	must(t, st.Reload())
	if code, out := keyring("rewrap", "--data-dir", dir, addr, "--dry-run"); code != 1 || !strings.Contains(out, "to rewrap 1") {
		t.Errorf("dry run after the reload: exit %d, want 1 with one revision to rewrap\n%s", code, out)
	}
	if code, out := keyring("rewrap", "--data-dir", dir, addr); code != 0 {
		t.Errorf("rewrap: exit %d\n%s", code, out)
	}
	if code, out := keyring("retire", "--data-dir", dir, addr, "--key", kms.AliasMaster, "--version", "1"); code != 0 {
		t.Errorf("retire after the rewrap: exit %d\n%s", code, out)
	}
}
