package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/testwait"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// slackApprovalPolicy announces requests for prod-* credentials in #changes through pingbot, relayed
// by the chat service of the same stack (service gantry-chat); bob is mapped explicitly, carol by her
// confirmed email.
const slackApprovalPolicy = `
rules:
  - principals: ["*"]
    resources: ["*"]
    actions: ["*"]
approvals:
  slack:
    team: acme
    bot: pingbot
    channel: "#changes"
    relay_service: gantry-chat
  slack_users:
    U0BOB0001: "user:bob"
  rules:
    - resources: ["credential-name:prod-*"]
      approvers: ["user:bob", "user:carol@example.com", "user:alice"]
      break_glass: ["user:oncall"]
`

// press is a signed block_actions payload pressing a change request's button.
func press(user, action, changeID, trigger string) string {
	payload, _ := json.Marshal(map[string]any{
		"type": "block_actions", "api_app_id": "A0PING001", "trigger_id": trigger,
		"team": map[string]any{"id": "T0FAKE001"}, "user": map[string]any{"id": user}, "channel": map[string]any{"id": "C0CHANGES"},
		"actions": []any{map[string]any{"type": "button", "block_id": "gantry_change", "action_id": action, "value": changeID}},
	})
	return url.Values{"payload": {string(payload)}}.Encode()
}

