package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/pkg/internaltls"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/secretfile"
	"github.com/gantry-dev/gantry/services/chat/queue/boltqueue"
	"github.com/gantry-dev/gantry/services/secrets"
	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/boltstore"
)

// The offline tools of a data folder (gantry check, gantry backup) live here because this package
// owns the folder's layout; they run while gantry is stopped and never change the folder.

// CheckOptions tune CheckDataDir.
type CheckOptions struct {
	// NoConsistency skips the consistency check, which reads the whole database file.
	NoConsistency bool
	// KMS is the key provider gantry runs with, as its -kms setting: "local" (or "") checks
	// keyring.json and that it decrypts the store; "aws" skips both, an offline tool cannot ask AWS.
	KMS string
	// LockTimeout bounds the wait for the database file lock; 0 means boltdb.DefaultTimeout.
	LockTimeout time.Duration
	// TLSDir is the internal TLS folder gantry runs with (-grpc-tls-dir); "" means dir/tls.
	TLSDir string
	// Store is the store gantry runs with (-store): "bolt" (or "") or "etcd", whose folder has no
	// database, and whose backup folder holds an etcd snapshot instead (BackupEtcd).
	Store string
	// EtcdPrefix is -etcd-prefix, for Store "etcd"; "" is the default.
	EtcdPrefix string
}

// CheckResult is the outcome of one check of a data folder.
type CheckResult struct {
	// Name says what was checked, e.g. "secrets.db schema".
	Name string
	// Err is why the check failed, with what to do; nil when it passed or was skipped.
	Err error
	// Detail says what passed, or why the check was skipped.
	Detail string
	// Skipped is set for a check that did not run (see Detail); it does not fail the folder.
	Skipped bool
}

// CheckFailed reports whether any result failed.
func CheckFailed(results []CheckResult) bool {
	for _, r := range results {
		if r.Err != nil {
			return true
		}
	}
	return false
}

// CheckDataDir checks, read-only, that the data folder dir can start gantry with the data it holds,
// refusing every folder the start refuses: the database file (the quick checks, opened read-only
// under a shared lock, then its consistency and schema version), the keyring file, that it decrypts
// the store and, once it has protected a store (kms.KeyringUse), that the store is not empty, the
// session key, the chat queue file (as the database) and the internal TLS folder (the CA and
// certificates load, keys private, leaves signed by the CA). It returns one result per check, in that
// order; a check whose input failed is reported skipped. It never creates or writes a file, and fails
// the database checks at once (boltdb.ErrLocked) while a gantry holds the database.
func CheckDataDir(ctx context.Context, dir string, opts CheckOptions) []CheckResult {
	if opts.Store == "etcd" {
		return checkEtcdFolder(ctx, dir, opts)
	}
	store, err := openStoreReadOnly(filepath.Join(dir, databaseFile), opts.LockTimeout)
	if err == nil {
		defer store.Close()
	}
	results, readable := checkDatabase(store, err, opts)
	ring, keyringResult := checkKeyring(dir, opts.KMS)
	keys := checkKeysMatch(ctx, dir, opts, store, readable, ring)
	versions := CheckResult{Name: "key versions"}
	switch {
	case keys.Skipped || keys.Err != nil:
		versions.Skipped, versions.Detail = true, "the keys did not match the store"
	default:
		versions = checkKeyVersions(ctx, store, ring)
	}
	return append(results, keyringResult, keys, versions, checkSessionKey(dir), checkChatQueue(dir, opts), checkTLSDir(dir, opts))
}

