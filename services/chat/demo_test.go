package chat

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

func writeTestFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "chat.yaml")
	if err := os.WriteFile(path, []byte(testFile), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startDemo serves the demo workspace as internal/stack does.
func startDemo(logger *zap.Logger) func(map[string]string) DemoWorkspace {
	return func(teams map[string]string) DemoWorkspace { return slacktest.NewDemo(teams, logger) }
}

// With -chat-demo and no token, every route works against the in-memory workspace: lookups, send_im,
// and the posted message read back through an action (conversations.history) and the log.
func TestDemoWorkspace(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cfg := DefaultConfig()
	cfg.ConfigFile, cfg.Demo = writeTestFile(t), true
	cfg.Credentials = func(string) string { return "" }
	core, logs := observer.New(zap.InfoLevel)
	logger := zap.New(core)
	svc, err := New(ctx, cfg, Deps{StartDemo: startDemo(logger), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; _ = svc.Close() })

	if logs.FilterMessageSnippet("demo Slack workspace").Len() != 1 {
		t.Errorf("want one startup line naming the demo workspace, got %v", logs.All())
	}
	if n := logs.FilterLevelExact(zap.ErrorLevel).Len(); n != 0 {
		t.Errorf("%d error lines at startup", n)
	}
	if !strings.HasPrefix(svc.SlackAPIURL(), "http://127.0.0.1:") {
		t.Errorf("Slack API %q, want the loopback demo workspace", svc.SlackAPIURL())
	}
	u, err := svc.GetUser(ctx, "acme", "notoken", "bob@example.com")
	if err != nil || u.ID != "U0BOB0001" {
		t.Fatalf("GetUser: %+v, %v", u, err)
	}
	if _, err := svc.GetChannel(ctx, "acme", "pingbot", "#alerts"); err != nil {
		t.Fatalf("GetChannel: %v", err)
	}
	res, err := svc.SendIM(ctx, "acme", "pingbot", "carol@example.com", ActionRequest{Action: "chat.postMessage", Kwargs: map[string]any{"text": "deploy finished"}})
	if err != nil || !res.OK {
		t.Fatalf("SendIM: %s, %v", res.Body, err)
	}
	ims, err := svc.GetIMs(ctx, "acme", "pingbot")
	if err != nil || len(ims) < 2 {
		t.Fatalf("GetIMs: %+v, %v (want alice's IM and the one send_im opened)", ims, err)
	}
	var carolIM string
	for _, im := range ims {
		if im.User == "U0CAROL01" {
			carolIM = im.ID
		}
	}
	history, err := svc.Action(ctx, "acme", "pingbot", ActionRequest{Action: "conversations.history", Kwargs: map[string]any{"channel": carolIM}})
	if err != nil || !strings.Contains(string(history.Body), `"text":"deploy finished"`) {
		t.Fatalf("conversations.history of %q: %s, %v", carolIM, history.Body, err)
	}
	posted := logs.FilterMessage("demo workspace: message posted").All()
	if len(posted) != 1 || posted[0].ContextMap()["text"] != "deploy finished" {
		t.Errorf("posted-message log lines: %+v", posted)
	}
	for _, e := range logs.All() {
		for k, v := range e.ContextMap() {
			if s, ok := v.(string); ok && strings.Contains(s, demoTokenPrefix) {
				t.Errorf("log %q field %s carries a token", e.Message, k)
			}
		}
	}
}

// A real token keeps chat on the configured Slack: the demo never replaces a configured workspace.
func TestDemoWorkspaceStaysOffWithARealToken(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ConfigFile, cfg.Demo, cfg.Credentials = writeTestFile(t), true, testCreds
	svc, err := New(context.Background(), cfg, Deps{StartDemo: startDemo(zap.NewNop())})
	if err != nil {
		t.Fatal(err)
	}
	if svc.demo != nil || svc.SlackAPIURL() != DefaultConfig().SlackAPIURL {
		t.Errorf("demo workspace started although a bot has a token (Slack API %q)", svc.SlackAPIURL())
	}
}
