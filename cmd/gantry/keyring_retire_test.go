package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/internal/stacktest"
	"github.com/gantry-dev/gantry/pkg/etcdtest"
	"github.com/gantry-dev/gantry/pkg/internaltls"
	"github.com/gantry-dev/gantry/pkg/kms"
	secretsadminv1 "github.com/gantry-dev/gantry/proto/secretsadmin/v1"
	"github.com/gantry-dev/gantry/services/secrets"
)

// adminClient dials the admin interface of a secrets service with the gateway's certificate of dir.
func adminClient(t *testing.T, dir, addr string) secretsadminv1.SecretsAdminServiceClient {
	t.Helper()
	creds, err := internaltls.GatewayClientCredentials(filepath.Join(dir, "tls"), internaltls.DefaultServerName)
	must(t, err)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	must(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return secretsadminv1.NewSecretsAdminServiceClient(cc)
}

// dataDirWith makes a data folder as gantry does and writes n credentials into it.
func dataDirWith(t *testing.T, n int) (dir string, ids []string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "data")
	startSecrets(t, dir)
	svc, closeSvc := openService(t, dir)
	defer closeSvc()
	for i := range n {
		name, doc := fmt.Sprintf("c%02d", i), "d"
		view, err := svc.CreateCredential(context.Background(), secrets.CredentialInput{Name: &name, Pairs: map[string]any{"k": "v"}, Documentation: &doc})
		must(t, err)
		ids = append(ids, view.Record.ID)
	}
	return dir, ids
}

// Issue 38, 1: a rewrap pass cut short after three batches leaves 57 of 60 revisions under version 1.
// Retiring version 1 then must be refused, naming what is still under it, and a dry run must not say
// that older versions can be retired: both decide from a scan of the records, not from a pass's tally
// (which counts every revision not rewrapped yet under the active version).
func TestRetireAfterAnInterruptedRewrapIsRefused(t *testing.T) {
	dir, ids := dataDirWith(t, 60)
	cfg := stacktest.Config(t)
	cfg.Target = stack.RoleSecrets
	cfg.DataDir = dir
	cfg.AuditStdout = io.Discard
	running := stacktest.Start(t, cfg)
	st := running.Stack
	addr := "--secrets-addr=" + st.SecretsAddr
	if code, out := keyring("rotate", "--data-dir", dir, "--key", kms.AliasMaster); code != 0 {
		t.Fatalf("rotate: exit %d\n%s", code, out)
	}
	must(t, st.Reload()) // SIGHUP
	// Three batches of one revision, then the pass stops (the operator's ^C).
	client := adminClient(t, dir, st.SecretsAddr)
	token := ""
	for range 3 {
		resp, err := client.Rewrap(context.Background(), &secretsadminv1.RewrapRequest{PageToken: token, BatchSize: 1})
		must(t, err)
		token = resp.GetNextPageToken()
	}

	code, out := keyring("retire", "--data-dir", dir, addr, "--key", kms.AliasMaster, "--version", "1")
	if code != 1 || !strings.Contains(out, "refused") || !strings.Contains(out, "57 revisions") {
		t.Fatalf("retire of version 1 with 57 revisions under it: exit %d, want 1 refused naming 57 revisions\n%s", code, out)
	}
	code, out = keyring("rewrap", "--data-dir", dir, addr, "--dry-run")
	if code != 1 || strings.Contains(out, "can be retired") || !strings.Contains(out, "57") {
		t.Fatalf("dry run after the interrupted pass: exit %d, want 1 naming 57 revisions left\n%s", code, out)
	}
	// A forced retire keeps the material: nothing becomes unreadable, destroying it is refused for
	// the same reason, and the retire is taken back.
	if code, out := keyring("retire", "--data-dir", dir, "--key", kms.AliasMaster, "--version", "1", "--force"); code != 0 {
		t.Fatalf("retire --force: exit %d\n%s", code, out)
	}
	must(t, st.Reload()) // the retired version still opens the key-check value, so the reload is taken
	if code, out := keyring("list", "--data-dir", dir); code != 0 || !strings.Contains(out, "1 (retired), 2 (active)") {
		t.Fatalf("list after retire --force: exit %d\n%s", code, out)
	}
	code, out = keyring("destroy", "--data-dir", dir, addr, "--key", kms.AliasMaster, "--version", "1")
	if code != 1 || !strings.Contains(out, "refused") || !strings.Contains(out, "57 revisions") {
		t.Fatalf("destroy of version 1 with 57 revisions under it: exit %d, want 1 refused naming 57 revisions\n%s", code, out)
	}
	if code, out := keyring("restore", "--data-dir", dir, "--key", kms.AliasMaster, "--version", "1"); code != 0 {
		t.Fatalf("restore: exit %d\n%s", code, out)
	}
	if code, out := keyring("destroy", "--data-dir", dir, addr, "--key", kms.AliasMaster, "--version", "1"); code != 1 || !strings.Contains(out, "retire it first") {
		t.Fatalf("destroy of a version that is not retired: exit %d\n%s", code, out)
	}
	// The whole pass, then the retire goes through.
	if code, out := keyring("rewrap", "--data-dir", dir, addr); code != 0 || !strings.Contains(out, "can be retired") {
		t.Fatalf("rewrap: exit %d\n%s", code, out)
	}
	if code, out := keyring("retire", "--data-dir", dir, addr, "--key", kms.AliasMaster, "--version", "1"); code != 0 {
		t.Fatalf("retire after the whole pass: exit %d\n%s", code, out)
	}
	// After a restart every credential reads.
	must(t, running.Stop())
	svc, closeSvc := openService(t, dir)
	defer closeSvc()
	for _, id := range ids {
		if _, err := svc.GetCredential(context.Background(), id, false); err != nil {
			t.Errorf("credential %s after the retire: %v", id, err)
		}
	}
}

