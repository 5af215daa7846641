package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/internal/stacktest"
	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/pkg/credpair"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/services/secrets"
	"github.com/gantry-dev/gantry/services/secrets/store/boltstore"
)

// testPairs are the values of the credential newDataDir writes.
var testPairs = map[string]string{"user": "app", "password": "s3cret"}

// startSecrets starts the secrets role of a real stack on dir, and stops it again.
func startSecrets(t *testing.T, dir string) {
	t.Helper()
	cfg := stacktest.Config(t)
	cfg.Target = stack.RoleSecrets
	cfg.DataDir = dir
	if err := stacktest.Start(t, cfg, stacktest.Logger(zap.NewNop())).Stop(); err != nil {
		t.Fatalf("stop gantry: %v", err)
	}
}

// openService opens the store and keyring of dir under a secrets service; close it with the returned
// function.
func openService(t *testing.T, dir string) (*secrets.Service, func()) {
	t.Helper()
	store, err := boltstore.Open(filepath.Join(dir, "secrets.db"), boltdb.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ring, err := kms.LoadKeyring(filepath.Join(dir, "keyring.json"), nil)
	if err != nil {
		_ = store.Close()
		t.Fatal(err)
	}
	svc, err := secrets.NewService(context.Background(), secrets.DefaultConfig(), secrets.Deps{Store: store, KMS: ring})
	if err != nil {
		_ = store.Close()
		t.Fatal(err)
	}
	return svc, func() {
		svc.Close()
		if err := store.Close(); err != nil {
			t.Error(err)
		}
	}
}

// newDataDir makes a data folder the way gantry does (a first start of the secrets role), then writes
// a credential through the secrets service; it returns the folder and the credential's id.
func newDataDir(t *testing.T) (dir, credentialID string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "data")
	startSecrets(t, dir)
	svc, closeSvc := openService(t, dir)
	defer closeSvc()
	name, doc := "db", "the database login"
	pairs := map[string]any{}
	for k, v := range testPairs {
		pairs[k] = v
	}
	view, err := svc.CreateCredential(context.Background(), secrets.CredentialInput{Name: &name, Pairs: pairs, Documentation: &doc})
	if err != nil {
		t.Fatal(err)
	}
	return dir, view.Record.ID
}

// readPairs reads the credential's values through a secrets service over dir.
func readPairs(t *testing.T, dir, id string) map[string]string {
	t.Helper()
	svc, closeSvc := openService(t, dir)
	defer closeSvc()
	view, err := svc.GetCredential(context.Background(), id, false)
	if err != nil {
		t.Fatalf("read credential %s from %s: %v", id, dir, err)
	}
	return credpair.Texts(view.Pairs)
}

// check runs gantry check and returns its exit code and output.
func check(args ...string) (int, string) {
	var out, errOut bytes.Buffer
	code := runCheck(args, &out, &errOut)
	return code, out.String() + errOut.String()
}

