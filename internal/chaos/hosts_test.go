package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/internal/stacktest"
	"github.com/gantry-dev/gantry/pkg/freeport"
)

// Settings of the chat host child of TestFrozenAndKilledHosts.
const (
	envHostDir    = "GANTRY_CHAOS_HOST_DIR"
	envHostListen = "GANTRY_CHAOS_HOST_LISTEN"
	envHostTLS    = "GANTRY_CHAOS_HOST_TLS"
)

const hostChatConfig = `
teams: {acme: T0ACME001}
authorization:
  checks:
    - module: "omnibot.authnz:allowed_paths"
      kwargs: {paths: ["/api/v1/chat/"]}
`

// TestHostChild is one chat host of TestFrozenAndKilledHosts: a gantry process running chat only.
func TestHostChild(t *testing.T) {
	dir := os.Getenv(envHostDir)
	if dir == "" {
		t.Skip("only runs as a child of TestFrozenAndKilledHosts")
	}
	file := filepath.Join(dir, "chat.yaml")
	if err := os.WriteFile(file, []byte(hostChatConfig), 0o600); err != nil {
		os.Exit(3)
	}
	cfg := loopbackConfig(t, dir)
	cfg.Target = stack.RoleChat
	cfg.Chat.Listen = os.Getenv(envHostListen)
	cfg.Chat.ConfigFile = file
	cfg.InternalTLS.Dir = os.Getenv(envHostTLS)
	st, err := stack.Start(context.Background(), cfg, zap.NewNop())
	if err != nil {
		fmt.Fprintln(os.Stderr, "host child: start:", err)
		os.Exit(3)
	}
	_ = st.Wait()
	os.Exit(0)
}

// freeAddr is an address a host process binds a moment later (see pkg/freeport).
func freeAddr(t *testing.T) string {
	t.Helper()
	return freeport.Addr(t)
}

// TestFrozenAndKilledHosts runs two chat hosts as processes behind a gateway and, under a steady read
// load, SIGSTOPs one (a frozen host must cost a reader about one per-try timeout, never an error) and
// then SIGKILLs the other (an idempotent read in flight is retried elsewhere, never failed).
func TestFrozenAndKilledHosts(t *testing.T) {
	if os.Getenv(envHostDir) != "" {
		t.Skip("child process")
	}
	tlsDir := filepath.Join(t.TempDir(), "tls")
	addrs := []string{freeAddr(t), freeAddr(t)}
	var procs []*exec.Cmd
	for _, addr := range addrs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHostChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), envHostDir+"="+t.TempDir(), envHostListen+"="+addr, envHostTLS+"="+tlsDir)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			<-exited
		})
		procs = append(procs, cmd)
	}
	const perTry = 500 * time.Millisecond
	cfg := loopbackConfig(t, t.TempDir())
	cfg.Target = stack.RoleGateway
	cfg.InternalTLS.Dir = tlsDir
	cfg.Gateway.ChatUpstream = strings.Join(addrs, ",")
	cfg.Gateway.SecretsUpstream = freeAddr(t)
	cfg.Gateway.HealthCheck.Interval = 500 * time.Millisecond
	cfg.Gateway.HealthCheck.Timeout = time.Second
	cfg.Gateway.Retry.PerTryTimeout = perTry
	accessLog := filepath.Join(t.TempDir(), "access.log")
	cfg.Gateway.AccessLog = accessLog
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		data, _ := os.ReadFile(accessLog)
		for _, line := range strings.Split(string(data), "\n") {
			if !strings.Contains(line, " 200 - ") && line != "" {
				t.Logf("access log: %s", line)
			}
		}
	})
	gw := stacktest.Start(t, cfg, stacktest.Logger(zap.NewNop()), stacktest.UncheckedStop())
	url := "http://" + gw.GatewayAddr + "/api/v1/chat/get_team/acme"
	client := &http.Client{Timeout: 30 * time.Second}
	get := func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%d %s", resp.StatusCode, body)
		}
		return nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for get() != nil {
		if time.Now().After(deadline) {
			t.Fatal("the chat hosts never served")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// load reads from 4 clients for d and returns the reads, the failures and the slowest read.
	load := func(d time.Duration) (reads, failures int64, slowest time.Duration) {
		var mu sync.Mutex
		var n, failed atomic.Int64
		var wg sync.WaitGroup
		stop := time.Now().Add(d)
		for range 4 {
			wg.Go(func() {
				for time.Now().Before(stop) {
					start := time.Now()
					err := get()
					took := time.Since(start)
					n.Add(1)
					if err != nil {
						failed.Add(1)
						t.Errorf("read failed: %v", err)
					}
					mu.Lock()
					slowest = max(slowest, took)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return n.Load(), failed.Load(), slowest
	}

	if err := procs[0].Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	reads, failures, slowest := load(3 * time.Second)
	t.Logf("host %s frozen: %d reads, %d failed, slowest %v (per-try timeout %v)", addrs[0], reads, failures, slowest, perTry)
	if failures != 0 {
		t.Errorf("%d of %d reads failed with a frozen host", failures, reads)
	}
	// About one per-try timeout, with room for a loaded 2-core machine; without retries it was 30 s.
	if slowest > 4*perTry {
		t.Errorf("slowest read %v with a frozen host, want about one per-try timeout (%v)", slowest, perTry)
	}
	if err := procs[0].Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // back in service at its next passed health check

	done := make(chan struct{})
	var killReads, killFailures int64
	go func() {
		defer close(done)
		killReads, killFailures, _ = load(3 * time.Second)
	}()
	time.Sleep(time.Second)
	if err := procs[1].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-done
	t.Logf("host %s killed under load: %d reads, %d failed", addrs[1], killReads, killFailures)
	if resp, err := client.Get("http://" + gw.AdminAddr + "/stats?filter=cluster.chat.(upstream_rq_(retry|per_try|5|pending)|lb_)"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("stats:\n%s", b)
	}
	if killFailures != 0 {
		t.Errorf("%d of %d reads failed when a host was killed", killFailures, killReads)
	}
}