// Issue 38, 2: two replicas on etcd, B never reloads its keyring after the activation (reload interval
// 0, no SIGHUP) and goes on wrapping under version 1. A rewrap through A must not say it is done, nor
// may retire go through, while B encrypts with version 1; and once B reloads, what it wrote under
// version 1 meanwhile (behind the pass's cursor) still blocks the retire until a rewrap moves it.
func TestRetireWaitsForEveryReplica(t *testing.T) {
	cluster := etcdtest.New(t, 1, zap.NewNop())
	dirA := filepath.Join(t.TempDir(), "a")
	a := startFleetReplica(t, dirA, cluster.Endpoints())
	dirB := filepath.Join(t.TempDir(), "b")
	must(t, os.MkdirAll(dirB, 0o700))
	for _, name := range []string{"keyring.json", "session.key"} {
		copyFile(t, filepath.Join(dirA, name), filepath.Join(dirB, name))
	}
	b := startFleetReplica(t, dirB, cluster.Endpoints(), func(cfg *stack.Config) { cfg.Secrets.KeyringReloadInterval = 0 })
	var ids []string
	for i := range 10 {
		resp := httpDo(t, "POST", a.rest+"/v1/credentials", fmt.Sprintf(`{"name":"c%d","documentation":"d","credential_pairs":{"n":"0"}}`, i))
		var created struct {
			ID string `json:"id"`
		}
		must(t, json.Unmarshal([]byte(resp), &created))
		ids = append(ids, created.ID)
	}
	writeThroughB := func(n int) {
		for _, id := range ids {
			httpDo(t, "PUT", b.rest+"/v1/credentials/"+id, fmt.Sprintf(`{"credential_pairs":{"n":"%d"}}`, n))
		}
	}
	v1 := activeOn(t, a)
	// Staged everywhere, activated on A; B holds the activated keyring file but never reloads it.
	if code, out := keyring("rotate", "--stage", "--data-dir", dirA, "--key", kms.AliasMaster); code != 0 {
		t.Fatalf("rotate --stage: exit %d\n%s", code, out)
	}
	copyFile(t, filepath.Join(dirA, "keyring.json"), filepath.Join(dirB, "keyring.json"))
	must(t, a.st.Reload())
	must(t, b.st.Reload())
	if code, out := keyring("activate", "--data-dir", dirA, "--key", kms.AliasMaster); code != 0 {
		t.Fatalf("activate: exit %d\n%s", code, out)
	}
	copyFile(t, filepath.Join(dirA, "keyring.json"), filepath.Join(dirB, "keyring.json"))
	must(t, a.st.Reload())
	v2 := activeOn(t, a)
	if v2 == v1 || activeOn(t, b) != v1 {
		t.Fatalf("A wraps under %s, B under %s; want A on the new version, B on %s", v2, activeOn(t, b), v1)
	}
	writeThroughB(1)

	addr := "--secrets-addr=" + a.st.SecretsAddr
	code, out := keyring("rewrap", "--data-dir", dirA, addr, "--batch", "3")
	t.Logf("rewrap while B wraps under version 1:\n%s", out)
	if code != 1 || strings.Contains(out, "can be retired") || !strings.Contains(out, b.st.SecretsAddr) {
		t.Fatalf("rewrap through A while B wraps under %s: exit %d, want 1 naming replica %s\n%s", v1, code, b.st.SecretsAddr, out)
	}
	code, out = keyring("retire", "--data-dir", dirA, addr, "--key", kms.AliasMaster, "--version", "1")
	if code != 1 || !strings.Contains(out, "refused") || !strings.Contains(out, b.st.SecretsAddr) {
		t.Fatalf("retire while B wraps under %s: exit %d, want 1 refused naming replica %s\n%s", v1, code, b.st.SecretsAddr, out)
	}
	// B writes behind the pass's cursor, then reloads: every replica is on version 2 now, but 10
	// revisions are still under version 1.
	writeThroughB(2)
	must(t, b.st.Reload())
	waitActive(t, b, v2)
	code, out = keyring("retire", "--data-dir", dirA, addr, "--key", kms.AliasMaster, "--version", "1")
	if code != 1 || !strings.Contains(out, "refused") || !strings.Contains(out, "10 revisions") {
		t.Fatalf("retire with B's writes under %s: exit %d, want 1 refused naming 10 revisions\n%s", v1, code, out)
	}
	if code, out := keyring("rewrap", "--data-dir", dirA, addr); code != 0 || !strings.Contains(out, "can be retired") {
		t.Fatalf("rewrap once B reloaded: exit %d\n%s", code, out)
	}
	if code, out := keyring("retire", "--data-dir", dirA, addr, "--key", kms.AliasMaster, "--version", "1"); code != 0 {
		t.Fatalf("retire after the rewrap: exit %d\n%s", code, out)
	}
}

