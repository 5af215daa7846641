package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/kms"
	secretsadminv1 "github.com/gantry-dev/gantry/proto/secretsadmin/v1"
	"github.com/gantry-dev/gantry/services/secrets"
)

// rewrapTotals sums the batches of a rewrap pass.
type rewrapTotals struct {
	scanned, rewrapped, current, changed, undecryptable int64
	undecryptableIDs                                    []string
	byVersion                                           map[string]int64
	active, keyCheck                                    string
}

func (t *rewrapTotals) add(r *secretsadminv1.RewrapResponse) {
	t.scanned += r.GetScanned()
	t.rewrapped += r.GetRewrapped()
	t.current += r.GetCurrent()
	t.changed += r.GetChanged()
	t.undecryptable += r.GetUndecryptable()
	t.undecryptableIDs = append(t.undecryptableIDs, r.GetUndecryptableIds()...)
	for v, n := range r.GetByKeyVersion() {
		t.byVersion[v] += n
	}
	t.active = r.GetActive()
	if r.GetKeyCheck() != "" {
		t.keyCheck = r.GetKeyCheck()
	}
}

// rewrapPass runs batches from token until the pass ends. On an error it returns the token of the
// batch that failed, from which the pass can resume. each, when not nil, sees every batch.
func rewrapPass(ctx context.Context, client secretsadminv1.SecretsAdminServiceClient, token string, batch int, dryRun bool, pause time.Duration,
	each func(n int, r *secretsadminv1.RewrapResponse)) (rewrapTotals, string, error) {
	totals := rewrapTotals{byVersion: map[string]int64{}}
	for n := 1; ; n++ {
		resp, err := client.Rewrap(ctx, &secretsadminv1.RewrapRequest{PageToken: token, BatchSize: int32(batch), DryRun: dryRun})
		if err != nil {
			return totals, token, err
		}
		totals.add(resp)
		if each != nil {
			each(n, resp)
		}
		if token = resp.GetNextPageToken(); token == "" {
			return totals, "", nil
		}
		if pause > 0 {
			select {
			case <-ctx.Done():
				return totals, token, ctx.Err()
			case <-time.After(pause):
			}
		}
	}
}

// dialAdmin connects to the running secrets service's admin interface.
func dialAdmin(conn *adminConnFlags) (secretsadminv1.SecretsAdminServiceClient, func(), error) {
	creds, err := conn.credentials()
	if err != nil {
		return nil, nil, fmt.Errorf("the gateway's certificate: %w", err)
	}
	cc, err := grpc.NewClient(conn.target(), grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, nil, err
	}
	return secretsadminv1.NewSecretsAdminServiceClient(cc), func() { _ = cc.Close() }, nil
}

