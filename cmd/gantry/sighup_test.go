package main

import (
	"github.com/gantry-dev/gantry/pkg/freeport"

	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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
	chat, secrets, dead := freePort(t), freePort(t), freePort(t)
	writeChat := func(addr string) {
		if err := os.WriteFile(file, []byte("clusters:\n  - name: chat\n    hosts: [{address: \""+addr+"\"}]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeChat(dead)
	admin := freePort(t)
	args := []string{"-data-dir=" + filepath.Join(dir, "data"), "-clusters-file=" + file, "-chat-listen=" + chat, "-secrets-listen=" + secrets,
		"-gateway-listen=" + freePort(t), "-admin-listen=" + admin, "-admin-grpc-listen=" + freePort(t), "-shutdown-timeout=2s"}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMainChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GANTRY_TEST_MAIN_ARGS="+strings.Join(args, " "))
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
		}
	})
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
		deadline := time.Now().Add(20 * time.Second)
		for !ok() {
			select {
			case err := <-exited:
				t.Fatalf("gantry exited while waiting for %s: %v\n%s", what, err, logs.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s\n%s", what, logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor("the admin listener", func() bool { return strings.Contains(clusters(), "chat::"+dead+"::") })

	writeChat(chat)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor("the reloaded chat host", func() bool {
		c := clusters()
		return strings.Contains(c, "chat::"+chat+"::") && !strings.Contains(c, "chat::"+dead+"::")
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("gantry exit after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("gantry did not stop after SIGTERM")
	}
}
