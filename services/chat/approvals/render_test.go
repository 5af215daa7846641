package approvals

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
	"github.com/gantry-dev/gantry/services/chat/events"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of testdata/ from the current rendering")

// pendingUpdate is a pending credential update whose summary names one thing of every kind.
func pendingUpdate() *secretsv1.ChangeRequest {
	return &secretsv1.ChangeRequest{
		Id: "cr-0001", Status: StatusPending, StatusUrl: "/v1/changes/cr-0001", Action: "update",
		ResourceType: "credential", ResourceId: "0f3a9c", ResourceName: "payments-db", BaseRevision: 4,
		RequestedBy: "user:alice@example.com", Reason: "rotate after the vendor's <!channel> incident & cleanup",
		CreatedDate: "2026-11-29T10:00:00+00:00", ExpiryDate: "2026-11-30T10:00:00+00:00", ApprovalsRequired: 2,
		Approvals: []*secretsv1.ChangeApproval{{By: "user:bob@example.com", Date: "2026-11-29T10:05:00+00:00", Via: "slack:T0FAKE001/U0BOB0001"}},
		Changes: &secretsv1.ChangeSummary{
			KeysAdded: []string{"password_v2"}, KeysRemoved: []string{"legacy_token"}, KeysChanged: []string{"password"},
			MetadataChanged: []string{"owner"}, Name: wrapperspb.String("payments-db-primary"), Enabled: wrapperspb.Bool(false),
			FieldsChanged: []string{"documentation", "tags"},
		},
		Channel: "#secrets-approvals",
	}
}

// renderCases are the messages the golden files hold: each status of a request, and the reminders.
func renderCases() map[string]Message {
	applied := &secretsv1.ChangeRequest{
		Id: "cr-0002", Status: StatusApplied, Action: "update", ResourceType: "service", ResourceId: "payments-api", ResourceName: "payments-api",
		RequestedBy: "service:deployer", Reason: "map the new database", ApprovalsRequired: 1, DecidedBy: "user:bob@example.com",
		Approvals:       []*secretsv1.ChangeApproval{{By: "user:bob@example.com", Via: "api"}},
		AppliedRevision: wrapperspb.Int32(7),
		Changes: &secretsv1.ChangeSummary{CredentialsAdded: []string{"0f3a9c"}, CredentialsRemoved: []string{"77aa01"},
			BlindCredentialsAdded: []string{"b10001"}, BlindCredentialsRemoved: []string{"b10002"}},
	}
	rejected := pendingUpdate()
	rejected.Status, rejected.DecidedBy, rejected.DecisionReason = StatusRejected, "user:carol@example.com", "not during the freeze"
	cancelled := pendingUpdate()
	cancelled.Status, cancelled.DecidedBy = StatusCancelled, "user:alice@example.com"
	expired := pendingUpdate()
	expired.Status = StatusExpired
	stale := &secretsv1.ChangeRequest{
		Id: "cr-0003", Status: StatusStale, Action: "revert", ResourceType: "credential", ResourceId: "0f3a9c", ResourceName: "payments-db",
		RequestedBy: "user:alice@example.com", ApprovalsRequired: 2, Changes: &secretsv1.ChangeSummary{ToRevision: wrapperspb.Int32(3)},
	}
	archive := &secretsv1.ChangeRequest{
		Id: "cr-0004", Status: StatusPending, Action: "archive", ResourceType: "credential", ResourceId: "77aa01", ResourceName: "old-token",
		RequestedBy: "user:alice@example.com", Reason: "unused", ApprovalsRequired: 1, ExpiryDate: "not a date",
	}
	failed := pendingUpdate()
	failed.Status, failed.DecidedBy, failed.DecisionReason = StatusFailed, "user:bob@example.com", "Name already exists. See id: 9d2e"
	failed.Approvals = []*secretsv1.ChangeApproval{{By: "user:bob@example.com", Date: "2026-11-29T10:00:00+00:00", Via: "api"}}
	breakGlass := pendingUpdate()
	breakGlass.Status, breakGlass.Reason, breakGlass.Approvals = StatusBreakGlass, "payments are down", nil
	breakGlass.AppliedRevision = wrapperspb.Int32(5)
	return map[string]Message{
		"pending":     RenderChange(pendingUpdate()),
		"applied":     RenderChange(applied),
		"rejected":    RenderChange(rejected),
		"cancelled":   RenderChange(cancelled),
		"expired":     RenderChange(expired),
		"stale":       RenderChange(stale),
		"failed":      RenderChange(failed),
		"archive":     RenderChange(archive),
		"break_glass": RenderChange(breakGlass),
		"reminder_due": RenderReminder(&secretsv1.DueCredential{Id: "0f3a9c", Name: "payments-db", State: "due",
			NextRotationDate: "2026-12-03T00:00:00+00:00", LastRotationDate: wrapperspb.String("2026-09-03T00:00:00+00:00"), Services: []string{"payments-api", "billing"}}),
		"reminder_overdue": RenderReminder(&secretsv1.DueCredential{Id: "77aa01", Name: "old-token", State: "overdue", NextRotationDate: "2026-11-01T00:00:00+00:00"}),
	}
}

