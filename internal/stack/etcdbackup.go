package stack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/gantry-dev/gantry/pkg/secretfile"
	"github.com/gantry-dev/gantry/services/secrets"
	"github.com/gantry-dev/gantry/services/secrets/store/etcdstore"
)

// EtcdSnapshotFile is the etcd snapshot's name in a backup folder of an etcd installation.
const EtcdSnapshotFile = "etcd.snapshot"

// BackupEtcd backs up an installation on etcd into out, a new (or empty) folder, private, as
// BackupDataDir does: first a snapshot of the etcd cluster (Maintenance.Snapshot: one read
// transaction of a member's backend, every acknowledged write in it) as etcd.snapshot, then every file
// of the data folder dir but the chat queue (the keyring, which alone decrypts the snapshot's values,
// the session key, tls/...), copied after the snapshot so that the keyring opens it. It returns the
// files written, relative to out. The copy is not checked here: run CheckDataDir on out with Store
// "etcd".
func BackupEtcd(ctx context.Context, dir, out string, opts secrets.EtcdOptions) (written []string, err error) {
	if err := checkBackupTarget(dir, out); err != nil {
		return nil, err
	}
	created, err := makeBackupFolder(out)
	if err != nil {
		return nil, err
	}
	err = secretfile.WriteNew(filepath.Join(out, EtcdSnapshotFile), func(w io.Writer) error {
		_, err := etcdstore.Snapshot(ctx, opts, w)
		return err
	})
	if err != nil {
		if created {
			_ = os.Remove(out)
		}
		return nil, err
	}
	written = append(written, EtcdSnapshotFile)
	copied, err := copyFolder(dir, out, map[string]bool{databaseFile: true, chatQueueFile: true})
	return append(written, copied...), err
}

// checkEtcdSnapshot checks an etcd snapshot as `etcdutl snapshot restore` will (its SHA-256 trailer),
// then opens it read-only and counts gantry's keys under prefix at the snapshot's revision.
func checkEtcdSnapshot(path, prefix string) CheckResult {
	r := CheckResult{Name: EtcdSnapshotFile}
	data, err := os.ReadFile(path)
	if errors.Is(err, iofs.ErrNotExist) {
		r.Skipped, r.Detail = true, "none: a replica's data folder (its store is in etcd); a backup folder of gantry backup -store etcd has one"
		return r
	}
	if err != nil {
		r.Err = err
		return r
	}
	// etcd appends the SHA-256 of the database to a snapshot; the database is a whole number of pages.
	if len(data)%512 != sha256.Size {
		r.Err = fmt.Errorf("%s is %d bytes: not an etcd snapshot with its SHA-256 trailer (cut short?)", path, len(data))
		return r
	}
	body, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		r.Err = fmt.Errorf("%s: SHA-256 mismatch: the snapshot is damaged; take another backup", path)
		return r
	}
	tmp, err := os.CreateTemp("", "gantry-etcd-check-*")
	if err != nil {
		r.Err = err
		return r
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(body)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Err = err
		return r
	}
	db, err := bolt.Open(tmp.Name(), 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		r.Err = fmt.Errorf("%s: %w", path, err)
		return r
	}
	defer db.Close()
	live := map[string]bool{}
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("key"))
		if b == nil {
			return errors.New("no \"key\" bucket: not an etcd snapshot")
		}
		// Keys are revisions in order; a tombstone (deletion) key ends with 't'.
		return b.ForEach(func(k, v []byte) error {
			var kv mvccpb.KeyValue
			if err := kv.Unmarshal(v); err != nil {
				return err
			}
			if !strings.HasPrefix(string(kv.Key), prefix) {
				return nil
			}
			live[string(kv.Key)] = !(len(k) > 17 && k[17] == 't')
			return nil
		})
	})
	if err != nil {
		r.Err = fmt.Errorf("%s: %w", path, err)
		return r
	}
	n := 0
	for _, alive := range live {
		if alive {
			n++
		}
	}
	if n == 0 {
		r.Err = fmt.Errorf("%s holds no key under %s: wrong -etcd-prefix, or a snapshot of another cluster", path, prefix)
		return r
	}
	r.Detail = fmt.Sprintf("SHA-256 verifies; %d keys under %s", n, prefix)
	return r
}

// checkEtcdFolder is CheckDataDir for an installation on etcd: the snapshot of a backup folder (when
// there is one), the keyring, the session key, the chat queue and the TLS folder.
func checkEtcdFolder(dir string, opts CheckOptions) []CheckResult {
	prefix := opts.EtcdPrefix
	if prefix == "" {
		prefix = secrets.DefaultConfig().Etcd.Prefix
	}
	results := []CheckResult{checkEtcdSnapshot(filepath.Join(dir, EtcdSnapshotFile), prefix+"secrets/")}
	_, keyring := checkKeyring(dir, opts.KMS)
	results = append(results, keyring, CheckResult{Name: "keys match the store", Skipped: true,
		Detail: "-store=etcd: gantry checks the keyring against the store in etcd when it starts (and refuses another one)"})
	return append(results, checkSessionKey(dir), checkChatQueue(dir, opts), checkTLSDir(dir, opts))
}
