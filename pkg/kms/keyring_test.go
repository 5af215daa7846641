package kms_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
)

// blobVersion reads the key version from a keyring blob's header ("GKR1", id length, id, version).
func blobVersion(t *testing.T, blob []byte) uint32 {
	t.Helper()
	if len(blob) < 5 || string(blob[:4]) != "GKR1" {
		t.Fatalf("not a keyring blob: %x", blob)
	}
	off := 5 + int(blob[4])
	return binary.BigEndian.Uint32(blob[off : off+4])
}

type storedKeyring struct {
	Format int `json:"format"`
	Keys   map[string]struct {
		Versions []struct {
			Version  int    `json:"version"`
			Material []byte `json:"material"`
		} `json:"versions"`
	} `json:"keys"`
	Aliases map[string]string `json:"aliases"`
}

func readStored(t *testing.T, path string) storedKeyring {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s storedKeyring
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestOpenKeyringCreatesFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "keyring.json")
	k, err := kms.OpenKeyring(path, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}

	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o600 {
		t.Errorf("keyring mode = %04o, want 0600", perm)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the keyring (no temporary files left)", len(entries))
	}

	stored := readStored(t, path)
	if stored.Format != 1 {
		t.Errorf("format = %d, want 1", stored.Format)
	}
	if len(stored.Keys) != 3 || len(stored.Aliases) != 3 {
		t.Fatalf("got %d keys and %d aliases, want 3 and 3", len(stored.Keys), len(stored.Aliases))
	}
	hexID := regexp.MustCompile(`^[0-9a-f]{32}$`)
	for _, alias := range []string{kms.AliasMaster, kms.AliasAuth, kms.AliasUserAuth} {
		id := stored.Aliases[alias]
		if !hexID.MatchString(id) {
			t.Errorf("alias %s names key %q, want 32 lowercase hex characters", alias, id)
		}
		versions := stored.Keys[id].Versions
		if len(versions) != 1 || versions[0].Version != 1 || len(versions[0].Material) != 32 {
			t.Errorf("key %s: versions = %+v, want one version 1 with 32 bytes of material", id, versions)
		}
		got, err := k.ResolveKeyID(ctx, alias)
		if err != nil || got != kms.KeyringKeyIDPrefix+id {
			t.Errorf("ResolveKeyID(%s) = %q, %v; want %q", alias, got, err, kms.KeyringKeyIDPrefix+id)
		}
		if got, err := k.ResolveKeyID(ctx, id); err != nil || got != kms.KeyringKeyIDPrefix+id {
			t.Errorf("ResolveKeyID(bare %s) = %q, %v", id, got, err)
		}
	}
	if stored.Aliases[kms.AliasMaster] == stored.Aliases[kms.AliasAuth] {
		t.Error("two default aliases share a key")
	}
}

func TestKeyringReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keyring.json")
	k1, err := kms.OpenKeyring(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	created, err := k1.CreateKey(ctx, "alias/app-extra")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k1.RotateKey(ctx, kms.AliasAuth); err != nil {
		t.Fatal(err)
	}
	aliases := []string{kms.AliasMaster, kms.AliasAuth, kms.AliasUserAuth, "alias/app-extra"}
	ec := map[string]string{"k": "v"}
	blobs := map[string][]byte{}
	ids := map[string]string{}
	for _, alias := range aliases {
		if blobs[alias], err = k1.Encrypt(ctx, alias, []byte("secret "+alias), ec); err != nil {
			t.Fatal(err)
		}
		if ids[alias], err = k1.ResolveKeyID(ctx, alias); err != nil {
			t.Fatal(err)
		}
	}
	if ids["alias/app-extra"] != created {
		t.Errorf("CreateKey returned %q, ResolveKeyID says %q", created, ids["alias/app-extra"])
	}

	k2, err := kms.OpenKeyring(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, alias := range aliases {
		t.Run(alias, func(t *testing.T) {
			if id, err := k2.ResolveKeyID(ctx, alias); err != nil || id != ids[alias] {
				t.Errorf("reopened ResolveKeyID = %q, %v; want %q", id, err, ids[alias])
			}
			got, _, err := k2.Decrypt(ctx, blobs[alias], ec)
			if err != nil || string(got) != "secret "+alias {
				t.Errorf("reopened Decrypt = %q, %v", got, err)
			}
		})
	}
	// The rotation was persisted too: new blobs still use version 2.
	blob, err := k2.Encrypt(ctx, kms.AliasAuth, []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := blobVersion(t, blob); v != 2 {
		t.Errorf("after reopen, new blobs use version %d, want 2", v)
	}
}

func TestKeyringRotation(t *testing.T) {
	ctx := context.Background()
	k := newKeyring(t)
	ec := map[string]string{"user": "u1"}
	old, err := k.Encrypt(ctx, kms.AliasMaster, []byte("old"), ec)
	if err != nil {
		t.Fatal(err)
	}
	other, err := k.Encrypt(ctx, kms.AliasAuth, []byte("other"), ec)
	if err != nil {
		t.Fatal(err)
	}

	v, err := k.RotateKey(ctx, kms.AliasMaster)
	if err != nil || v != 2 {
		t.Fatalf("RotateKey = %d, %v; want 2", v, err)
	}
	updated, err := k.Encrypt(ctx, kms.AliasMaster, []byte("new"), ec)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := k.Encrypt(ctx, kms.AliasAuth, []byte("other"), ec)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name        string
		blob        []byte
		wantVersion uint32
		want        string
	}{
		{"blob from before rotation", old, 1, "old"},
		{"blob from after rotation", updated, 2, "new"},
		{"other key before", other, 1, "other"},
		{"other key is not rotated", fresh, 1, "other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if v := blobVersion(t, tt.blob); v != tt.wantVersion {
				t.Errorf("blob version = %d, want %d", v, tt.wantVersion)
			}
			got, _, err := k.Decrypt(ctx, tt.blob, ec)
			if err != nil || string(got) != tt.want {
				t.Errorf("Decrypt = %q, %v; want %q", got, err, tt.want)
			}
		})
	}

	if v, err := k.RotateKey(ctx, kms.AliasMaster); err != nil || v != 3 {
		t.Errorf("second RotateKey = %d, %v; want 3", v, err)
	}
	if _, err := k.RotateKey(ctx, "alias/none"); !errors.Is(err, kms.ErrKeyNotFound) {
		t.Errorf("RotateKey of an unknown alias: err = %v, want ErrKeyNotFound", err)
	}
}