// checkDatabase is the database's checks: that it opened (openErr), its consistency and its schema
// version. readable is false when it did not open or its consistency check failed: reading on could
// crash on a damaged page.
func checkDatabase(store *boltstore.Store, openErr error, opts CheckOptions) (results []CheckResult, readable bool) {
	if openErr != nil {
		return []CheckResult{
			{Name: databaseFile, Err: openErr},
			{Name: databaseFile + " consistency", Skipped: true, Detail: "the database did not open"},
			{Name: databaseFile + " schema", Skipped: true, Detail: "the database did not open"},
		}, false
	}
	results = append(results, CheckResult{Name: databaseFile, Detail: "opened read-only; meta pages and length verify"})
	readable = true
	switch {
	case opts.NoConsistency:
		results = append(results, CheckResult{Name: databaseFile + " consistency", Skipped: true, Detail: "-no-consistency"})
	default:
		r := CheckResult{Name: databaseFile + " consistency", Detail: "every key and page read"}
		if err := store.CheckConsistency(); err != nil {
			r.Err = fmt.Errorf("%w; restore the data folder from a backup", err)
			readable = false
		}
		results = append(results, r)
	}
	r := CheckResult{Name: databaseFile + " schema"}
	if !readable {
		r.Skipped, r.Detail = true, "the database is damaged"
	} else if v, err := store.SchemaVersion(); err != nil {
		r.Err = err
	} else {
		r.Detail = fmt.Sprintf("version %d", v)
	}
	return append(results, r), readable
}

// checkKeysMatch checks that the keyring decrypts the store and, once it has protected a store
// (kms.KeyringUse), that the store is not empty, as the start does; store is nil when the database
// did not open, ring when the keyring did not load.
func checkKeysMatch(ctx context.Context, dir string, opts CheckOptions, store *boltstore.Store, readable bool, ring *kms.Keyring) CheckResult {
	keys := CheckResult{Name: "keys match the store"}
	switch {
	case opts.KMS == "aws":
		keys.Skipped, keys.Detail = true, "-kms=aws: gantry checks the AWS master key against the store when it starts"
	case store == nil:
		keys.Skipped, keys.Detail = true, "the database did not open"
	case !readable:
		keys.Skipped, keys.Detail = true, "the database is damaged"
	case ring == nil:
		keys.Skipped, keys.Detail = true, "the keyring did not load"
	default:
		proof, err := secrets.CheckKeys(ctx, store, ring)
		if use := ring.Used(); err == nil && use != nil && proof == secrets.ProofNothing && !storeHasData(ctx, store) {
			// The start refuses this (lostStoreError): the keyring protected a store, this one is empty.
			keys.Err = fmt.Errorf("%s is empty (no key-check value, no credential, service or archive), but the keyring %s has protected a store since %s (%s): gantry refuses to start on it; %s",
				filepath.Join(dir, databaseFile), filepath.Join(dir, keyringFile), use.Since.Format(time.RFC3339), use.Store, lostStoreAdvice)
			break
		}
		switch {
		case errors.Is(err, secrets.ErrKeysDoNotMatch):
			keys.Err = fmt.Errorf("%w: %s is not the keyring this store was written with; restore the keyring.json backed up with this %s (gantry refuses to start this way)",
				err, filepath.Join(dir, keyringFile), databaseFile)
		case err != nil:
			keys.Err = err
		default:
			keys.Detail = string(proof)
		}
	}
	return keys
}

// checkKeyVersions counts every revision, archived credential, pending change request and the
// key-check value of the store by
// the master key version that wraps it (secrets.CountKeyVersions) and fails, naming the counts, when
// the keyring does not hold a version something is under: those records answer 503 once gantry runs.
func checkKeyVersions(ctx context.Context, st store.Store, ring *kms.Keyring) CheckResult {
	r := CheckResult{Name: "key versions"}
	counts, err := secrets.CountKeyVersions(ctx, st, ring)
	if err != nil {
		r.Err = err
		return r
	}
	held := map[string]bool{}
	for _, k := range ring.Keys() {
		for _, v := range k.Versions {
			held[kms.KeyVersion{KeyID: k.KeyID, Version: uint32(v)}.String()] = true
		}
	}
	var missing, present []string
	for _, v := range counts.Versions() {
		what := fmt.Sprintf("%d revisions, %d archived", counts.Revisions[v], counts.Archived[v])
		if n := counts.Changes[v]; n > 0 {
			what += fmt.Sprintf(", %d pending change requests", n)
		}
		if counts.KeyCheck == v {
			what += ", the key-check value"
		}
		if held[v] {
			present = append(present, fmt.Sprintf("%s: %s", v, what))
		} else {
			missing = append(missing, fmt.Sprintf("%s under %s", what, v))
		}
	}
	if len(missing) > 0 {
		r.Err = fmt.Errorf("the keyring does not hold what these are wrapped under: %s; they cannot be decrypted (restore keyring.json from a backup that holds the version)", strings.Join(missing, "; "))
		return r
	}
	r.Detail = "every record under a version the keyring holds"
	if len(present) > 0 {
		r.Detail += " (" + strings.Join(present, "; ") + ")"
	}
	return r
}