// runKeyringRewrap wraps every credential revision's data key again under the active master key
// version, through the running secrets service, batch by batch, then counts what each version still
// wraps. Exit 0 when nothing is left under another version, 1 otherwise (or on an error, with the
// token to resume from), 2 on a usage error.
func runKeyringRewrap(args []string, stdout, stderr io.Writer) int {
	fs, dataDir := keyringFlags("rewrap", stderr)
	conn := registerAdminConnFlags(fs, dataDir)
	dryRun := fs.Bool("dry-run", false, "count what a rewrap would change; change nothing")
	batch := fs.Int("batch", secrets.DefaultRewrapBatch, fmt.Sprintf("revisions per call (1 to %d)", secrets.MaxRewrapBatch))
	resume := fs.String("resume", "", "continue a pass from the token an interrupted rewrap printed")
	pause := fs.Duration("pause", 0, "wait between batches (spreads the KMS and store load of a large store)")
	timeout := fs.Duration("timeout", 24*time.Hour, "bound of the whole pass")
	wait := fs.Duration("wait", 2*time.Minute, "how long to wait for the running service to reload a keyring whose active master key version differs from --data-dir's")
	masterKey := fs.String("kms-master-key", envOr("GANTRY_KMS_MASTER_KEY", envOr("KMS_MASTER_KEY", kms.AliasMaster)), "the master key gantry runs with (-kms-master-key)")
	if err := fs.Parse(args); err != nil {
		return exitCodeOfParse(err)
	}
	if fs.NArg() > 0 || *batch < 1 || *batch > secrets.MaxRewrapBatch || *pause < 0 || *timeout <= 0 || *wait < 0 || !conn.valid() {
		fmt.Fprintln(stderr, keyringUsage)
		return 2
	}
	client, closeConn, err := dialAdmin(conn)
	if err != nil {
		fmt.Fprintln(stderr, "gantry keyring rewrap:", err)
		return 1
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	if err := waitForActive(ctx, client, *dataDir, *masterKey, *wait, stdout); err != nil {
		fmt.Fprintln(stderr, "gantry keyring rewrap:", err)
		return 1
	}
	verb := "rewrapped"
	if *dryRun {
		verb = "to rewrap"
	}
	totals, failedAt, err := rewrapPass(ctx, client, *resume, *batch, *dryRun, *pause, func(n int, r *secretsadminv1.RewrapResponse) {
		fmt.Fprintf(stdout, "batch %d: scanned %d, %s %d, already current %d, changed meanwhile %d, undecryptable %d\n",
			n, r.GetScanned(), verb, r.GetRewrapped(), r.GetCurrent(), r.GetChanged(), r.GetUndecryptable())
	})
	if err != nil {
		fmt.Fprintf(stderr, "gantry keyring rewrap: %s\n", status.Convert(err).Message())
		if failedAt != "" || totals.scanned > 0 {
			fmt.Fprintf(stderr, "resume with: gantry keyring rewrap --resume %s (or run it again from the start: a rewrap is idempotent)\n", failedAt)
		}
		return 1
	}
	fmt.Fprintf(stdout, "done: scanned %d revisions, %s %d, already current %d, changed meanwhile %d, undecryptable %d; key-check value: %s\n",
		totals.scanned, verb, totals.rewrapped, totals.current, totals.changed, totals.undecryptable, totals.keyCheck)
	for _, id := range totals.undecryptableIDs {
		fmt.Fprintf(stderr, "undecryptable: %s\n", id)
	}
	if *dryRun {
		return reportRemaining(stdout, totals)
	}
	// Count again: what a concurrent writer or another pass changed shows up now, and what each
	// version wraps is what retire needs to know.
	after, _, err := rewrapPass(ctx, client, "", secrets.MaxRewrapBatch, true, 0, nil)
	if err != nil {
		fmt.Fprintf(stderr, "gantry keyring rewrap: counting after the pass: %s\n", status.Convert(err).Message())
		return 1
	}
	return reportRemaining(stdout, after)
}

// waitForActive waits until the running service wraps data keys under the master key version that
// the keyring of dataDir makes active, so a rewrap never moves data keys to a version the operator is
// about to retire. Without a local keyring (an operator's PKI, the keyring elsewhere) there is
// nothing to compare, and the pass uses the service's active version.
func waitForActive(ctx context.Context, client secretsadminv1.SecretsAdminServiceClient, dataDir, masterKey string, wait time.Duration, stdout io.Writer) error {
	ring, err := kms.LoadKeyring(filepath.Join(dataDir, "keyring.json"), nil)
	if err != nil {
		return nil
	}
	want, err := ring.ActiveKeyVersion(ctx, masterKey)
	if err != nil {
		return fmt.Errorf("the keyring of %s: %w", dataDir, err)
	}
	deadline := time.Now().Add(wait)
	for said := false; ; said = true {
		resp, err := client.Rewrap(ctx, &secretsadminv1.RewrapRequest{DryRun: true, BatchSize: 1})
		if err != nil {
			return fmt.Errorf("%s", status.Convert(err).Message())
		}
		if resp.GetActive() == want.String() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the running service wraps under %s, the keyring of %s under %s: copy the keyring to it and let it reload (-keyring-reload-interval, or SIGHUP)", resp.GetActive(), dataDir, want)
		}
		if !said {
			fmt.Fprintf(stdout, "waiting for the running service to reload its keyring (it wraps under %s; %s here)\n", resp.GetActive(), want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// reportRemaining prints what each key version wraps and whether older versions can be retired.
func reportRemaining(stdout io.Writer, t rewrapTotals) int {
	fmt.Fprintf(stdout, "active: %s\n", t.active)
	for _, line := range sortedCounts(t.byVersion) {
		fmt.Fprintf(stdout, "  %s revisions\n", line)
	}
	left := t.undecryptable
	for v, n := range t.byVersion {
		if v != t.active {
			left += n
		}
	}
	if t.keyCheck == "rewrapped" {
		left++
	}
	if left > 0 {
		fmt.Fprintf(stdout, "%d left under other versions (or undecryptable): run gantry keyring rewrap (again) before retiring a version\n", left)
		return 1
	}
	fmt.Fprintln(stdout, "every revision and the key-check value are under the active version: older master key versions can be retired (gantry keyring retire). Archived credentials keep the versions they were sealed under.")
	return 0
}

// runKeyringRetire deletes a key version from the keyring file. For the master key it first asks the
// running secrets service (a dry-run rewrap pass) whether any revision or the key-check value is
// still wrapped under that version, and refuses if so; --force skips the check.
func runKeyringRetire(args []string, stdout, stderr io.Writer) int {
	fs, dataDir := keyringFlags("retire", stderr)
	conn := registerAdminConnFlags(fs, dataDir)
	key := fs.String("key", "", "key alias or id to retire a version of")
	version := fs.Int("version", 0, "version to retire")
	force := fs.Bool("force", false, "retire without asking the running service (what the version still wraps becomes unreadable)")
	masterKey := fs.String("kms-master-key", envOr("GANTRY_KMS_MASTER_KEY", envOr("KMS_MASTER_KEY", kms.AliasMaster)), "the master key gantry runs with (-kms-master-key)")
	if err := fs.Parse(args); err != nil {
		return exitCodeOfParse(err)
	}
	if fs.NArg() > 0 || *key == "" || *version < 1 || !conn.valid() {
		fmt.Fprintln(stderr, keyringUsage)
		return 2
	}
	ring, ok := loadExistingKeyring(*dataDir, stderr)
	if !ok {
		return 1
	}
	ctx := context.Background()
	target, err := ring.ResolveKeyID(ctx, *key)
	if err != nil {
		fmt.Fprintln(stderr, "gantry keyring:", err)
		return 1
	}
	master, _ := ring.ResolveKeyID(ctx, *masterKey)
	if target == master && !*force {
		if code := checkNothingUnder(ctx, conn, kms.KeyVersion{KeyID: target, Version: uint32(*version)}, stderr); code != 0 {
			return code
		}
	}
	if err := ring.RetireKeyVersion(ctx, *key, *version); err != nil {
		fmt.Fprintln(stderr, "gantry keyring:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: version %d retired\n", *key, *version)
	if target != master {
		fmt.Fprintln(stdout, "tokens made with it no longer verify (kmsauth tokens live at most -auth-token-max-lifetime)")
	}
	fmt.Fprintln(stdout, "next: copy keyring.json to every replica (each reloads it by itself, or on SIGHUP), and back it up")
	return 0
}

// checkNothingUnder asks the running service whether anything is still wrapped under version.
func checkNothingUnder(ctx context.Context, conn *adminConnFlags, version kms.KeyVersion, stderr io.Writer) int {
	client, closeConn, err := dialAdmin(conn)
	if err != nil {
		fmt.Fprintln(stderr, "gantry keyring retire:", err)
		return 1
	}
	defer closeConn()
	totals, _, err := rewrapPass(ctx, client, "", secrets.MaxRewrapBatch, true, 0, nil)
	if err != nil {
		fmt.Fprintf(stderr, "gantry keyring retire: cannot ask the running secrets service what %s still wraps: %s (--force retires without asking)\n",
			version, status.Convert(err).Message())
		return 1
	}
	var problems []string
	if n := totals.byVersion[version.String()]; n > 0 {
		problems = append(problems, fmt.Sprintf("%d revisions are still wrapped under it", n))
	}
	if totals.active == version.String() {
		problems = append(problems, "the running service still encrypts with it (activate another version and let every replica reload first)")
	}
	if totals.keyCheck == "rewrapped" {
		problems = append(problems, "the key-check value is not under the active version yet")
	}
	if len(problems) > 0 {
		fmt.Fprintf(stderr, "gantry keyring retire: refused: %s; run gantry keyring rewrap first\n", strings.Join(problems, "; "))
		return 1
	}
	return 0
}
