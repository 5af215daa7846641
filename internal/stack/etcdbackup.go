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
	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/etcdstore"
)

// EtcdSnapshotFile is the etcd snapshot's name in a backup folder of an etcd installation.
const EtcdSnapshotFile = "etcd.snapshot"

// BackupEtcd backs up an installation on etcd into out, a new (or empty) folder, private, as
// BackupDataDir does: first a snapshot of the etcd cluster as etcd.snapshot, from a member that has a
// leader and answers a linearizable read just before (etcdstore.Snapshot: every write the cluster
// acknowledged before the backup is in it; with allowStale, when no member passes, from any member,
// src.Verified false), then every file of the data folder dir but the chat queue (the keyring, which
// alone decrypts the snapshot's values, the session key, tls/...), copied after the snapshot so that
// the keyring opens it. It returns the files written, relative to out, and where the snapshot came
// from. The copy is not checked here: run CheckDataDir on out with Store "etcd".
func BackupEtcd(ctx context.Context, dir, out string, opts etcdstore.Options, allowStale bool) (written []string, src etcdstore.SnapshotSource, err error) {
	if err := checkBackupTarget(dir, out); err != nil {
		return nil, src, err
	}
	created, err := makeBackupFolder(out)
	if err != nil {
		return nil, src, err
	}
	err = secretfile.WriteNew(filepath.Join(out, EtcdSnapshotFile), func(w io.Writer) error {
		var err error
		_, src, err = etcdstore.Snapshot(ctx, opts, w, allowStale)
		return err
	})
	if err != nil {
		if created {
			_ = os.Remove(out)
		}
		return nil, src, err
	}
	written = append(written, EtcdSnapshotFile)
	copied, err := copyFolder(dir, out, map[string]bool{databaseFile: true, chatQueueFile: true})
	return append(written, copied...), src, err
}

// checkEtcdSnapshot checks an etcd snapshot as `etcdutl snapshot restore` will (its SHA-256 trailer),
// then opens it read-only and counts gantry's keys under prefix at the snapshot's revision.
// keyCheck is the latest value of the key-check key (prefix + "meta/keycheck"), nil when the snapshot
// has none.
func checkEtcdSnapshot(path, prefix string) (r CheckResult, keyCheck []byte) {
	r = CheckResult{Name: EtcdSnapshotFile}
	data, err := os.ReadFile(path)
	if errors.Is(err, iofs.ErrNotExist) {
		r.Skipped, r.Detail = true, "none: a replica's data folder (its store is in etcd); a backup folder of gantry backup -store etcd has one"
		return r, nil
	}
	if err != nil {
		r.Err = err
		return r, nil
	}
	// etcd appends the SHA-256 of the database to a snapshot; the database is a whole number of pages.
	if len(data)%512 != sha256.Size {
		r.Err = fmt.Errorf("%s is %d bytes: not an etcd snapshot with its SHA-256 trailer (cut short?)", path, len(data))
		return r, nil
	}
	body, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		r.Err = fmt.Errorf("%s: SHA-256 mismatch: the snapshot is damaged; take another backup", path)
		return r, nil
	}
	n, check, err := countEtcdSnapshotKeys(path, body, prefix)
	if err != nil {
		r.Err = err
		return r, nil
	}
	if n == 0 {
		r.Err = fmt.Errorf("%s holds no key under %s: wrong -etcd-prefix, or a snapshot of another cluster", path, prefix)
		return r, nil
	}
	r.Detail = fmt.Sprintf("SHA-256 verifies; %d keys under %s", n, prefix)
	return r, check
}

// countEtcdSnapshotKeys opens the database of the etcd snapshot at path (body, without its trailer)
// read-only from a temporary copy and counts the keys under prefix that are alive at its revision;
// keyCheck is the latest value of the key-check key, nil when the snapshot has none.
func countEtcdSnapshotKeys(path string, body []byte, prefix string) (n int, keyCheck []byte, err error) {
	tmp, err := os.CreateTemp("", "gantry-etcd-check-*")
	if err != nil {
		return 0, nil, err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(body)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, nil, err
	}
	db, err := bolt.Open(tmp.Name(), 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", path, err)
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
			alive := !(len(k) > 17 && k[17] == 't')
			live[string(kv.Key)] = alive
			if string(kv.Key) == prefix+"meta/keycheck" {
				keyCheck = nil
				if alive {
					keyCheck = append([]byte(nil), kv.Value...)
				}
			}
			return nil
		})
	})
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, alive := range live {
		if alive {
			n++
		}
	}
	return n, keyCheck, nil
}

// checkEtcdFolder is CheckDataDir for an installation on etcd: the snapshot of a backup folder (when
// there is one), the keyring, the session key, the chat queue and the TLS folder.
func checkEtcdFolder(ctx context.Context, dir string, opts CheckOptions) []CheckResult {
	prefix := opts.EtcdPrefix
	if prefix == "" {
		prefix = etcdstore.DefaultOptions().Prefix
	}
	snap, keyCheck := checkEtcdSnapshot(filepath.Join(dir, EtcdSnapshotFile), prefix+"secrets/")
	ring, keyring := checkKeyring(dir, opts.KMS)
	keys := CheckResult{Name: "keys match the store"}
	switch {
	case opts.KMS == "aws":
		keys.Skipped, keys.Detail = true, "-kms=aws: gantry checks the AWS master key against the store when it starts"
	case snap.Err != nil || snap.Skipped:
		keys.Skipped, keys.Detail = true, "no etcd snapshot to check it against (gantry checks the keyring against the store in etcd when it starts)"
	case ring == nil:
		keys.Skipped, keys.Detail = true, "the keyring did not load"
	case keyCheck == nil:
		keys.Skipped, keys.Detail = true, "the snapshot holds no key-check value (gantry records one at its next start)"
	default:
		if _, err := secrets.CheckKeys(ctx, keyCheckOnly{value: keyCheck}, ring); err != nil {
			keys.Err = fmt.Errorf("%w: %s is not the keyring this snapshot was written with; use the keyring.json of the same backup", err, filepath.Join(dir, keyringFile))
		} else {
			keys.Detail = "the snapshot's key-check value decrypts"
		}
	}
	return []CheckResult{snap, keyring, keys, checkSessionKey(dir), checkChatQueue(dir, opts), checkTLSDir(dir, opts)}
}

// keyCheckOnly is a store holding only a key-check value, for secrets.CheckKeys on a snapshot: with
// the value there it reads nothing else (any other method would panic on the nil Store).
type keyCheckOnly struct {
	store.Store
	value []byte
}

func (k keyCheckOnly) KeyCheck(context.Context) ([]byte, error) { return k.value, nil }
