package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/freeport"
	"github.com/gantry-dev/gantry/pkg/testwait"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// Environment of the inbound kill child: the test binary re-executes itself as the gantry process
// (as internal/chaos does), so it can be killed with SIGKILL, mid-write if need be.
const (
	envInboundChildDataDir  = "GANTRY_INBOUND_CHILD_DATA_DIR"
	envInboundChildAddrFile = "GANTRY_INBOUND_CHILD_ADDR_FILE"
	envInboundChildSlack    = "GANTRY_INBOUND_CHILD_SLACK_URL"
	envInboundChildBackend  = "GANTRY_INBOUND_CHILD_BACKEND_URL"
)

// TestInboundKillChild is not a test: it is the gantry process TestInboundSIGKILL kills. It runs the
// stack with the bbolt queue on the data folder it is given, its handlers calling the backend URL it
// is given, writes its addresses to a file and serves until killed.
func TestInboundKillChild(t *testing.T) {
	dir := os.Getenv(envInboundChildDataDir)
	if dir == "" {
		t.Skip("only runs as the child of TestInboundSIGKILL")
	}
	backendURL := os.Getenv(envInboundChildBackend)
	s := startStackLogged(t, func(c *stack.Config) {
		path := filepath.Join(dir, "..", "chat.yaml")
		if err := os.WriteFile(path, []byte(chatTeams+chatACL+inboundHandlers(backendURL)), 0o600); err != nil {
			t.Fatal(err)
		}
		c.DataDir = dir
		c.Chat.ConfigFile = path
		c.Chat.SlackAPIURL = os.Getenv(envInboundChildSlack)
		c.Chat.Credentials = inboundCreds
		c.Chat.RefreshInterval = -1
		c.Chat.Inbound.Queue = "bolt"
		c.Chat.Inbound.MaxAttempts = 1000 // the backend is down for a while: nothing may be dead-lettered
		c.Chat.Inbound.RetryBackoff = 100 * time.Millisecond
		// Leases held by the killed process end soon, so its successor need not wait a minute.
		c.Chat.Inbound.VisibilityTimeout = 2 * time.Second
		c.Chat.Inbound.CallbackTimeout = time.Second
	}, zap.NewNop())
	addrFile := os.Getenv(envInboundChildAddrFile)
	// Write then rename, so the parent never reads half an address.
	if err := os.WriteFile(addrFile+".tmp", []byte(s.rest+" "+s.adm), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(addrFile+".tmp", addrFile); err != nil {
		t.Fatal(err)
	}
	select {} // until SIGKILL
}

// inboundChild is one run of the gantry process.
type inboundChild struct {
	*testStack // rest and adm only: the stack runs in the child
	cmd        *exec.Cmd
	exited     <-chan error
}

// startInboundChild re-executes the test binary as a gantry process on dataDir and waits for its
// addresses.
func startInboundChild(t *testing.T, dataDir, slackURL, backendURL string) *inboundChild {
	t.Helper()
	addrFile := filepath.Join(t.TempDir(), "addr")
	cmd := exec.Command(os.Args[0], "-test.run=^TestInboundKillChild$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		envInboundChildDataDir+"="+dataDir, envInboundChildAddrFile+"="+addrFile,
		envInboundChildSlack+"="+slackURL, envInboundChildBackend+"="+backendURL,
		"TMPDIR="+t.TempDir()) // the killed child cannot clean its temporary folders: the parent's test does
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	deadline := time.After(30 * time.Second)
	for {
		if addrs, err := os.ReadFile(addrFile); err == nil {
			rest, admin, _ := strings.Cut(string(addrs), " ")
			return &inboundChild{testStack: &testStack{t: t, rest: rest, adm: admin}, cmd: cmd, exited: exited}
		}
		select {
		case err := <-exited:
			t.Fatalf("gantry child exited before serving: %v\n%s", err, stderr.String())
		case <-deadline:
			t.Fatalf("gantry child did not serve within 30s\n%s", stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (c *inboundChild) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the killed gantry child did not exit")
	}
}

// downURL is the URL of a port nothing listens on: a backend that is down (connection refused).
func downURL(t *testing.T) string {
	t.Helper()
	return "http://" + freeport.Refused(t)
}

// TestInboundSIGKILL: Slack events acknowledged (200) by a gantry process whose handlers' backend is
// down are in its bbolt queue; the process is killed with SIGKILL, a new one starts on the same data
// folder with the backend up, and every acknowledged event reaches the backend, once.
func TestInboundSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end suite skipped with -short")
	}
	f := slacktest.StartWorkspace(t)
	be := startBackend(t, `{}`)
	dataDir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}

	first := startInboundChild(t, dataDir, f.APIURL(), downURL(t))
	const n = 20
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("Ev0KILL%04d", i)
		first.slackPost("/api/v1/slack/event", "application/json", messageEvent(ids[i], "<@U0BOT0001> ping"), inboundSecret, time.Now(), 0).must(t, 200)
	}
	// Some dispatches have failed against the down backend, so messages are leased or waiting for a
	// retry when the process dies, not only freshly queued.
	testwait.Until(t, "failed dispatches", func() bool {
		return strings.Contains(string(first.admin("/stats?filter=chat.inbound.event.failed").body), "chat.inbound.event.failed:")
	})
	first.kill(t)

	second := startInboundChild(t, dataDir, f.APIURL(), be.URL)
	testwait.Until(t, "every acknowledged event at the backend", func() bool {
		return len(countEventIDs(be.calls())) == n
	})
	time.Sleep(500 * time.Millisecond) // a second delivery, if any, would show by now
	got := countEventIDs(be.calls())
	for _, id := range ids {
		switch c := got[id]; {
		case c == 0:
			t.Errorf("%s was acknowledged but never dispatched", id)
		case c > 1:
			t.Errorf("%s dispatched %d times; once is the normal case", id, c)
		}
	}
	_ = second
}

// countEventIDs counts the backend's payloads by Slack event id.
func countEventIDs(payloads []map[string]any) map[string]int {
	out := map[string]int{}
	for _, p := range payloads {
		if id, ok := p["event_id"].(string); ok {
			out[id]++
		}
	}
	return out
}
