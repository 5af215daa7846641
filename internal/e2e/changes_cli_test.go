package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/internal/stack"
)

// clientApprovalPolicy is the client tests' (CLI and web UI) policy: everyone may do everything, and
// every write to a credential or service named prod-* waits for one approval by any other user, the
// CLI's (user:bob) and the browser's (user:bob@example.com) alike; oncall alone may break glass.
const clientApprovalPolicy = `
rules:
  - principals: ["*"]
    resources: ["*"]
    actions: ["*"]
approvals:
  rules:
    - resources: ["credential-name:prod-*", "service:prod-*"]
      approvals: 1
      approvers: ["user:*"]
      break_glass: ["user:oncall", "user:oncall@example.com"]
`

// clientApprovalStack is a stack whose policy file holds clientApprovalPolicy; credentials are due
// for rotation 30 days after their last rotation.
func clientApprovalStack(t *testing.T) *testStack {
	t.Helper()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte(clientApprovalPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	return startStack(t, func(c *stack.Config) {
		c.Secrets.ACLModule = "policy"
		c.Secrets.ACLPolicyFile = policy
		c.Secrets.MaximumRotationDays = 30
	})
}

// cliAs runs a client command against the stack as the user who.
func (s *testStack) cliAs(t *testing.T, who, stdin string, args ...string) cliResult {
	t.Helper()
	return s.cli(t, stdin, append(args, "-from", who)...)
}

// changeRequestJSON is the part of a change request the CLI tests read.
type changeRequestJSON struct {
	ID                string `json:"id"`
	Status            string `json:"status"`
	Action            string `json:"action"`
	ResourceType      string `json:"resource_type"`
	ResourceID        string `json:"resource_id"`
	ResourceName      string `json:"resource_name"`
	RequestedBy       string `json:"requested_by"`
	Reason            string `json:"reason"`
	ApprovalsRequired int    `json:"approvals_required"`
	Approvals         []struct {
		By string `json:"by"`
	} `json:"approvals"`
	Changes struct {
		KeysChanged      []string `json:"keys_changed"`
		CredentialsAdded []string `json:"credentials_added"`
		ToRevision       *int     `json:"to_revision"`
	} `json:"changes"`
	DecidedBy       string `json:"decided_by"`
	DecisionReason  string `json:"decision_reason"`
	AppliedRevision *int   `json:"applied_revision"`
}

// held runs a write that the approval policy holds: exit 4, the change request on stdout, what to
// do next on stderr, and no value anywhere.
func (s *testStack) held(t *testing.T, who, stdin string, args ...string) changeRequestJSON {
	t.Helper()
	r := s.cliAs(t, who, stdin, args...).must(t, 4)
	var req changeRequestJSON
	r.json(t, &req)
	if req.ID == "" || req.Status != "pending" || req.RequestedBy != "user:"+who {
		t.Fatalf("%v printed %+v", args, req)
	}
	if !strings.Contains(r.stderr, "held for approval, not applied") || !strings.Contains(r.stderr, "gantry changes show "+req.ID) {
		t.Errorf("%v: stderr %q", args, r.stderr)
	}
	return req
}

// TestCLIChangeRequests walks change requests through the CLI against a real server: a write to a
// protected credential is held (exit 4, nothing written), its requester may not approve it, another
// user's approval applies it; a rejection and a cancellation write nothing; a service mapping is
// held and applied the same way; breaking glass needs a reason and a principal the rule allows, and
// leaves an older request stale; an archive is held too; the due list names the credentials due for
// rotation.
func TestCLIChangeRequests(t *testing.T) {
	s := clientApprovalStack(t)
	id := s.cliCreateCredential(t, "prod-db", `{"DB_PASSWORD":"first-secret"}`) // creating is not held
	free := s.cliCreateCredential(t, "dev-db", `{"DB_PASSWORD":"dev"}`)
	s.cliAs(t, "alice", `{"DB_PASSWORD":"dev-2"}`, "creds", "update", free, "-pairs-stdin").must(t, 0) // no rule: applied

	// Held: exit 4, the request names the changed key, never a value; the credential is unchanged.
	upd := s.cliAs(t, "alice", `{"DB_PASSWORD":"second-secret"}`, "creds", "update", id, "-pairs-stdin", "-reason", "quarterly rotation").must(t, 4)
	if strings.Contains(upd.stdout+upd.stderr, "second-secret") || strings.Contains(upd.stdout+upd.stderr, "first-secret") {
		t.Fatalf("the held update printed a value: %q %q", upd.stdout, upd.stderr)
	}
	var req changeRequestJSON
	upd.json(t, &req)
	if req.Status != "pending" || req.Action != "update" || req.ResourceType != "credential" || req.ResourceID != id ||
		req.ResourceName != "prod-db" || req.Reason != "quarterly rotation" || req.ApprovalsRequired != 1 ||
		strings.Join(req.Changes.KeysChanged, ",") != "db_password" || req.AppliedRevision != nil {
		t.Fatalf("held update = %+v", req)
	}
	var cred struct {
		Revision        int               `json:"revision"`
		CredentialPairs map[string]string `json:"credential_pairs"`
	}
	s.cli(t, "", "creds", "get", id).must(t, 0).json(t, &cred)
	if cred.Revision != 1 || cred.CredentialPairs["db_password"] != "first-secret" {
		t.Fatalf("a held update was written: %+v", cred)
	}

	// The list and show name it; the table says what to do next.
	var pending []changeRequestJSON
	s.cli(t, "", "changes", "list").must(t, 0).json(t, &pending)
	if len(pending) != 1 || pending[0].ID != req.ID {
		t.Fatalf("changes list = %+v", pending)
	}
	show := s.cli(t, "", "changes", "show", req.ID, "-output", "table").must(t, 0)
	for _, want := range []string{"pending: not applied, waiting for 1 more approval", "update credential prod-db", "keys changed (values not shown): db_password",
		"quarterly rotation", "user:alice", "gantry changes approve " + req.ID} {
		if !strings.Contains(show.stdout, want) {
			t.Errorf("changes show lacks %q:\n%s", want, show.stdout)
		}
	}

	// The requester may not approve; bob's approval applies it as revision 2.
	self := s.cliAs(t, "alice", "", "changes", "approve", req.ID).must(t, 3)
	if !strings.Contains(self.stderr, "your own change request") {
		t.Errorf("self-approval: stderr %q", self.stderr)
	}
	var approved changeRequestJSON
	s.cliAs(t, "bob", "", "changes", "approve", req.ID).must(t, 0).json(t, &approved)
	if approved.Status != "applied" || approved.AppliedRevision == nil || *approved.AppliedRevision != 2 ||
		len(approved.Approvals) != 1 || approved.Approvals[0].By != "user:bob" {
		t.Fatalf("approved = %+v", approved)
	}
	s.cli(t, "", "creds", "get", id).must(t, 0).json(t, &cred)
	if cred.Revision != 2 || cred.CredentialPairs["db_password"] != "second-secret" {
		t.Fatalf("after approval: %+v", cred)
	}
	s.cliAs(t, "bob", "", "changes", "approve", req.ID).must(t, 1) // not pending any more

	// A revert, rejected by bob with a reason: nothing written.
	revert := s.held(t, "alice", "", "creds", "revert", id, "1", "-reason", "undo")
	if revert.Action != "revert" || revert.Reason != "undo" || revert.Changes.ToRevision == nil || *revert.Changes.ToRevision != 1 {
		t.Errorf("held revert = %+v", revert)
	}
	var rejected changeRequestJSON
	s.cliAs(t, "bob", "", "changes", "reject", revert.ID, "-reason", "not during the freeze").must(t, 0).json(t, &rejected)
	if rejected.Status != "rejected" || rejected.DecidedBy != "user:bob" || rejected.DecisionReason != "not during the freeze" {
		t.Fatalf("rejected = %+v", rejected)
	}

	// A disable, cancelled by its requester (bob may not cancel it): nothing written.
	disable := s.held(t, "alice", "", "creds", "update", id, "-enabled=false")
	s.cliAs(t, "bob", "", "changes", "cancel", disable.ID).must(t, 3)
	var cancelled changeRequestJSON
	s.cliAs(t, "alice", "", "changes", "cancel", disable.ID, "-reason", "wrong one").must(t, 0).json(t, &cancelled)
	if cancelled.Status != "cancelled" || cancelled.DecisionReason != "wrong one" {
		t.Fatalf("cancelled = %+v", cancelled)
	}
	s.cli(t, "", "creds", "get", id).must(t, 0).json(t, &cred)
	if cred.Revision != 2 {
		t.Fatalf("a rejected or cancelled change was written: revision %d", cred.Revision)
	}
	var all, rejectedOnly []changeRequestJSON
	s.cli(t, "", "changes", "list", "-status", "all").must(t, 0).json(t, &all)
	s.cli(t, "", "changes", "list", "-status", "rejected").must(t, 0).json(t, &rejectedOnly)
	if len(all) != 3 || len(rejectedOnly) != 1 || rejectedOnly[0].ID != revert.ID {
		t.Errorf("list -status all: %d requests, -status rejected: %+v", len(all), rejectedOnly)
	}

	// A new protected service: the mapping is held, then applied by bob's approval.
	mapping := s.held(t, "alice", "", "services", "map", "prod-orders", id, "-reason", "launch")
	if mapping.ResourceType != "service" || mapping.Reason != "launch" || strings.Join(mapping.Changes.CredentialsAdded, ",") != id {
		t.Errorf("held mapping = %+v", mapping)
	}
	s.cli(t, "", "services", "get", "prod-orders").must(t, 3)
	s.cliAs(t, "bob", "", "changes", "approve", mapping.ID).must(t, 0)
	var svc struct {
		Credentials []struct {
			ID string `json:"id"`
		} `json:"credentials"`
	}
	s.cli(t, "", "services", "get", "prod-orders").must(t, 0).json(t, &svc)
	if len(svc.Credentials) != 1 || svc.Credentials[0].ID != id {
		t.Fatalf("after approving the mapping: %+v", svc)
	}

	// Break glass: a reason is required (nothing sent without one), alice may not, oncall applies at
	// once; a request made before it is stale then, and approving it writes nothing.
	before := s.held(t, "alice", "", "creds", "update", id, "-doc", "the orders database")
	s.cliAs(t, "oncall", "", "creds", "update", id, "-enabled=false", "-break-glass").must(t, 2)
	denied := s.cliAs(t, "alice", "", "creds", "update", id, "-enabled=false", "-break-glass", "-reason", "outage").must(t, 3)
	if !strings.Contains(denied.stderr, "break glass") {
		t.Errorf("alice breaking glass: stderr %q", denied.stderr)
	}
	var broken map[string]any
	s.cliAs(t, "oncall", "", "creds", "update", id, "-enabled=false", "-break-glass", "-reason", "leaked in a log").must(t, 0).json(t, &broken)
	if broken["revision"] != float64(3) || broken["enabled"] != false {
		t.Fatalf("break glass = %v", broken)
	}
	stale := s.cliAs(t, "bob", "", "changes", "approve", before.ID, "-output", "table").must(t, 0)
	if !strings.Contains(stale.stdout, "stale: not applied, the record moved on from revision 2") {
		t.Errorf("approving a request the break glass overtook:\n%s", stale.stdout)
	}
	s.cli(t, "", "creds", "get", id).must(t, 0).json(t, &cred)
	if cred.Revision != 3 {
		t.Errorf("a stale request was written: revision %d", cred.Revision)
	}

	// Archive is held too (disabled by the break glass above; unmapped by an approved revert).
	unmap := s.held(t, "alice", "", "services", "unmap", "prod-orders", id)
	s.cliAs(t, "bob", "", "changes", "approve", unmap.ID).must(t, 0)
	if revert := s.held(t, "alice", "", "services", "revert", "prod-orders", "1", "-reason", "map it again"); revert.Action != "revert" || revert.Reason != "map it again" {
		t.Errorf("held service revert = %+v", revert)
	}
	archive := s.held(t, "alice", "", "creds", "archive", id, "-reason", "retired")
	if archive.Action != "archive" || archive.Reason != "retired" { // the archive's reason travels in its body
		t.Errorf("held archive = %+v", archive)
	}

	// Rotation: both credentials are due 30 days after their last rotation.
	var due []struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}
	s.cli(t, "", "creds", "due").must(t, 0).json(t, &due)
	if len(due) != 0 {
		t.Errorf("due within the default 7 days: %+v", due)
	}
	s.cli(t, "", "creds", "due", "-within-days", "60").must(t, 0).json(t, &due)
	if len(due) != 2 || due[0].State != "due" {
		t.Errorf("due within 60 days: %+v", due)
	}
	table := s.cli(t, "", "creds", "due", "-within-days", "60", "-output", "table").must(t, 0)
	if !strings.Contains(table.stdout, "prod-db") || !strings.Contains(table.stdout, "NEXT ROTATION") {
		t.Errorf("due table:\n%s", table.stdout)
	}
}
