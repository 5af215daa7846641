package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gantry-dev/gantry/internal/stack"
)

// approvalPolicy protects credentials named prod-* and services named prod-*: one approval by bob
// or carol (group sre), never the requester; dave's writes are exempt; oncall may break glass.
const approvalPolicy = `
rules:
  - principals: ["*"]
    resources: ["*"]
    actions: ["*"]
approvals:
  groups:
    sre: ["user:bob", "user:carol"]
  rules:
    - resources: ["credential-name:prod-*", "service:prod-*"]
      approvers: ["group:sre", "user:alice"]
      exempt: ["user:dave"]
      break_glass: ["user:oncall"]
`

// approvalStack starts a stack with the approval policy, the audit trail captured and the logs
// observed (so a test can scan both for values).
func approvalStack(t *testing.T, policy string) (*testStack, *auditTrail, *observer.ObservedLogs) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.DebugLevel)
	trail := &auditTrail{}
	s := startStackLogged(t, func(c *stack.Config) {
		c.Secrets.ACLModule = "policy"
		c.Secrets.ACLPolicyFile = file
		c.AuditStdout = trail
	}, zap.New(core))
	return s, trail, logs
}

// as sends a JSON request as a kmsauth user.
func (s *testStack) as(user, method, path string, body any) response {
	s.t.Helper()
	payload := ""
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			s.t.Fatal(err)
		}
		payload = string(b)
	}
	return s.do(method, s.rest+path, payload, http.Header{"Authorization": {s.basic(user, "user")}, "Content-Type": {"application/json"}})
}

// TestApprovalHoldsAndAppliesAChange: a write to a protected credential answers 202 with a change
// request and changes nothing; the requester cannot approve it, nor can a principal the rule does
// not name; another approver applies it with compare-and-set on the base revision. The request, the
// responses, the audit trail and the logs never carry the new value; every step's audit record names
// both principals.
func TestApprovalHoldsAndAppliesAChange(t *testing.T) {
	s, trail, logs := approvalStack(t, approvalPolicy)
	const newValue = "new-secret-value-7f3a"
	id := s.createCredential("prod-db", map[string]any{"password": "old-secret-value", "user": "app"})
	trail.take(t)

	held := s.as("alice", "PUT", "/v1/credentials/"+id, map[string]any{
		"credential_pairs": map[string]any{"password": newValue, "user": "app", "host": "db1"},
		"change_reason":    "rotate after the incident",
	})
	cr := held.must(t, 202)
	crID, _ := cr["id"].(string)
	if crID == "" || cr["status"] != "pending" || cr["status_url"] != "/v1/changes/"+crID || held.header.Get("Location") != "/v1/changes/"+crID {
		t.Fatalf("held write: %s (Location %q)", held.body, held.header.Get("Location"))
	}
	if cr["requested_by"] != "user:alice" || cr["reason"] != "rotate after the incident" || cr["base_revision"] != float64(1) || cr["action"] != "update" {
		t.Errorf("change request: %s", held.body)
	}
	changes, _ := cr["changes"].(map[string]any)
	if fmt.Sprint(changes["keys_added"]) != "[host]" || fmt.Sprint(changes["keys_changed"]) != "[password]" {
		t.Errorf("changes = %v, want host added and password changed", changes)
	}
	if got := s.get("/v1/credentials/"+id).must(t, 200); got["revision"] != float64(1) {
		t.Fatalf("a held write changed the credential: revision %v", got["revision"])
	}

	// The requester cannot approve; dave is no approver; neither changes anything.
	s.as("alice", "POST", "/v1/changes/"+crID+"/approve", map[string]any{}).must(t, 403)
	s.as("erin", "POST", "/v1/changes/"+crID+"/approve", map[string]any{}).must(t, 403)
	if got := s.as("bob", "GET", "/v1/changes/"+crID, nil).must(t, 200); got["status"] != "pending" || len(got["approvals"].([]any)) != 0 {
		t.Fatalf("after refused approvals: %v", got)
	}

	approved := s.as("bob", "POST", "/v1/changes/"+crID+"/approve", map[string]any{}).must(t, 200)
	if approved["status"] != "applied" || approved["applied_revision"] != float64(2) || approved["decided_by"] != "user:bob" {
		t.Fatalf("approved: %v", approved)
	}
	got := s.get("/v1/credentials/"+id).must(t, 200)
	pairs, _ := got["credential_pairs"].(map[string]any)
	if got["revision"] != float64(2) || pairs["password"] != newValue || pairs["host"] != "db1" || got["modified_by"] != "alice" {
		t.Fatalf("after approval: %v", got)
	}
	// Approving again is refused: the request is no longer pending.
	s.as("carol", "POST", "/v1/changes/"+crID+"/approve", map[string]any{}).must(t, 412)

	list := s.as("bob", "GET", "/v1/changes?status=applied", nil).must(t, 200)
	if items, _ := list["change_requests"].([]any); len(items) != 1 {
		t.Errorf("applied list: %v", list)
	}

	recs := trail.take(t)
	byAction := map[string]map[string]any{}
	for _, r := range recs {
		byAction[fmt.Sprint(r["action"])] = r
	}
	for action, want := range map[string]map[string]any{
		"change-request": {"principal": "alice", "requester": "user:alice", "change_request": crID},
		"change-approve": {"principal": "bob", "requester": "user:alice", "change_request": crID},
		"change-applied": {"principal": "bob", "requester": "user:alice", "change_request": crID, "revision": float64(2)},
		"update":         {"principal": "alice", "change_request": crID, "revision": float64(2)},
	} {
		r, ok := byAction[action]
		if !ok {
			t.Errorf("no %s audit record in %v", action, recs)
			continue
		}
		wantRecord(t, r, want)
		if action != "change-request" && fmt.Sprint(r["approvers"]) != "[user:bob]" {
			t.Errorf("%s record approvers = %v, want [user:bob]", action, r["approvers"])
		}
	}
	scanForValue(t, newValue, logs, trail, [][]byte{held.body})
}