// storeHasData is store.HasData, true when it cannot tell (the checks before reported why).
func storeHasData(ctx context.Context, store store.Store) bool {
	has, err := store.HasData(ctx)
	return has || err != nil
}

// checkChatQueue checks the chat queue file as the start opens it (boltqueue.Open), read-only.
func checkChatQueue(dir string, opts CheckOptions) CheckResult {
	path := filepath.Join(dir, chatQueueFile)
	r := CheckResult{Name: chatQueueFile}
	if _, err := os.Stat(path); errors.Is(err, iofs.ErrNotExist) {
		r.Detail = "none; gantry makes one at start (when it runs chat)"
		return r
	}
	detail, err := boltqueue.CheckFile(path, !opts.NoConsistency, opts.LockTimeout)
	switch {
	case errors.Is(err, boltdb.ErrLocked):
		r.Err = fmt.Errorf("%w: gantry is probably running with this data folder; stop it first", err)
	case errors.Is(err, boltdb.ErrDamaged):
		r.Err = fmt.Errorf("%w; restore it from a backup, or move it away to lose the Slack events still queued in it", err)
	case err != nil:
		r.Err = err
	default:
		r.Detail = detail
	}
	return r
}

// checkTLSDir checks the internal TLS folder as the start loads it (internaltls.Load), read-only.
func checkTLSDir(dir string, opts CheckOptions) CheckResult {
	tlsDir := opts.TLSDir
	if tlsDir == "" {
		tlsDir = filepath.Join(dir, "tls")
	}
	r := CheckResult{Name: "tls/"}
	detail, err := internaltls.CheckDir(tlsDir)
	if err != nil {
		r.Err = fmt.Errorf("%w (gantry refuses to start with it)", err)
	} else {
		r.Detail = detail
	}
	return r
}

// openStoreReadOnly opens the database for the offline tools, turning the failures an operator meets
// into what to do.
func openStoreReadOnly(path string, timeout time.Duration) (*boltstore.Store, error) {
	store, err := boltstore.OpenReadOnly(path, boltdb.Options{Timeout: timeout}, nil)
	switch {
	case err == nil:
		return store, nil
	case errors.Is(err, boltdb.ErrLocked):
		return nil, fmt.Errorf("%w: gantry is probably running with this data folder. Stop gantry first, or use a filesystem snapshot of the data folder (LVM, ZFS, a cloud disk snapshot) and point -data-dir at the snapshot", err)
	case errors.Is(err, iofs.ErrNotExist):
		return nil, fmt.Errorf("no database at %s: wrong -data-dir? (with -store=etcd there is no local database: back up etcd itself)", path)
	case errors.Is(err, boltdb.ErrDamaged):
		return nil, fmt.Errorf("%w; restore the data folder from a backup", err)
	}
	return nil, err
}