// gantry check reads every record's key version and fails, naming the counts, when the keyring lacks
// one (issue 38: it used to check the key-check value only, and said ok over 57 revisions that answer
// 503).
func TestCheckNamesRecordsUnderAVersionTheKeyringLacks(t *testing.T) {
	dir, _ := dataDirWith(t, 5)
	ctx := context.Background()
	ring, err := kms.LoadKeyring(filepath.Join(dir, "keyring.json"), nil)
	must(t, err)
	if code, out := runCheckOutput(dir); code != 0 || !strings.Contains(out, "every record under a version the keyring holds") {
		t.Fatalf("gantry check of a fresh folder: exit %d\n%s", code, out)
	}
	_, err = ring.RotateKey(ctx, kms.AliasMaster)
	must(t, err)
	svc, closeSvc := openService(t, dir)
	_, err = svc.Rewrap(ctx, secrets.RewrapOptions{Limit: 1}) // the key-check value and one revision
	closeSvc()
	must(t, err)
	must(t, ring.RetireKeyVersion(ctx, kms.AliasMaster, 1))
	must(t, ring.DestroyKeyVersion(ctx, kms.AliasMaster, 1))
	code, out := runCheckOutput(dir)
	if code != 1 || !strings.Contains(out, "key versions") || !strings.Contains(out, "4 revisions, 0 archived under ") {
		t.Fatalf("gantry check with 4 revisions under a destroyed version: exit %d, want 1 naming them\n%s", code, out)
	}
}

func runCheckOutput(dir string) (int, string) {
	var out, errOut strings.Builder
	code := runCheck([]string{"-data-dir", dir}, &out, &errOut)
	return code, out.String() + errOut.String()
}