// TestSlackApprovalEndToEnd: through the gateway, the secrets service and the chat service of one
// stack, against the fake Slack. A held write is posted to the policy's channel with Approve and
// Reject buttons and no value; a press by a user the policy cannot map, or by a forged signature,
// changes nothing; a signed press by an approver applies the change and the message is updated;
// the same press replayed changes nothing; a break-glass write posts a loud notice. No message
// sent to Slack carries a value.
func TestSlackApprovalEndToEnd(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	confirmed := true
	f.AddUser(slacktest.User{ID: "U0CAROL01", Name: "carol", Email: "carol@example.com", EmailConfirmed: &confirmed})
	f.AddChannel(slacktest.Channel{ID: "C0CHANGES", Name: "changes", Kind: "public_channel"})
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte(slackApprovalPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	trail := &auditTrail{}
	s := startChat(t, f, chatTeams+chatACL, func(c *stack.Config) {
		c.Chat.Credentials = inboundCreds
		c.Secrets.ACLModule = "policy"
		c.Secrets.ACLPolicyFile = policy
		c.AuditStdout = trail
	})
	// The chat service reads its tokens from its own service, which must exist before it starts.
	s.as("alice", "PUT", "/v1/services/gantry-chat", map[string]any{"enabled": true, "credentials": []string{}}).must(t, 200)
	s.stop()
	cfg := s.cfg
	cfg.Chat.Secrets.Service = "gantry-chat"
	cfg.Chat.ApprovalsPollInterval = 100 * time.Millisecond
	s = runStack(t, cfg)

	const newValue = "slack-must-never-see-this-4d1c"
	id := s.createCredential("prod-payments", map[string]any{"api_key": "old-value-of-the-key"})
	cr := s.as("alice", "PUT", "/v1/credentials/"+id, map[string]any{
		"credential_pairs": map[string]any{"api_key": newValue}, "change_reason": "rotate the payments key",
	}).must(t, 202)
	crID := cr["id"].(string)

	var posted slacktest.Message
	testwait.Until(t, "the change request posted to #changes", func() bool {
		for _, m := range f.Messages("C0CHANGES") {
			if strings.Contains(m.Blocks, crID) {
				posted = m
				return true
			}
		}
		return false
	})
	for _, want := range []string{"gantry_change", "approve", "reject", "api_key", "rotate the payments key", "alice"} {
		if !strings.Contains(posted.Blocks, want) {
			t.Errorf("posted message lacks %q: %s", want, posted.Blocks)
		}
	}

	// Alice's Slack user has no confirmed email and no mapping: nothing happens, she is told why.
	r := s.slackPost("/api/v1/slack/interactive", "application/x-www-form-urlencoded", press("U0ALICE01", "approve", crID, "trig-alice"), inboundSecret, time.Now(), 0).must(t, 200)
	if !strings.Contains(fmt.Sprint(r["text"]), "cannot tell who you are") {
		t.Errorf("unmapped presser answered %v", r)
	}
	testwait.Until(t, "the refusal shown to alice alone", func() bool {
		for _, req := range f.Requests("chat.postEphemeral") {
			if req.Form.Get("user") == "U0ALICE01" && strings.Contains(req.Form.Get("text"), "cannot tell who you are") {
				return true
			}
		}
		return false
	})
	// A forged signature never reaches the secrets service.
	forged := s.slackPost("/api/v1/slack/interactive", "application/x-www-form-urlencoded", press("U0BOB0001", "approve", crID, "trig-forged"), "not-the-secret", time.Now(), 0)
	if forged.code != 401 {
		t.Errorf("forged press: %d %s, want 401", forged.code, forged.body)
	}
	if got := s.as("bob", "GET", "/v1/changes/"+crID, nil).must(t, 200); got["status"] != "pending" || len(got["approvals"].([]any)) != 0 {
		t.Fatalf("after refused presses: %v", got)
	}

	// Bob approves in Slack: the change applies and the message loses its buttons.
	at := time.Now()
	body := press("U0BOB0001", "approve", crID, "trig-bob")
	if r := s.slackPost("/api/v1/slack/interactive", "application/x-www-form-urlencoded", body, inboundSecret, at, 0); r.code != 200 || len(r.body) != 0 {
		t.Fatalf("bob's press: %d %q, want an empty 200", r.code, r.body)
	}
	got := s.get("/v1/credentials/"+id).must(t, 200)
	if got["revision"] != float64(2) || got["credential_pairs"].(map[string]any)["api_key"] != newValue {
		t.Fatalf("after bob's press: %v", got)
	}
	testwait.Until(t, "the message updated to applied", func() bool {
		for _, m := range f.Messages("C0CHANGES") {
			if m.TS == posted.TS && m.Updates > 0 && !strings.Contains(m.Blocks, `"gantry_change"`) && strings.Contains(m.Blocks, "pplied") {
				return true
			}
		}
		return false
	})
	// The same signed press, replayed: nothing more happens.
	if r := s.slackPost("/api/v1/slack/interactive", "application/x-www-form-urlencoded", body, inboundSecret, at, 0); r.code != 200 {
		t.Fatalf("replayed press: %d %q", r.code, r.body)
	}
	if stats := string(s.admin("/stats?filter=chat.inbound.interactive_component").body); !strings.Contains(stats, "chat.inbound.interactive_component.duplicate: 1") ||
		!strings.Contains(stats, "chat.inbound.interactive_component.approval_press: 2") {
		t.Errorf("the replay was not recognised as one (alice's and bob's presses count, the replay does not):\n%s", stats)
	}
	final := s.as("bob", "GET", "/v1/changes/"+crID, nil).must(t, 200)
	if final["status"] != "applied" || len(final["approvals"].([]any)) != 1 || final["decided_by"] != "user:bob" {
		t.Fatalf("after the replay: %v", final)
	}
	if via := final["approvals"].([]any)[0].(map[string]any)["via"]; via != "slack:T0FAKE001/U0BOB0001" {
		t.Errorf("approval via %v", via)
	}

	// Break glass: applied at once, and the channel hears of it.
	s.as("oncall", "PUT", "/v1/credentials/"+id, map[string]any{
		"credential_pairs": map[string]any{"api_key": newValue + "-2"}, "break_glass": true, "change_reason": "INC-7 outage",
	}).must(t, 200)
	testwait.Until(t, "the break-glass notice", func() bool {
		for _, m := range f.Messages("C0CHANGES") {
			if strings.Contains(m.Text+m.Blocks, "BREAK GLASS") && strings.Contains(m.Text+m.Blocks, "INC-7 outage") {
				return true
			}
		}
		return false
	})

	for _, req := range f.Requests("") {
		if strings.Contains(req.Form.Encode(), url.QueryEscape(newValue)) || strings.Contains(req.Form.Encode(), newValue) {
			t.Errorf("Slack was sent a value (%s): %v", req.Method, req.Form)
		}
	}
	trail.mu.Lock()
	if strings.Contains(trail.buf.String(), newValue) {
		t.Error("the audit trail carries a value")
	}
	trail.mu.Unlock()
}
