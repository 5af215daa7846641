package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/testwait"
	"github.com/gantry-dev/gantry/services/chat/queue/boltqueue"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// startInboundObserved is startInbound with the stack's log lines also kept for the test to read.
func startInboundObserved(t *testing.T, f *slacktest.Server, backendURL string, mutate func(*stack.Config)) (*testStack, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	logger := zap.New(zapcore.NewTee(logtest.New(t).Core(), core))
	s := startStackLogged(t, func(c *stack.Config) {
		path := filepath.Join(t.TempDir(), "chat.yaml")
		if err := os.WriteFile(path, []byte(chatTeams+chatACL+inboundHandlers(backendURL)), 0o600); err != nil {
			t.Fatal(err)
		}
		c.Chat.ConfigFile = path
		c.Chat.SlackAPIURL = f.APIURL()
		c.Chat.RefreshInterval = -1
		c.Chat.Credentials = inboundCreds
		if mutate != nil {
			mutate(c)
		}
	}, logger)
	return s, logs
}

// queueDepth opens a stopped stack's chat queue and counts what it holds.
func queueDepth(t *testing.T, dataDir string) (ready, inFlight, dead int) {
	t.Helper()
	q, err := boltqueue.Open(filepath.Join(dataDir, "chat-queue.db"), boltqueue.Options{}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = q.Close() }()
	d, err := q.Depth(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return d.Ready, d.InFlight, d.Dead
}

// TestInboundGracefulStopFinishesDispatch: a stop (SIGTERM) while a handler's backend is answering
// waits for the answer, within -shutdown-timeout, and acks the request: after a restart the handler
// is not called again. Before, the stop returned at once, closed the queue under the dispatch, and
// the request came back after the restart (issue 38).
func TestInboundGracefulStopFinishesDispatch(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	be := startHeldBackend(t)
	dir := t.TempDir()
	s, logs := startInboundObserved(t, f, be.URL, func(c *stack.Config) {
		c.DataDir = dir
		c.ShutdownTimeout = time.Minute // only bounds a hang: the answer comes when the test says
	})
	s.slackPost("/api/v1/slack/event", "application/json", messageEvent("Ev0STOP001", "<@U0BOT0001> ping"), inboundSecret, time.Now(), 0).must(t, 200)
	testwait.Until(t, "the backend call", func() bool { return len(be.got()) == 1 })

	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop() }()
	testwait.Until(t, "the stop to wait for the dispatch in flight", func() bool {
		return logs.FilterMessageSnippet("waiting for the dispatches in flight").Len() > 0
	})
	close(be.release)
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	if ready, inFlight, dead := queueDepth(t, dir); ready+inFlight+dead != 0 {
		t.Errorf("after the stop the queue holds %d ready, %d in flight, %d dead; want the request acked", ready, inFlight, dead)
	}
	if n := logs.FilterMessageSnippet("abandoned").Len(); n != 0 {
		t.Errorf("%d abandoned dispatches logged, want none", n)
	}
}

// TestInboundGracefulStopAbandonsAfterTimeout: a backend that has not answered when -shutdown-timeout
// is over does not hold the stop: the dispatch is abandoned, logged, and its request released, so
// the next process dispatches it again at once.
func TestInboundGracefulStopAbandonsAfterTimeout(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	be := startHeldBackend(t) // never released
	dir := t.TempDir()
	s, logs := startInboundObserved(t, f, be.URL, func(c *stack.Config) {
		c.DataDir = dir
		c.ShutdownTimeout = 500 * time.Millisecond
	})
	s.slackPost("/api/v1/slack/event", "application/json", messageEvent("Ev0STOP002", "<@U0BOT0001> ping"), inboundSecret, time.Now(), 0).must(t, 200)
	testwait.Until(t, "the backend call", func() bool { return len(be.got()) == 1 })
	if err := s.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	abandoned := logs.FilterMessageSnippet("was abandoned").All()
	if len(abandoned) != 1 || !strings.Contains(abandoned[0].ContextMap()["key"].(string), "Ev0STOP002") {
		t.Errorf("abandoned-dispatch log lines: %+v, want one naming the event", abandoned)
	}
	if ready, inFlight, _ := queueDepth(t, dir); ready != 1 || inFlight != 0 {
		t.Errorf("after the stop the queue holds %d ready, %d in flight; want the request released (1 ready)", ready, inFlight)
	}
}