// checkKeyring loads the keyring of dir without ever creating one; ring is nil unless it loads.
func checkKeyring(dir, provider string) (ring *kms.Keyring, result CheckResult) {
	path := filepath.Join(dir, keyringFile)
	result.Name = keyringFile
	_, statErr := os.Stat(path)
	if provider == "aws" {
		result.Skipped, result.Detail = true, "-kms=aws: the master key is in AWS KMS"
		return nil, result
	}
	if errors.Is(statErr, iofs.ErrNotExist) {
		result.Err = fmt.Errorf("no keyring at %s: restore keyring.json from the backup of this data folder (gantry never makes a new one next to data); if this gantry runs with AWS KMS, pass -kms=aws", path)
		return nil, result
	}
	if err := secretfile.CheckPrivate(path); err != nil {
		result.Err = err
		return nil, result
	}
	ring, err := kms.LoadKeyring(path, nil)
	if err != nil {
		result.Err = fmt.Errorf("%w; restore keyring.json from the backup of this data folder", err)
		return nil, result
	}
	result.Detail = "loads, mode 0600"
	return ring, result
}

// checkSessionKey checks the browser-session key the way the start does (see sessionSecret).
func checkSessionKey(dir string) CheckResult {
	path := filepath.Join(dir, sessionKeyFile)
	r := CheckResult{Name: sessionKeyFile}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, iofs.ErrNotExist):
		r.Detail = "none; gantry makes one at start (unless SESSION_SECRET is set)"
	case err != nil:
		r.Err = err
	default:
		if err := secretfile.CheckPrivate(path); err != nil {
			r.Err = err
		} else if len(data) < 32 {
			r.Err = fmt.Errorf("%s is %d bytes, too short to be one gantry wrote; restore it, or delete it to log every browser out", path, len(data))
		} else {
			r.Detail = "mode 0600"
		}
	}
	return r
}

// BackupOptions tune BackupDataDir.
type BackupOptions struct {
	// LockTimeout bounds the wait for the database file lock; 0 means boltdb.DefaultTimeout.
	LockTimeout time.Duration
	// Online, when set, is how to reach the running secrets service that holds the database: a locked
	// database file is then streamed from it (secretsadmin.v1 Backup) instead of failing.
	Online *OnlineBackup
}

// BackupDataDir copies the data folder dir into out, a new (or empty) folder, made mode 0700 with
// files mode 0600 in the same layout: the database as a consistent snapshot (bbolt's Tx.WriteTo in
// one read transaction), then every other file of the folder (keyring, session key, grants.json, JWT
// keys, local CAs, internal TLS material), each written atomically. It returns the files written,
// relative to out. It never overwrites anything: an out that holds files is refused, and so is an out
// inside dir. While a gantry holds the database it fails with boltdb.ErrLocked (wrapped, saying what
// to do), unless opts.Online says how to reach that gantry: the database then comes from the running
// secrets service, still one read transaction, and the chat queue file, which the running chat
// service holds, from the running chat service (opts.Online.ChatAddr) the same way, its dead letters
// included. The copy is not checked here: run CheckDataDir on out.
func BackupDataDir(dir, out string, opts BackupOptions) (written []string, err error) {
	if err := checkBackupTarget(dir, out); err != nil {
		return nil, err
	}
	// Opened first, so that a running gantry is reported before anything is created, and held to the
	// end: its shared lock keeps a gantry from starting (and writing) during the copy.
	store, err := openStoreReadOnly(filepath.Join(dir, databaseFile), opts.LockTimeout)
	lockErr := err
	online := err != nil && errors.Is(err, boltdb.ErrLocked) && opts.Online != nil
	if err != nil && !online {
		return nil, err
	}
	if store != nil {
		defer store.Close()
	}
	created, err := makeBackupFolder(out)
	if err != nil {
		return nil, err
	}
	// The database before the keyring: a keyring only gains key versions (rotation keeps the old
	// ones), so a keyring copied after the database always decrypts it.
	skip := map[string]bool{databaseFile: true}
	if online {
		if err := opts.Online.stream(filepath.Join(out, databaseFile)); err != nil {
			if created {
				_ = os.Remove(out) // empty: nothing was written
			}
			return nil, fmt.Errorf("the online backup through %s failed (%w): is -secrets-addr the running gantry's -secrets-listen? Otherwise: %w", opts.Online.Addr, err, lockErr)
		}
		// The running chat service holds the queue file too: it streams it (the dead letters with
		// it) as the secrets service streams the database. Refused rather than left out, so that a
		// backup never says ok without the dead letters an offline one would keep.
		skip[chatQueueFile] = true
		if _, err := os.Stat(filepath.Join(dir, chatQueueFile)); err == nil {
			if err := opts.Online.streamQueue(filepath.Join(out, chatQueueFile)); err != nil {
				return []string{databaseFile}, fmt.Errorf("the online backup of the chat queue %s (its dead letters) through %s failed (%w): is -chat-addr the running gantry's -chat-listen? Or stop gantry and back up offline", chatQueueFile, opts.Online.ChatAddr, err)
			}
			written = append(written, chatQueueFile)
		}
	} else if err := store.Snapshot(filepath.Join(out, databaseFile)); err != nil {
		return nil, err
	}
	written = append(written, databaseFile)
	copied, err := copyFolder(dir, out, skip)
	written = append(written, copied...)
	return written, err
}