// fileState is the bytes and modification time of every file of a folder.
func fileState(t *testing.T, dir string) map[string]string {
	t.Helper()
	state := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		state[path] = info.ModTime().String() + " " + info.Mode().String() + " " + string(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return state
}

// TestCheckPasses: a data folder gantry made and wrote to passes every check, and the check changes
// no file of it (bytes, modification time, mode).
func TestCheckPasses(t *testing.T) {
	dir, _ := newDataDir(t)
	// An old modification time, so a write by the check cannot hide within the clock's resolution.
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(filepath.Join(dir, "secrets.db"), old, old); err != nil {
		t.Fatal(err)
	}
	before := fileState(t, dir)
	code, out := check("-data-dir", dir)
	if code != 0 {
		t.Fatalf("exit %d, want 0:\n%s", code, out)
	}
	for _, want := range []string{
		"secrets.db             ok",
		"secrets.db consistency ok",
		"secrets.db schema      ok: version 3",
		"keyring.json           ok",
		"keys match the store   ok: " + string(secrets.ProofKeyCheck),
		"session.key            ok",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if after := fileState(t, dir); !maps.Equal(before, after) {
		t.Error("gantry check changed a file of the data folder")
	}
	t.Logf("gantry check:\n%s", out)

	code, out = check("-data-dir", dir, "-no-consistency")
	if code != 0 || !strings.Contains(out, "secrets.db consistency skipped: -no-consistency") {
		t.Errorf("-no-consistency: exit %d:\n%s", code, out)
	}
}

// TestCheckFails: each damage fails the check (exit 1) on the line that names it, saying what to do.
func TestCheckFails(t *testing.T) {
	db := func(dir string) string { return filepath.Join(dir, "secrets.db") }
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   []string
	}{
		{"empty database", func(t *testing.T, dir string) {
			must(t, os.Truncate(db(dir), 0))
		}, []string{"secrets.db             FAILED", "the file is empty", "restore the data folder from a backup"}},
		{"truncated database", func(t *testing.T, dir string) {
			info, err := os.Stat(db(dir))
			must(t, err)
			must(t, os.Truncate(db(dir), info.Size()/2))
		}, []string{"secrets.db             FAILED", "truncated"}},
		{"damaged meta page", func(t *testing.T, dir string) {
			// A byte of the second meta page's record (its page size field): its checksum fails.
			pageSize := int64(readUint32(t, db(dir), 16+8))
			flipByte(t, db(dir), pageSize+16+8)
		}, []string{"secrets.db             FAILED", "meta page 1", "checksum"}},
		{"damaged data pages", func(t *testing.T, dir string) {
			// Every leaf page below the root gets an impossible page type: the meta pages, the
			// length and the root page still verify, only reading the data finds it.
			addLeafPages(t, db(dir))
			damageLeafPages(t, db(dir))
		}, []string{"secrets.db             ok", "secrets.db consistency FAILED", "restore the data folder from a backup", "secrets.db schema      skipped"}},
		{"leaf keys outside the file", func(t *testing.T, dir string) {
			addLeafPages(t, db(dir))
			damageLeafKeys(t, db(dir))
		}, []string{"secrets.db consistency FAILED", "points outside the page", "restore the data folder from a backup"}},
		{"replaced keyring", func(t *testing.T, dir string) {
			must(t, os.Remove(filepath.Join(dir, "keyring.json")))
			_, err := kms.OpenKeyring(filepath.Join(dir, "keyring.json"), nil)
			must(t, err)
		}, []string{"keys match the store   FAILED", "is not the keyring this store was written with", "restore the keyring.json"}},
		{"missing keyring", func(t *testing.T, dir string) {
			must(t, os.Remove(filepath.Join(dir, "keyring.json")))
		}, []string{"keyring.json           FAILED: no keyring", "-kms=aws"}},
		{"keyring others can read", func(t *testing.T, dir string) {
			must(t, os.Chmod(filepath.Join(dir, "keyring.json"), 0o644))
		}, []string{"keyring.json           FAILED", "chmod 600"}},
		{"session key others can read", func(t *testing.T, dir string) {
			must(t, os.Chmod(filepath.Join(dir, "session.key"), 0o640))
		}, []string{"session.key            FAILED", "chmod 600"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, _ := newDataDir(t)
			tc.damage(t, dir)
			before := fileState(t, dir)
			code, out := check("-data-dir", dir)
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			for _, want := range tc.want {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			if after := fileState(t, dir); !maps.Equal(before, after) {
				t.Error("gantry check changed a file of the data folder")
			}
			t.Logf("gantry check:\n%s", out)
		})
	}
}

// TestCheckLocked: while gantry holds the database (here another bbolt handle of this process: the
// lock belongs to the open file description, see pkg/boltdb's TestOpenReadOnlyLocked), check fails
// at once, saying to stop gantry or use a snapshot, instead of waiting.
func TestCheckLocked(t *testing.T) {
	dir, _ := newDataDir(t)
	held, err := boltdb.Open(filepath.Join(dir, "secrets.db"), boltdb.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	start := time.Now()
	code, out := check("-data-dir", dir)
	if code != 1 || !strings.Contains(out, "locked") || !strings.Contains(out, "Stop gantry first, or use a filesystem snapshot") {
		t.Errorf("exit %d, want 1 saying the database is locked:\n%s", code, out)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("check waited %s for the lock", waited)
	}
}

// TestCheckAWS: with -kms=aws there is no keyring to check; the key checks are skipped and say so.
func TestCheckAWS(t *testing.T) {
	dir, _ := newDataDir(t)
	must(t, os.Remove(filepath.Join(dir, "keyring.json")))
	code, out := check("-data-dir", dir, "-kms", "aws")
	if code != 0 || !strings.Contains(out, "keyring.json           skipped: -kms=aws") || !strings.Contains(out, "keys match the store   skipped: -kms=aws") {
		t.Errorf("exit %d, want 0 with the key checks skipped:\n%s", code, out)
	}
}

func TestCheckUsage(t *testing.T) {
	for _, args := range [][]string{{"-bogus"}, {"-kms", "vault"}, {"extra"}} {
		if code, out := check(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2:\n%s", args, code, out)
		}
	}
	missing := filepath.Join(t.TempDir(), "nope")
	code, out := check("-data-dir", missing)
	if code != 1 || !strings.Contains(out, "wrong -data-dir?") {
		t.Errorf("missing folder: exit %d:\n%s", code, out)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Error("check created the missing data folder")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func readUint32(t *testing.T, path string, off int64) uint32 {
	t.Helper()
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	var b [4]byte
	_, err = f.ReadAt(b[:], off)
	must(t, err)
	return binary.LittleEndian.Uint32(b[:])
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	var b [1]byte
	_, err = f.ReadAt(b[:], off)
	must(t, err)
	b[0] ^= 0xff
	_, err = f.WriteAt(b[:], off)
	must(t, err)
}

// damageLeafPages gives every leaf page of a bbolt file (page header: id uint64, flags uint16 at
// offset 8; leaf = 0x02) an impossible page type.
// addLeafPages gives the database a bucket large enough to need leaf pages of its own below the
// root (a small data folder's buckets all fit inline in the root page).
func addLeafPages(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	must(t, err)
	must(t, db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("test-filler"))
		if err != nil {
			return err
		}
		for i := range 200 {
			if err := b.Put([]byte{byte(i)}, bytes.Repeat([]byte{byte(i)}, 100)); err != nil {
				return err
			}
		}
		return nil
	}))
	must(t, db.Close())
}

// damageLeafPages turns every leaf page but the root bucket's into a page of an unknown type.
func damageLeafPages(t *testing.T, path string) {
	t.Helper()
	damageEachLeaf(t, path, func(page []byte) bool {
		binary.LittleEndian.PutUint16(page[8:], 0x40)
		return true
	})
}

// damageEachLeaf applies damage to every leaf page of the bbolt file at path but the root bucket's
// (in either meta page: the quick checks read it), and fails the test when it damaged none.
func damageEachLeaf(t *testing.T, path string, damage func(page []byte) bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	must(t, err)
	pageSize := int(binary.LittleEndian.Uint32(data[16+8:]))
	roots := map[int]bool{}
	for _, meta := range []int{0, pageSize} {
		roots[int(binary.LittleEndian.Uint64(data[meta+16+16:]))*pageSize] = true
	}
	damaged := 0
	for off := 2 * pageSize; off+pageSize <= len(data); off += pageSize {
		if binary.LittleEndian.Uint16(data[off+8:]) == 0x02 && !roots[off] && damage(data[off:off+pageSize]) {
			damaged++
		}
	}
	if damaged == 0 {
		t.Fatal("no leaf page found")
	}
	must(t, os.WriteFile(path, data, 0o600))
}
