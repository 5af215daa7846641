package main

import (
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stacktest"
)

// TestServeBusyPortNamesTheSetting: a listen address already in use makes gantry serve exit 1 with a
// message naming the setting to change, as the operator gave it (flag or variable), and saying another
// process holds the address; on main it only said "listen tcp ...: bind: address already in use".
func TestServeBusyPortNamesTheSetting(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a gantry process")
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	for _, flag := range []string{"secrets-listen", "chat-listen", "gateway-listen", "admin-listen", "admin-grpc-listen"} {
		t.Run(flag, func(t *testing.T) {
			code, out := serveChild(t, filepath.Join(t.TempDir(), "data"), "-"+flag+"="+addr)
			noPanic(t, out)
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, out)
			}
			for _, want := range []string{"-" + flag + " (flag)", "address already in use", "another process holds " + addr} {
				if !strings.Contains(out, want) {
					t.Errorf("the start error does not say %q:\n%s", want, out)
				}
			}
		})
	}
	t.Run("environment", func(t *testing.T) {
		t.Setenv("GANTRY_ADMIN_LISTEN", addr)
		addrs := stacktest.FreeAddrs(t)
		addrs.Admin = "" // from the environment
		args := append(addrs.Flags(), "-data-dir="+filepath.Join(t.TempDir(), "data"), "-shutdown-timeout=2s")
		var logs strings.Builder
		child := startChild(t, args, &logs, &logs)
		select {
		case <-child.done:
		case <-time.After(60 * time.Second):
			t.Fatalf("gantry serve did not exit with its admin address taken:\n%s", logs.String())
		}
		var exit *exec.ExitError
		if !errors.As(child.err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("exit %v, want 1:\n%s", child.err, logs.String())
		}
		if !strings.Contains(logs.String(), "GANTRY_ADMIN_LISTEN (env)") {
			t.Errorf("the start error does not name GANTRY_ADMIN_LISTEN (env):\n%s", logs.String())
		}
	})
}