// copyFolder copies every file of dir but those named in skip into out (which exists), in the same
// layout, private, each written atomically, then makes the new folders durable. It returns the files
// written, relative to out.
func copyFolder(dir, out string, skip map[string]bool) (written []string, err error) {
	dirs := []string{out}
	err = filepath.WalkDir(dir, func(path string, d iofs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		switch {
		case rel == "." || skip[rel]:
			return nil
		case d.IsDir():
			if err := os.Mkdir(filepath.Join(out, rel), 0o700); err != nil {
				return err
			}
			dirs = append(dirs, filepath.Join(out, rel))
			return nil
		}
		// Stat follows a symbolic link, so a keyring kept elsewhere and linked in is copied.
		info, err := os.Stat(path)
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file (%s): gantry backup copies only files; move it out of the data folder, or copy it yourself", path, info.Mode().Type())
		}
		if err := copyFile(path, filepath.Join(out, rel)); err != nil {
			return err
		}
		written = append(written, rel)
		return nil
	})
	if err != nil {
		return written, fmt.Errorf("backup %s to %s: %w", dir, out, err)
	}
	// The files are durable (secretfile.WriteNew); make the new folders durable too.
	for _, d := range append(dirs, filepath.Dir(out)) {
		if err := secretfile.SyncDir(d); err != nil {
			return written, fmt.Errorf("backup %s to %s: %w", dir, out, err)
		}
	}
	return written, nil
}

// checkBackupTarget refuses an out inside dir (it would be copied into every later backup, and lost
// with the folder it backs up) and an out that holds anything (never overwrite a backup).
func checkBackupTarget(dir, out string) error {
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	absOut, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	if rel, err := filepath.Rel(absDir, absOut); err == nil && (rel == "." || !strings.HasPrefix(rel, "..")) {
		return fmt.Errorf("the backup folder %s is inside the data folder %s: choose a folder elsewhere, ideally on another disk", out, dir)
	}
	entries, err := os.ReadDir(out)
	switch {
	case errors.Is(err, iofs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("backup folder: %w", err)
	case len(entries) > 0:
		return fmt.Errorf("the backup folder %s exists and is not empty: gantry backup never overwrites a backup; choose a new folder", out)
	}
	return nil
}

// makeBackupFolder creates out mode 0700 (its missing parents too), or takes an empty existing one and
// makes it 0700: it will hold the keyring, which decrypts everything.
// created says whether it made out.
func makeBackupFolder(out string) (created bool, err error) {
	if err := os.MkdirAll(filepath.Dir(out), 0o700); err != nil {
		return false, fmt.Errorf("backup folder: %w", err)
	}
	err = os.Mkdir(out, 0o700)
	created = err == nil
	if errors.Is(err, iofs.ErrExist) {
		err = os.Chmod(out, 0o700)
	}
	if err != nil {
		return false, fmt.Errorf("backup folder: %w", err)
	}
	return created, nil
}

// copyFile copies src to dst, a new private file written atomically.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return secretfile.WriteNew(dst, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}
