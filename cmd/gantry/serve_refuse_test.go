package main

import (
	"encoding/binary"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stacktest"
	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/services/chat/queue/boltqueue"
	"github.com/gantry-dev/gantry/services/secrets/store/boltstore"
)

// serveChild runs gantry serve on dir as a child process (the test binary re-run as main, see
// TestMainChild) with free loopback ports, and returns its exit code and output. It is for folders
// serve must refuse: a child still running after 60 s is killed and fails the test.
func serveChild(t *testing.T, dir string, extra ...string) (int, string) {
	t.Helper()
	args := append(append(stacktest.FreeAddrs(t).Flags(), "-data-dir="+dir, "-shutdown-timeout=2s"), extra...)
	var logs strings.Builder
	child := startChild(t, args, &logs, &logs)
	select {
	case <-child.done:
		var exit *exec.ExitError
		if errors.As(child.err, &exit) {
			return exit.ExitCode(), logs.String()
		}
		if child.err != nil {
			t.Fatal(child.err)
		}
		return 0, logs.String()
	case <-time.After(60 * time.Second):
		_ = child.cmd.Process.Kill()
		<-child.done
		t.Fatalf("gantry serve on %s did not exit (it should refuse the folder):\n%s", dir, logs.String())
		return 0, ""
	}
}

// noPanic fails the test when out shows a Go panic or stack trace.
func noPanic(t *testing.T, out string) {
	t.Helper()
	for _, raw := range []string{"panic:", "goroutine ", "runtime error"} {
		if strings.Contains(out, raw) {
			t.Errorf("the output shows a raw panic (%q):\n%s", raw, out)
			return
		}
	}
}

// TestServeRefusesDamagedPages: a bbolt file whose data pages are damaged (meta pages, length and
// root page intact: only reading the data finds it) makes gantry serve exit 1 with a message naming
// the file, gantry check and restoring from a backup, never a raw bbolt panic or fault; again at the
// restart. A leaf key pointing outside the file ended the process from inside bbolt's Tx.Check with
// "fatal error: fault" (exit 2).
func TestServeRefusesDamagedPages(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a gantry process")
	}
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"leaf page type", damageLeafPages},
		{"leaf key outside the file", damageLeafKeys},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, _ := newDataDir(t)
			addLeafPages(t, filepath.Join(dir, "secrets.db"))
			tc.damage(t, filepath.Join(dir, "secrets.db"))
			for _, attempt := range []string{"start", "restart"} {
				code, out := serveChild(t, dir)
				if code != 1 {
					t.Errorf("%s: exit %d, want 1:\n%s", attempt, code, out)
				}
				noPanic(t, out)
				for _, want := range []string{filepath.Join(dir, "secrets.db"), "damaged", "gantry check -data-dir " + dir, "restore the data folder from a backup"} {
					if !strings.Contains(out, want) {
						t.Errorf("%s: output lacks %q:\n%s", attempt, want, out)
					}
				}
			}
		})
	}
}

// damageLeafKeys points the first key of every leaf page (below the root) far outside the file.
func damageLeafKeys(t *testing.T, path string) {
	t.Helper()
	damageEachLeaf(t, path, func(page []byte) bool {
		if binary.LittleEndian.Uint16(page[10:]) == 0 { // no element: no key to point away
			return false
		}
		binary.LittleEndian.PutUint32(page[16+4:], 0xfffffff)
		return true
	})
}

