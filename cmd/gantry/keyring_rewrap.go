package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
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
	k := newKeyringCommand("rewrap", "data folder holding keyring.json")
	fs, dataDir := k.fs, &k.cfg.DataDir
	conn := k.withAdminConn()
	dryRun := fs.Bool("dry-run", false, "count what a rewrap would change; change nothing")
	batch := fs.Int("batch", secrets.DefaultRewrapBatch, fmt.Sprintf("revisions per call (1 to %d)", secrets.MaxRewrapBatch))
	resume := fs.String("resume", "", "continue a pass from the token an interrupted rewrap printed")
	pause := fs.Duration("pause", 0, "wait between batches (spreads the KMS and store load of a large store)")
	timeout := fs.Duration("timeout", 24*time.Hour, "bound of the whole pass")
	wait := fs.Duration("wait", 2*time.Minute, "how long to wait for the running service to reload a keyring whose active master key version differs from -data-dir's")
	k.withMasterKey()
	masterKey := &k.cfg.Secrets.KMSMasterKey
	if code, ok := k.parse(args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 || *batch < 1 || *batch > secrets.MaxRewrapBatch || *pause < 0 || *timeout <= 0 || *wait < 0 || !conn.valid() {
		return k.usageError(stderr)
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
			fmt.Fprintf(stderr, "resume with: gantry keyring rewrap -resume %s (or run it again from the start: a rewrap is idempotent)\n", failedAt)
		}
		return 1
	}
	fmt.Fprintf(stdout, "done: scanned %d revisions, %s %d, already current %d, changed meanwhile %d, undecryptable %d; key-check value: %s\n",
		totals.scanned, verb, totals.rewrapped, totals.current, totals.changed, totals.undecryptable, totals.keyCheck)
	for _, id := range totals.undecryptableIDs {
		fmt.Fprintf(stderr, "undecryptable: %s\n", id)
	}
	// Done is decided from a scan of the records and from every running replica, never from this
	// pass's tally: the pass cannot see what another replica wrote behind its cursor, nor a replica
	// that still wraps under an older version.
	use, err := client.KeyUse(ctx, &secretsadminv1.KeyUseRequest{})
	if err != nil {
		fmt.Fprintf(stderr, "gantry keyring rewrap: scanning the store after the pass: %s\n", status.Convert(err).Message())
		return 1
	}
	return reportKeyUse(stdout, use)
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

// reportKeyUse prints what the scan found under each key version and what every replica encrypts
// with, and says whether every record is under the active version: exit 0 only then.
func reportKeyUse(stdout io.Writer, use *secretsadminv1.KeyUseResponse) int {
	active := use.GetActive()
	fmt.Fprintf(stdout, "active: %s\n", active)
	for _, line := range sortedCounts(use.GetRevisions()) {
		fmt.Fprintf(stdout, "  %s revisions\n", line)
	}
	for _, line := range sortedCounts(use.GetArchived()) {
		fmt.Fprintf(stdout, "  %s archived credentials\n", line)
	}
	if use.GetKeyCheck() != "" {
		fmt.Fprintf(stdout, "  key-check value: %s\n", use.GetKeyCheck())
	}
	var left []string
	for v, n := range use.GetRevisions() {
		if v != active {
			left = append(left, fmt.Sprintf("%d revisions under %s", n, v))
		}
	}
	if kc := use.GetKeyCheck(); kc != "" && kc != active {
		left = append(left, "the key-check value under "+kc)
	}
	for _, r := range use.GetReplicas() {
		fmt.Fprintf(stdout, "  replica %s encrypts with %s\n", r.GetName(), r.GetActive())
		if r.GetActive() != active {
			left = append(left, fmt.Sprintf("replica %s still encrypts with %s (copy the keyring to it and let it reload: -keyring-reload-interval, or SIGHUP)", r.GetName(), r.GetActive()))
		}
	}
	slices.Sort(left)
	if len(left) > 0 {
		fmt.Fprintf(stdout, "not done: %s; run gantry keyring rewrap (again) before retiring a version\n", strings.Join(left, "; "))
		return 1
	}
	fmt.Fprintln(stdout, "every revision and the key-check value are under the active version, and every running replica encrypts with it: older master key versions can be retired (gantry keyring retire).")
	if n := archivedNotUnder(use, active); n > 0 {
		fmt.Fprintf(stdout, "%d archived credentials keep older versions (a rewrap does not move them): gantry keyring destroy refuses a version they are under.\n", n)
	}
	return 0
}

