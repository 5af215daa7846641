package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gantry-dev/gantry/internal/stacktest"
	"github.com/gantry-dev/gantry/pkg/freeport"
)

// TestMainChild is the gantry process of TestSIGHUPReloadsClusters: the test binary re-run as main.
func TestMainChild(t *testing.T) {
	args := os.Getenv("GANTRY_TEST_MAIN_ARGS")
	if args == "" {
		t.Skip("run by TestSIGHUPReloadsClusters")
	}
	os.Exit(run(strings.Split(args, " ")))
}

// freePort is an address gantry binds a moment later (see pkg/freeport for why not port 0).
func freePort(t *testing.T) string {
	t.Helper()
	return freeport.Addr(t)
}

// TestSIGHUPReloadsClusters: SIGHUP no longer kills gantry; it reloads the clusters file.
func TestSIGHUPReloadsClusters(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a gantry process")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "clusters.yaml")
	addrs := stacktest.FreeAddrs(t)
	dead := freePort(t)
	writeChat := func(addr string) {
		if err := os.WriteFile(file, []byte("clusters:\n  - name: chat\n    hosts: [{address: \""+addr+"\"}]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeChat(dead)
	chat, admin := addrs.Chat, addrs.Admin
	args := append(addrs.Flags(), "-data-dir="+filepath.Join(dir, "data"), "-clusters-file="+file, "-shutdown-timeout=2s")
	var logs strings.Builder
	child := startChild(t, args, &logs, &logs)
	clusters := func() string {
		resp, err := http.Get("http://" + admin + "/clusters")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		child.waitFor(t, what, ok, logs.String)
	}
	waitFor("the admin listener", func() bool { return strings.Contains(clusters(), "chat::"+dead+"::") })

	writeChat(chat)
	if err := child.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor("the reloaded chat host", func() bool {
		c := clusters()
		return strings.Contains(c, "chat::"+chat+"::") && !strings.Contains(c, "chat::"+dead+"::")
	})
	child.stop(t, logs.String)
}