// TestCheckRefusesWhatServeRefuses: every data folder gantry serve refuses to start on is refused by
// gantry check too (exit 1, on the line that names the problem): check covers everything the start
// checks. Before, check passed folders with a used keyring beside an empty store, a damaged chat
// queue or broken internal TLS material, which serve then refused.
func TestCheckRefusesWhatServeRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts gantry processes")
	}
	db := func(dir string) string { return filepath.Join(dir, "secrets.db") }
	tlsFile := func(dir, name string) string { return filepath.Join(dir, "tls", name) }
	// chatQueue makes the chat queue file as a start with the chat role does.
	chatQueue := func(t *testing.T, dir string) string {
		path := filepath.Join(dir, "chat-queue.db")
		q, err := boltqueue.Open(path, boltqueue.Options{}, nil)
		must(t, err)
		must(t, q.Close())
		return path
	}
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		check  string // what the check's output must hold
	}{
		{"missing store beside a used keyring", func(t *testing.T, dir string) {
			must(t, os.Remove(db(dir)))
		}, "secrets.db             FAILED"},
		{"empty store beside a used keyring", func(t *testing.T, dir string) {
			must(t, os.Remove(db(dir)))
			s, err := boltstore.Open(db(dir), boltdb.Options{}, nil)
			must(t, err)
			must(t, s.Close())
		}, "keys match the store   FAILED"},
		{"damaged data pages", func(t *testing.T, dir string) {
			addLeafPages(t, db(dir))
			damageLeafPages(t, db(dir))
		}, "secrets.db consistency FAILED"},
		{"leaf keys outside the file", func(t *testing.T, dir string) {
			addLeafPages(t, db(dir))
			damageLeafKeys(t, db(dir))
		}, "secrets.db consistency FAILED"},
		{"missing keyring", func(t *testing.T, dir string) {
			must(t, os.Remove(filepath.Join(dir, "keyring.json")))
		}, "keyring.json           FAILED"},
		{"replaced keyring", func(t *testing.T, dir string) {
			must(t, os.Remove(filepath.Join(dir, "keyring.json")))
			_, err := kms.OpenKeyring(filepath.Join(dir, "keyring.json"), nil)
			must(t, err)
		}, "keys match the store   FAILED"},
		{"keyring others can read", func(t *testing.T, dir string) {
			must(t, os.Chmod(filepath.Join(dir, "keyring.json"), 0o644))
		}, "keyring.json           FAILED"},
		{"session key others can read", func(t *testing.T, dir string) {
			must(t, os.Chmod(filepath.Join(dir, "session.key"), 0o640))
		}, "session.key            FAILED"},
		{"session key too short", func(t *testing.T, dir string) {
			must(t, os.WriteFile(filepath.Join(dir, "session.key"), []byte("short"), 0o600))
		}, "session.key            FAILED"},
		{"empty chat queue", func(t *testing.T, dir string) {
			must(t, os.Truncate(chatQueue(t, dir), 0))
		}, "chat-queue.db          FAILED"},
		{"damaged chat queue meta page", func(t *testing.T, dir string) {
			path := chatQueue(t, dir)
			flipByte(t, path, int64(readUint32(t, path, 16+8))+16+8)
		}, "chat-queue.db          FAILED"},
		{"chat queue leaf keys outside the file", func(t *testing.T, dir string) {
			path := chatQueue(t, dir)
			addLeafPages(t, path)
			damageLeafKeys(t, path)
		}, "chat-queue.db          FAILED"},
		{"internal CA key others can read", func(t *testing.T, dir string) {
			must(t, os.Chmod(tlsFile(dir, "ca.key"), 0o644))
		}, "tls/                   FAILED"},
		{"internal CA lost, certificates kept", func(t *testing.T, dir string) {
			must(t, os.Remove(tlsFile(dir, "ca.crt")))
			must(t, os.Remove(tlsFile(dir, "ca.key")))
		}, "tls/                   FAILED"},
		{"service certificate of another CA", func(t *testing.T, dir string) {
			other, _ := newDataDir(t)
			for _, f := range []string{"service.crt", "service.key"} {
				data, err := os.ReadFile(tlsFile(other, f))
				must(t, err)
				must(t, os.WriteFile(tlsFile(dir, f), data, 0o600))
			}
		}, "tls/                   FAILED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, _ := newDataDir(t)
			tc.damage(t, dir)
			before := fileState(t, dir)
			code, out := check("-data-dir", dir)
			if code != 1 || !strings.Contains(out, tc.check) {
				t.Errorf("gantry check: exit %d, want 1 with %q:\n%s", code, tc.check, out)
			}
			if after := fileState(t, dir); !maps.Equal(before, after) {
				t.Error("gantry check changed a file of the data folder")
			}
			// Serve on a copy: a refused serve may still create files (tls/.lock, a keyring never).
			copyDir := filepath.Join(t.TempDir(), "copy")
			must(t, exec.Command("cp", "-a", dir, copyDir).Run())
			if code, out := serveChild(t, copyDir); code == 0 {
				t.Errorf("gantry serve exited 0; the case must be one serve refuses:\n%s", out)
			} else {
				noPanic(t, out)
			}
		})
	}
}