func TestKeyringForeignCiphertext(t *testing.T) {
	ctx := context.Background()
	first, second := newKeyring(t), newKeyring(t)
	blob, err := first.Encrypt(ctx, kms.AliasMaster, []byte("secret"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = second.Decrypt(ctx, blob, nil)
	if !errors.Is(err, kms.ErrKeyNotFound) {
		t.Fatalf("err = %v, want ErrKeyNotFound", err)
	}
	if !strings.Contains(err.Error(), "does not hold") {
		t.Errorf("error %q does not explain that the keyring lacks the key", err)
	}

	// A version the keyring never had is also a key it does not hold, not a corrupt blob.
	future := bytes.Clone(blob)
	off := 5 + int(future[4])
	binary.BigEndian.PutUint32(future[off:], 9)
	if _, _, err := first.Decrypt(ctx, future, nil); !errors.Is(err, kms.ErrKeyNotFound) {
		t.Errorf("unknown version: err = %v, want ErrKeyNotFound", err)
	}
}

func TestOpenKeyringErrors(t *testing.T) {
	valid := filepath.Join(t.TempDir(), "valid.json")
	if _, err := kms.OpenKeyring(valid, nil); err != nil {
		t.Fatal(err)
	}
	validData, err := os.ReadFile(valid)
	if err != nil {
		t.Fatal(err)
	}
	stored := readStored(t, valid)
	masterID := stored.Aliases[kms.AliasMaster]

	// edit rewrites the valid keyring's JSON through a generic map, so each case breaks one thing.
	edit := func(change func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(validData, &m); err != nil {
			t.Fatal(err)
		}
		change(m)
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	master := func(m map[string]any) map[string]any {
		return m["keys"].(map[string]any)[masterID].(map[string]any)
	}

	tests := []struct {
		name    string
		data    []byte // written to the file unless nil
		mode    os.FileMode
		path    func(dir string) string
		wantErr []string // substrings of the error
	}{
		{name: "group and world readable", data: validData, mode: 0o644, wantErr: []string{"0644", "keyring.json"}},
		{name: "group readable", data: validData, mode: 0o640, wantErr: []string{"0640"}},
		{name: "missing directory", path: func(dir string) string { return filepath.Join(dir, "no", "keyring.json") },
			wantErr: []string{string(filepath.Separator) + "no does not exist"}},
		{name: "not JSON", data: []byte("{nope"), mode: 0o600, wantErr: []string{"not valid JSON"}},
		{name: "unknown format", data: edit(func(m map[string]any) { m["format"] = 2 }), mode: 0o600,
			wantErr: []string{"format 2"}},
		{name: "short material", data: edit(func(m map[string]any) {
			master(m)["versions"].([]any)[0].(map[string]any)["material"] = "AAAA"
		}), mode: 0o600, wantErr: []string{"3 bytes"}},
		{name: "no versions", data: edit(func(m map[string]any) { master(m)["versions"] = []any{} }), mode: 0o600,
			wantErr: []string{"no versions"}},
		{name: "alias to a missing key", data: edit(func(m map[string]any) {
			m["aliases"].(map[string]any)["alias/x"] = strings.Repeat("0", 32)
		}), mode: 0o600, wantErr: []string{"alias/x"}},
		{name: "alias without prefix", data: edit(func(m map[string]any) {
			m["aliases"].(map[string]any)["master"] = masterID
		}), mode: 0o600, wantErr: []string{"invalid alias"}},
		{name: "bad key id", data: edit(func(m map[string]any) {
			keys := m["keys"].(map[string]any)
			keys["XYZ"] = keys[masterID]
		}), mode: 0o600, wantErr: []string{"invalid key id"}},
		{name: "directory instead of file", path: func(dir string) string {
			p := filepath.Join(dir, "keyring.json")
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
			return p
		}, wantErr: []string{"not a regular file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "keyring.json")
			if tt.path != nil {
				path = tt.path(dir)
			}
			if tt.data != nil {
				if err := os.WriteFile(path, tt.data, tt.mode); err != nil {
					t.Fatal(err)
				}
				// WriteFile's mode is filtered by the umask; set exactly what the case needs.
				if err := os.Chmod(path, tt.mode); err != nil {
					t.Fatal(err)
				}
			}
			k, err := kms.OpenKeyring(path, nil)
			if err == nil {
				t.Fatalf("OpenKeyring succeeded (%v), want an error", k)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
			if tt.data != nil {
				// A refused keyring must be left alone, not "repaired" by writing new keys over it.
				if got, _ := os.ReadFile(path); !bytes.Equal(got, tt.data) {
					t.Error("OpenKeyring modified the file it refused")
				}
			}
		})
	}
}

func TestKeyringCreateKey(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keyring.json")
	k, err := kms.OpenKeyring(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := k.CreateKey(ctx, "alias/app_1-x/y")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(id, kms.KeyringKeyIDPrefix) {
		t.Errorf("CreateKey = %q, want the canonical form", id)
	}
	if got, err := k.ResolveKeyID(ctx, "alias/app_1-x/y"); err != nil || got != id {
		t.Errorf("ResolveKeyID = %q, %v; want %q", got, err, id)
	}
	if stored := readStored(t, path); kms.KeyringKeyIDPrefix+stored.Aliases["alias/app_1-x/y"] != id {
		t.Error("the new key was not written to the file before CreateKey returned")
	}
	unnamed, err := k.CreateKey(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Encrypt(ctx, unnamed, []byte("x"), nil); err != nil {
		t.Errorf("Encrypt under a key without alias: %v", err)
	}

	for _, alias := range []string{kms.AliasMaster, "alias/app_1-x/y", "app", "alias/", "alias/has space", "alias/é"} {
		t.Run(alias, func(t *testing.T) {
			if _, err := k.CreateKey(ctx, alias); err == nil {
				t.Errorf("CreateKey(%q) succeeded, want an error", alias)
			}
		})
	}
}

// A failed write must not leave a key in memory that the file does not have: blobs made with it
// would become undecryptable at the next restart.
func TestKeyringUpdateFailureKeepsState(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "sub")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	k, err := kms.OpenKeyring(filepath.Join(dir, "keyring.json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := k.CreateKey(ctx, "alias/lost"); err == nil {
		t.Fatal("CreateKey succeeded without a directory to write to")
	}
	if _, err := k.ResolveKeyID(ctx, "alias/lost"); !errors.Is(err, kms.ErrKeyNotFound) {
		t.Errorf("after a failed CreateKey, ResolveKeyID err = %v, want ErrKeyNotFound", err)
	}
	if _, err := k.RotateKey(ctx, kms.AliasMaster); err == nil {
		t.Fatal("RotateKey succeeded without a directory to write to")
	}
	blob, err := k.Encrypt(ctx, kms.AliasMaster, []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := blobVersion(t, blob); v != 1 {
		t.Errorf("after a failed RotateKey, Encrypt uses version %d, want 1", v)
	}
}

func TestKeyringCancelledContext(t *testing.T) {
	k := newKeyring(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := k.CreateKey(ctx, "alias/x"); !errors.Is(err, context.Canceled) {
		t.Errorf("CreateKey err = %v, want context.Canceled", err)
	}
	if _, err := k.RotateKey(ctx, kms.AliasMaster); !errors.Is(err, context.Canceled) {
		t.Errorf("RotateKey err = %v, want context.Canceled", err)
	}
}

// Rotation swaps the keyring's state while other goroutines encrypt and decrypt; with -race this
// checks the locking, and every blob must still decrypt afterwards.
func TestKeyringConcurrentRotation(t *testing.T) {
	ctx := context.Background()
	k := newKeyring(t)
	var mu sync.Mutex
	var blobs [][]byte
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				blob, err := k.Encrypt(ctx, kms.AliasMaster, []byte("secret"), nil)
				if err != nil {
					t.Error(err)
					return
				}
				if _, _, err := k.Decrypt(ctx, blob, nil); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				blobs = append(blobs, blob)
				mu.Unlock()
			}
		})
	}
	wg.Go(func() {
		for range 5 {
			if _, err := k.RotateKey(ctx, kms.AliasMaster); err != nil {
				t.Error(err)
			}
			if _, err := k.CreateKey(ctx, ""); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	for _, blob := range blobs {
		if _, _, err := k.Decrypt(ctx, blob, nil); err != nil {
			t.Fatalf("blob version %d: %v", blobVersion(t, blob), err)
		}
	}
	if v, err := k.RotateKey(ctx, kms.AliasMaster); err != nil || v != 7 {
		t.Errorf("RotateKey after 5 concurrent rotations = %d, %v; want 7", v, err)
	}
}

func FuzzKeyringDecrypt(f *testing.F) {
	ctx := context.Background()
	k, err := kms.OpenKeyring(filepath.Join(f.TempDir(), "keyring.json"), nil)
	if err != nil {
		f.Fatal(err)
	}
	ec := map[string]string{"purpose": "fuzz"}
	valid, err := k.Encrypt(ctx, kms.AliasMaster, []byte("secret"), ec)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add([]byte{})
	f.Add([]byte("GKR1"))
	f.Add([]byte("GKR1\xff"))
	f.Add([]byte("GKR1\x00\x00\x00\x00\x01"))
	f.Add(append([]byte("GKR1\x20"), bytes.Repeat([]byte("a"), 80)...))
	f.Add(valid[:len(valid)-1])
	f.Add([]byte("random garbage that is not a blob"))

	f.Fuzz(func(t *testing.T, blob []byte) {
		got, _, err := k.Decrypt(ctx, blob, ec)
		switch {
		case err == nil:
			if !bytes.Equal(blob, valid) || string(got) != "secret" {
				t.Fatalf("Decrypt accepted a blob it did not make: %x", blob)
			}
		case !errors.Is(err, kms.ErrInvalidCiphertext) && !errors.Is(err, kms.ErrKeyNotFound):
			t.Fatalf("err = %v, want ErrInvalidCiphertext or ErrKeyNotFound", err)
		}
	})
}

// TestLoadKeyringNeverCreates: LoadKeyring reads an existing keyring like OpenKeyring, and a missing
// one is an error, not a new keyring.
func TestLoadKeyringNeverCreates(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.json")
	if _, err := kms.LoadKeyring(missing, nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadKeyring of a missing file: %v, want os.ErrNotExist", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadKeyring created a keyring: %v", err)
	}
	path := filepath.Join(dir, "keyring.json")
	ring, err := kms.OpenKeyring(path, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	ec := map[string]string{"id": "c1"}
	key, wrapped, err := ring.GenerateDataKey(ctx, kms.AliasMaster, ec)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := kms.LoadKeyring(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := loaded.Decrypt(ctx, wrapped, ec); err != nil || !bytes.Equal(got, key) {
		t.Errorf("the loaded keyring does not decrypt: %v", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := kms.LoadKeyring(path, nil); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("LoadKeyring of a keyring others can read: %v", err)
	}
}

// TestKeyringMarkUsed: MarkUsed records the use once, in the file (a reload sees it, a key rotation
// keeps it), and a later MarkUsed keeps the first record.
func TestKeyringMarkUsed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keyring.json")
	k, err := kms.OpenKeyring(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if k.Used() != nil {
		t.Fatal("a new keyring is marked used")
	}
	if err := k.MarkUsed("/data/secrets.db"); err != nil {
		t.Fatal(err)
	}
	first := k.Used()
	if first == nil || first.Store != "/data/secrets.db" || first.Since.IsZero() {
		t.Fatalf("Used() = %+v after MarkUsed", first)
	}
	if err := k.MarkUsed("/elsewhere/secrets.db"); err != nil {
		t.Fatal(err)
	}
	if _, err := k.RotateKey(context.Background(), kms.AliasMaster); err != nil {
		t.Fatal(err)
	}
	reloaded, err := kms.LoadKeyring(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := reloaded.Used(); got == nil || *got != *first {
		t.Fatalf("reloaded Used() = %+v, want %+v", got, first)
	}
}