// scanForValue fails when value appears in the logs, the audit trail or any of bodies.
func scanForValue(t *testing.T, value string, logs *observer.ObservedLogs, trail *auditTrail, bodies [][]byte) {
	t.Helper()
	for _, e := range logs.All() {
		line := e.Message + fmt.Sprint(e.ContextMap())
		if strings.Contains(line, value) {
			t.Errorf("a log line carries the value: %s", line)
		}
	}
	trail.mu.Lock()
	if bytes.Contains(trail.buf.Bytes(), []byte(value)) {
		t.Errorf("the audit trail carries the value")
	}
	trail.mu.Unlock()
	for _, b := range bodies {
		if bytes.Contains(b, []byte(value)) {
			t.Errorf("a response carries the value: %s", b)
		}
	}
}

// TestApprovalStaleBaseIsNeverMerged: a request whose record moved on before approval (here by an
// exempt principal's write) is marked stale on approval and applies nothing.
func TestApprovalStaleBaseIsNeverMerged(t *testing.T) {
	s, _, _ := approvalStack(t, approvalPolicy)
	id := s.createCredential("prod-api", map[string]any{"token": "t1"})
	cr := s.as("alice", "PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"token": "from-alice"}}).must(t, 202)
	// dave is exempt: his write applies at once, moving the base.
	s.as("dave", "PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"token": "from-dave"}}).must(t, 200)
	got := s.as("bob", "POST", "/v1/changes/"+cr["id"].(string)+"/approve", map[string]any{}).must(t, 200)
	if got["status"] != "stale" || got["applied_revision"] != nil {
		t.Fatalf("approval of a moved base: %v", got)
	}
	cred := s.get("/v1/credentials/"+id).must(t, 200)
	if cred["revision"] != float64(2) || cred["credential_pairs"].(map[string]any)["token"] != "from-dave" {
		t.Fatalf("a stale request was merged: %v", cred)
	}
}

// TestApprovalRejectCancelAndServices: a mapping change of a protected service is held too; the
// requester may cancel, nobody else; a rejection ends a request; an unprotected service applies.
func TestApprovalRejectCancelAndServices(t *testing.T) {
	s, _, _ := approvalStack(t, approvalPolicy)
	cred := s.createCredential("shared-config", map[string]any{"k": "v"})
	s.as("alice", "PUT", "/v1/services/dev-web", map[string]any{"credentials": []string{cred}}).must(t, 200)

	held := s.as("alice", "PUT", "/v1/services/prod-web", map[string]any{"credentials": []string{cred}}).must(t, 202)
	if held["resource_type"] != "service" || held["base_revision"] != float64(0) || fmt.Sprint(held["changes"].(map[string]any)["credentials_added"]) != "["+cred+"]" {
		t.Fatalf("held service write: %v", held)
	}
	s.get("/v1/services/prod-web").must(t, 404)
	crID := held["id"].(string)
	s.as("bob", "POST", "/v1/changes/"+crID+"/cancel", map[string]any{}).must(t, 403)
	cancelled := s.as("alice", "POST", "/v1/changes/"+crID+"/cancel", map[string]any{"reason": "wrong service"}).must(t, 200)
	if cancelled["status"] != "cancelled" || cancelled["decision_reason"] != "wrong service" {
		t.Fatalf("cancelled: %v", cancelled)
	}
	s.as("bob", "POST", "/v1/changes/"+crID+"/approve", map[string]any{}).must(t, 412)

	held = s.as("alice", "PUT", "/v1/services/prod-web", map[string]any{"credentials": []string{cred}, "change_reason": "launch"}).must(t, 202)
	rejected := s.as("carol", "POST", "/v1/changes/"+held["id"].(string)+"/reject", map[string]any{"reason": "not today"}).must(t, 200)
	if rejected["status"] != "rejected" || rejected["decided_by"] != "user:carol" {
		t.Fatalf("rejected: %v", rejected)
	}
	s.get("/v1/services/prod-web").must(t, 404)

	// A revert and an archive of a protected credential are held like an update.
	id := s.createCredential("prod-old", map[string]any{"a": "1"})
	s.as("dave", "PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"a": "2"}, "enabled": false}).must(t, 200)
	revert := s.as("alice", "PUT", "/v1/credentials/"+id+"/1?change_reason=undo", nil).must(t, 202)
	if revert["action"] != "revert" || revert["changes"].(map[string]any)["to_revision"] != float64(1) || revert["reason"] != "undo" {
		t.Errorf("held revert: %v", revert)
	}
	archive := s.as("alice", "POST", "/v1/credentials/"+id+"/archive", map[string]any{"force": true, "change_reason": "retired"}).must(t, 202)
	if archive["action"] != "archive" {
		t.Errorf("held archive: %v", archive)
	}
	// A dry run applies nothing, so it is not held; its answer is Confidant's, without a
	// change_request field.
	dry := s.as("alice", "POST", "/v1/credentials/"+id+"/archive", map[string]any{}).must(t, 200)
	if len(dry) != 1 || dry["result"] != "dry-run success" {
		t.Errorf("dry run: %v", dry)
	}
	s.get("/v1/credentials/"+id).must(t, 200)
}

// TestBreakGlass: a principal the rule allows applies at once with a reason, leaving a break_glass
// request and a distinct audit record; without a reason, or by anyone else, it is refused.
func TestBreakGlass(t *testing.T) {
	s, trail, _ := approvalStack(t, approvalPolicy)
	id := s.createCredential("prod-queue", map[string]any{"key": "k1"})
	s.as("oncall", "PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"key": "k2"}, "break_glass": true}).must(t, 400)
	s.as("alice", "PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"key": "k2"}, "break_glass": true, "change_reason": "outage"}).must(t, 403)
	trail.take(t)
	applied := s.as("oncall", "PUT", "/v1/credentials/"+id, map[string]any{
		"credential_pairs": map[string]any{"key": "k2"}, "break_glass": true, "change_reason": "outage INC-42",
	}).must(t, 200)
	if applied["revision"] != float64(2) {
		t.Fatalf("break glass: %v", applied)
	}
	list := s.as("bob", "GET", "/v1/changes?status=break_glass", nil).must(t, 200)
	items, _ := list["change_requests"].([]any)
	if len(items) != 1 || items[0].(map[string]any)["reason"] != "outage INC-42" || items[0].(map[string]any)["applied_revision"] != float64(2) {
		t.Fatalf("break-glass notices: %v", list)
	}
	if changes := items[0].(map[string]any)["changes"].(map[string]any); fmt.Sprint(changes["keys_changed"]) != "[key]" || fmt.Sprint(changes["keys_added"]) != "[]" {
		t.Errorf("break-glass notice changes = %v, want the key it changed, by name", changes)
	}
	found := false
	for _, r := range trail.take(t) {
		if r["action"] == "break-glass" {
			found = true
			wantRecord(t, r, map[string]any{"principal": "oncall", "requester": "user:oncall", "revision": float64(2), "resource_id": id})
		}
	}
	if !found {
		t.Error("no break-glass audit record")
	}
	// A service's notice names the mappings the write adds, read before it applied.
	c1, c2 := s.createCredential("svc-one", map[string]any{"a": "1"}), s.createCredential("svc-two", map[string]any{"b": "2"})
	s.as("dave", "PUT", "/v1/services/prod-svc", map[string]any{"credentials": []string{c1}}).must(t, 200)
	s.as("oncall", "PUT", "/v1/services/prod-svc", map[string]any{"credentials": []string{c1, c2}, "break_glass": true, "change_reason": "INC-43"}).must(t, 200)
	seen := false
	for _, item := range s.as("bob", "GET", "/v1/changes?status=break_glass", nil).must(t, 200)["change_requests"].([]any) {
		if cr := item.(map[string]any); cr["resource_id"] == "prod-svc" {
			seen = true
			if fmt.Sprint(cr["changes"].(map[string]any)["credentials_added"]) != "["+c2+"]" {
				t.Errorf("service break-glass notice changes = %v, want only %s added", cr["changes"], c2)
			}
		}
	}
	if !seen {
		t.Error("no break-glass notice of the service write")
	}
}