// TestRenderGolden: the messages, block by block, as Slack receives them. The golden files are the
// review of the layout: rerun with -update after a deliberate change and read the diff.
func TestRenderGolden(t *testing.T) {
	for name, msg := range renderCases() {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false) // readable golden files: Slack's markup as Slack reads it
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"text": msg.Text, "blocks": msg.Blocks}); err != nil {
			t.Fatal(err)
		}
		got := buf.Bytes()
		path := filepath.Join("testdata", name+".json")
		if *updateGolden {
			if err := os.WriteFile(path, got, 0o600); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (run go test -update to write it)", name, err)
		}
		if string(got) != string(want) {
			t.Errorf("%s: the message differs from %s:\n%s", name, path, got)
		}
	}
}

// TestRenderButtonsOnlyWhilePending: a pending request has exactly the Approve and Reject buttons
// the receiver routes (block_id, action_ids, the id as value; Reject asks first); no other status
// has any.
func TestRenderButtonsOnlyWhilePending(t *testing.T) {
	for name, msg := range renderCases() {
		var actions []Block
		for _, b := range msg.Blocks {
			if b["type"] == "actions" {
				actions = append(actions, b)
			}
		}
		if name != "pending" && name != "archive" {
			if len(actions) != 0 {
				t.Errorf("%s: buttons %v on a message that is not pending", name, actions)
			}
			continue
		}
		if len(actions) != 1 || actions[0]["block_id"] != events.ApprovalBlockID {
			t.Fatalf("%s: actions blocks %v, want one with block_id %s", name, actions, events.ApprovalBlockID)
		}
		els := actions[0]["elements"].([]any)
		approve, reject := els[0].(Block), els[1].(Block)
		if len(els) != 2 || approve["action_id"] != "approve" || reject["action_id"] != "reject" ||
			approve["style"] != "primary" || reject["style"] != "danger" || reject["confirm"] == nil || approve["confirm"] != nil {
			t.Errorf("%s: buttons %v", name, els)
		}
		if approve["value"] == "" || approve["value"] != reject["value"] {
			t.Errorf("%s: button values %q and %q, want the request id", name, approve["value"], reject["value"])
		}
	}
}

// TestRenderShowsNamesAsText: a reason or a name holding Slack markup is shown, not acted on: no
// mention, no link, in the blocks or in the plain text.
func TestRenderShowsNamesAsText(t *testing.T) {
	cr := pendingUpdate()
	cr.ResourceName = "<https://evil.example|click>"
	cr.Changes.KeysAdded = []string{"a`b<@U0BOB0001>"}
	msg := RenderChange(cr)
	raw, _ := json.Marshal(msg.Blocks)
	for _, s := range []string{string(raw), msg.Text} {
		for _, markup := range []string{"<!channel>", "<https://", "<@U0"} {
			if strings.Contains(s, markup) {
				t.Errorf("markup %q reached the message: %s", markup, s)
			}
		}
	}
}
