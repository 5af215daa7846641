package main

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serveChild runs gantry serve on dir as a child process (the test binary re-run as main, see
// TestMainChild) with free loopback ports, and returns its exit code and output. It is for folders
// serve must refuse: a child still running after 60 s is killed and fails the test.
func serveChild(t *testing.T, dir string, extra ...string) (int, string) {
	t.Helper()
	args := append([]string{"-data-dir=" + dir, "-chat-listen=" + freePort(t), "-secrets-listen=" + freePort(t),
		"-gateway-listen=" + freePort(t), "-admin-listen=" + freePort(t), "-admin-grpc-listen=" + freePort(t), "-shutdown-timeout=2s"}, extra...)
	cmd := exec.Command(os.Args[0], "-test.run=^TestMainChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GANTRY_TEST_MAIN_ARGS="+strings.Join(args, " "))
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode(), logs.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, logs.String()
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
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
	data, err := os.ReadFile(path)
	must(t, err)
	pageSize := int(binary.LittleEndian.Uint32(data[16+8:]))
	roots := map[int]bool{}
	for _, meta := range []int{0, pageSize} {
		roots[int(binary.LittleEndian.Uint64(data[meta+16+16:]))*pageSize] = true
	}
	damaged := 0
	for off := 2 * pageSize; off+pageSize <= len(data); off += pageSize {
		if binary.LittleEndian.Uint16(data[off+8:]) == 0x02 && !roots[off] && binary.LittleEndian.Uint16(data[off+10:]) > 0 {
			binary.LittleEndian.PutUint32(data[off+16+4:], 0xfffffff)
			damaged++
		}
	}
	if damaged == 0 {
		t.Fatal("no leaf page found")
	}
	must(t, os.WriteFile(path, data, 0o600))
}
