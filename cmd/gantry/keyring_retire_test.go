package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/internal/stacktest"
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