// archivedNotUnder counts the archived credentials under another version than version.
func archivedNotUnder(use *secretsadminv1.KeyUseResponse, version string) int64 {
	var n int64
	for v, c := range use.GetArchived() {
		if v != version {
			n += c
		}
	}
	return n
}

// runKeyringRetire marks a key version retired: never used to encrypt again, still able to decrypt
// (gantry keyring restore takes it back; gantry keyring destroy deletes it). For the master key it
// first asks the running secrets service for a scan of the store and every running replica's keys
// (KeyUse), and refuses while any revision or the key-check value is under that version or any
// replica encrypts with it; -force skips the check.
func runKeyringRetire(args []string, stdout, stderr io.Writer) int {
	k := newKeyringCommand("retire", "data folder holding keyring.json")
	fs, dataDir := k.fs, &k.cfg.DataDir
	conn := k.withAdminConn()
	key := fs.String("key", "", "key alias or id to retire a version of")
	version := fs.Int("version", 0, "version to retire")
	force := fs.Bool("force", false, "retire without asking the running service (the version still decrypts: gantry keyring restore takes a retire back)")
	k.withMasterKey()
	masterKey := &k.cfg.Secrets.KMSMasterKey
	if code, ok := k.parse(args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 || *key == "" || *version < 1 || !conn.valid() {
		return k.usageError(stderr)
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
		if code := checkNothingUnder(ctx, conn, "retire", kms.KeyVersion{KeyID: target, Version: uint32(*version)}, false, stderr); code != 0 {
			return code
		}
	}
	if err := ring.RetireKeyVersion(ctx, *key, *version); err != nil {
		fmt.Fprintln(stderr, "gantry keyring:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: version %d retired (never encrypts again; still decrypts: gantry keyring restore takes it back, gantry keyring destroy deletes it)\n", *key, *version)
	if target != master {
		fmt.Fprintln(stdout, "tokens made with it still verify until it is destroyed (kmsauth tokens live at most -auth-token-max-lifetime)")
	}
	fmt.Fprintln(stdout, "next: copy keyring.json to every replica (each reloads it by itself, or on SIGHUP), and back it up")
	return 0
}

// runKeyringRestore takes back the retire of a key version.
func runKeyringRestore(args []string, stdout, stderr io.Writer) int {
	k := newKeyringCommand("restore", "data folder holding keyring.json")
	fs, dataDir := k.fs, &k.cfg.DataDir
	key := fs.String("key", "", "key alias or id to restore a retired version of")
	version := fs.Int("version", 0, "retired version to restore")
	if code, ok := k.parse(args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 || *key == "" || *version < 1 {
		return k.usageError(stderr)
	}
	ring, ok := loadExistingKeyring(*dataDir, stderr)
	if !ok {
		return 1
	}
	if err := ring.RestoreKeyVersion(context.Background(), *key, *version); err != nil {
		fmt.Fprintln(stderr, "gantry keyring:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: version %d restored (no longer retired; gantry keyring activate can make it the active version again)\n", *key, *version)
	fmt.Fprintln(stdout, "next: copy keyring.json to every replica (each reloads it by itself, or on SIGHUP)")
	return 0
}

// runKeyringDestroy deletes the material of a retired key version, for good. For the master key it
// repeats retire's check first (a scan of the store, archived credentials included, and every running
// replica's keys) and refuses if anything is under the version or any replica encrypts with it;
// there is no -force.
func runKeyringDestroy(args []string, stdout, stderr io.Writer) int {
	k := newKeyringCommand("destroy", "data folder holding keyring.json")
	fs, dataDir := k.fs, &k.cfg.DataDir
	conn := k.withAdminConn()
	key := fs.String("key", "", "key alias or id to destroy a retired version of")
	version := fs.Int("version", 0, "retired version to destroy")
	k.withMasterKey()
	masterKey := &k.cfg.Secrets.KMSMasterKey
	if code, ok := k.parse(args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 || *key == "" || *version < 1 || !conn.valid() {
		return k.usageError(stderr)
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
	if !isRetired(ring, target, *version) {
		fmt.Fprintf(stderr, "gantry keyring destroy: refused: version %d of %s is not retired; retire it first (gantry keyring retire)\n", *version, *key)
		return 1
	}
	master, _ := ring.ResolveKeyID(ctx, *masterKey)
	if target == master {
		if code := checkNothingUnder(ctx, conn, "destroy", kms.KeyVersion{KeyID: target, Version: uint32(*version)}, true, stderr); code != 0 {
			return code
		}
	}
	if err := ring.DestroyKeyVersion(ctx, *key, *version); err != nil {
		fmt.Fprintln(stderr, "gantry keyring:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: version %d destroyed: what it encrypted no longer decrypts\n", *key, *version)
	fmt.Fprintln(stdout, "next: copy keyring.json to every replica (each reloads it by itself, or on SIGHUP); backups of the keyring still hold the version")
	return 0
}

// isRetired reports whether version of the key keyID is in the keyring and retired.
func isRetired(ring *kms.Keyring, keyID string, version int) bool {
	for _, k := range ring.Keys() {
		if k.KeyID == keyID {
			return slices.Contains(k.Retired, version)
		}
	}
	return false
}

// checkNothingUnder asks the running service for a scan of the store and of every running replica's
// keys (KeyUse), and refuses (exit 1, saying why) while any revision or the key-check value is under
// version, or any replica encrypts with it; withArchived counts archived credentials too (destroy:
// they would become unreadable for good).
func checkNothingUnder(ctx context.Context, conn *adminConnFlags, verb string, version kms.KeyVersion, withArchived bool, stderr io.Writer) int {
	client, closeConn, err := dialAdmin(conn)
	if err != nil {
		fmt.Fprintf(stderr, "gantry keyring %s: %v\n", verb, err)
		return 1
	}
	defer closeConn()
	use, err := client.KeyUse(ctx, &secretsadminv1.KeyUseRequest{})
	if err != nil {
		fmt.Fprintf(stderr, "gantry keyring %s: cannot ask the running secrets service what %s still wraps: %s\n", verb, version, status.Convert(err).Message())
		return 1
	}
	var problems []string
	v := version.String()
	if n := use.GetRevisions()[v]; n > 0 {
		problems = append(problems, fmt.Sprintf("%d revisions are still wrapped under it", n))
	}
	if n := use.GetArchived()[v]; n > 0 && withArchived {
		problems = append(problems, fmt.Sprintf("%d archived credentials are still wrapped under it", n))
	}
	if n := use.GetChanges()[v]; n > 0 && withArchived {
		problems = append(problems, fmt.Sprintf("%d pending change requests hold new pairs under it (let them be decided or expire)", n))
	}
	if use.GetKeyCheck() == v {
		problems = append(problems, "the key-check value is still wrapped under it")
	}
	for _, r := range use.GetReplicas() {
		if r.GetActive() == v {
			problems = append(problems, fmt.Sprintf("replica %s still encrypts with it (activate another version, copy the keyring to every replica and let each reload first)", r.GetName()))
		}
	}
	if len(problems) > 0 {
		fmt.Fprintf(stderr, "gantry keyring %s: refused: %s; run gantry keyring rewrap first\n", verb, strings.Join(problems, "; "))
		return 1
	}
	return 0
}
