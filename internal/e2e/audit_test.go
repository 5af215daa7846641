package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/audit/audittest"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// auditTrail is the stack's standard-output audit sink in a test: it keeps what was written, and
// refuses every write while broken is set (a closed pipe, a full disk).
type auditTrail struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	broken bool
}

func (a *auditTrail) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.broken {
		return 0, errors.New("audit sink broken by the test")
	}
	return a.buf.Write(p)
}

func (a *auditTrail) setBroken(broken bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.broken = broken
}

// take returns the records written since the last take, failing the test unless every line is one
// JSON object tagged "log":"audit".
func (a *auditTrail) take(t *testing.T) []map[string]any {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	recs := audittest.Records(t, a.buf.String())
	a.buf.Reset()
	return recs
}

// withOutcome returns the records with the outcome.
func withOutcome(recs []map[string]any, outcome string) []map[string]any {
	var out []map[string]any
	for _, r := range recs {
		if r["outcome"] == outcome {
			out = append(out, r)
		}
	}
	return out
}

func wantRecord(t *testing.T, rec map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if rec[k] != v {
			t.Errorf("audit record %s = %v, want %v (record %v)", k, rec[k], v, rec)
		}
	}
}

// recordFields are the fields every audit record carries.
var recordFields = []string{"log", "time", "service", "outcome", "action", "method", "resource", "resource_id",
	"principal", "principal_type", "auth_type", "request_id", "client_addr"}

func wantEveryField(t *testing.T, rec map[string]any) {
	t.Helper()
	for _, k := range recordFields {
		if _, ok := rec[k]; !ok {
			t.Errorf("audit record has no %q: %v", k, rec)
		}
	}
	if ts, _ := rec["time"].(string); ts == "" {
		t.Errorf("audit record time %v", rec["time"])
	} else if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
		t.Errorf("audit record time %q: %v", ts, err)
	}
}

// noValueOn fails when any of values is anywhere on the trail or in the log.
func noValueOn(t *testing.T, where string, text string, values ...string) {
	t.Helper()
	for _, v := range values {
		if strings.Contains(text, v) {
			t.Errorf("%q is on the %s", v, where)
		}
	}
}

// TestDeniedRequestsAreAudited: requests refused through the gateway, by the ACL or before there is a
// principal at all, leave an audit record saying who asked for what, with the request id the client
// sent and its address (so a denial can be tied to a client), and never the credential they presented.
func TestDeniedRequestsAreAudited(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	doc := `
rules:
  - principals: ["user:alice"]
    resources: ["*"]
    actions: ["*"]
  - principals: ["user:bob"]
    resources: ["credential-name:team-b-*"]
    actions: ["metadata", "get"]
`
	if err := os.WriteFile(policy, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	trail := &auditTrail{}
	s := startStackLogged(t, func(c *stack.Config) {
		c.Secrets.ACLModule = "policy"
		c.Secrets.ACLPolicyFile = policy
		c.AuditStdout = trail
	}, zap.New(core))
	teamA := s.createCredential("team-a-db", map[string]any{"password": "a-value"})
	bob := http.Header{"Authorization": {s.basic("bob", "user")}, "X-Request-Id": {"req-bob-denied-1"}}

	trail.take(t)
	s.do("GET", s.rest+"/v1/credentials/"+teamA, "", bob).must(t, 403)
	recs := trail.take(t)
	entries := withOutcome(recs, "denied")
	if len(entries) != 1 {
		t.Fatalf("%d denied audit records for one refusal, want 1: %v", len(entries), recs)
	}
	wantEveryField(t, entries[0])
	wantRecord(t, entries[0], map[string]any{"service": "secrets", "principal": "bob", "principal_type": "user", "auth_type": "kms",
		"action": "metadata", "resource": "credential", "resource_id": teamA, "code": "PermissionDenied",
		"method": "/secrets.v1.SecretsService/GetCredential", "request_id": "req-bob-denied-1", "client_addr": "127.0.0.1"})

	bogus := "Basic " + base64.StdEncoding.EncodeToString([]byte("2/user/mallory:bm90LWEtdG9rZW4tYnV0LWxvbmctZW5vdWdoLXRvLWxvb2stbGlrZS1vbmU="))
	s.do("GET", s.rest+"/v1/credentials/"+teamA, "", http.Header{"Authorization": {""}, "X-Request-Id": {"req-anon-2"}}).must(t, 401)
	s.do("PUT", s.rest+"/v1/credentials/"+teamA, `{"credential_pairs":{"password":"b-value"}}`,
		http.Header{"Authorization": {bogus}, "X-Request-Id": {"req-mallory-3"}, "Content-Type": {"application/json"}}).must(t, 403)
	recs = trail.take(t)
	entries = withOutcome(recs, "denied")
	if len(entries) != 2 {
		t.Fatalf("%d denied audit records for two refused authentications, want 2: %v", len(entries), recs)
	}
	for i, want := range []map[string]any{
		{"action": "GetCredential", "code": "Unauthenticated", "request_id": "req-anon-2"},
		{"action": "UpdateCredential", "code": "PermissionDenied", "request_id": "req-mallory-3"},
	} {
		e := entries[i]
		wantEveryField(t, e)
		wantRecord(t, e, want)
		wantRecord(t, e, map[string]any{"principal": "", "resource": "credential", "resource_id": teamA, "client_addr": "127.0.0.1"})
		if !strings.HasPrefix(fmt.Sprint(e["method"]), "/secrets.v1.SecretsService/") || e["reason"] == "" {
			t.Errorf("audit record of a refused authentication: %v", e)
		}
	}
	if len(recs) != 2 {
		t.Errorf("refused calls wrote %d records, want only their 2 denials: %v", len(recs), recs)
	}
	// A direct gRPC caller (client.crt) may name its own request id, but not its address: the
	// x-forwarded-for it sends is gateway-only metadata, so the record has its real peer address.
	direct := secretsv1.NewSecretsServiceClient(s.dial(s.SecretsAddr))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-request-id", "req-direct-4", "x-forwarded-for", "203.0.113.9")
	if _, err := direct.GetCredential(ctx, &secretsv1.GetCredentialRequest{Id: teamA}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("direct call without credentials: %v", err)
	}
	recs = trail.take(t)
	if entries = withOutcome(recs, "denied"); len(entries) != 1 {
		t.Fatalf("%d denied audit records for a refused direct call, want 1: %v", len(entries), recs)
	}
	wantRecord(t, entries[0], map[string]any{"request_id": "req-direct-4", "client_addr": "127.0.0.1", "action": "GetCredential"})

	var all strings.Builder
	for _, e := range logs.All() {
		fmt.Fprint(&all, e.Message, e.ContextMap())
	}
	noValueOn(t, "log", all.String(), "bm90LWEtdG9rZW4", "a-value", "b-value")
	raw, _ := json.Marshal(recs)
	noValueOn(t, "audit trail", string(raw), "bm90LWEtdG9rZW4", "a-value", "b-value")
}

// TestAuditTrailIgnoresTheLogLevel: with the log at warn (no info line at all), a credential created
// through the gateway still leaves its audit records, pending then allowed, with every field: who
// (alice, a user, by kmsauth), what (create on that credential, revision 1, through CreateCredential),
// the request id the client sent, its address; and never the value.
func TestAuditTrailIgnoresTheLogLevel(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	trail := &auditTrail{}
	s := startStackLogged(t, func(c *stack.Config) {
		c.Log.Level = "warn"
		c.AuditStdout = trail
	}, zap.New(core))
	trail.take(t)
	resp := s.do("POST", s.rest+"/v1/credentials", `{"name":"audited","credential_pairs":{"api_key":"v4lue-never-audited"},"documentation":"d"}`,
		http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"req-create-7"}})
	id, _ := resp.must(t, 200)["id"].(string)
	if got := resp.header.Get("X-Request-Id"); got != "req-create-7" {
		t.Fatalf("the gateway answered X-Request-Id %q, want the client's", got)
	}
	recs := trail.take(t)
	if len(recs) != 2 {
		t.Fatalf("%d audit records for one create, want pending and allowed: %v", len(recs), recs)
	}
	common := map[string]any{"service": "secrets", "principal": "alice", "principal_type": "user", "auth_type": "kms",
		"method": "/secrets.v1.SecretsService/CreateCredential", "resource": "credential",
		"request_id": "req-create-7", "client_addr": "127.0.0.1"}
	wantEveryField(t, recs[0])
	wantRecord(t, recs[0], common)
	wantRecord(t, recs[0], map[string]any{"outcome": "pending", "action": "CreateCredential"})
	wantEveryField(t, recs[1])
	wantRecord(t, recs[1], common)
	wantRecord(t, recs[1], map[string]any{"outcome": "allowed", "action": "create", "resource_id": id, "revision": float64(1)})
	raw, _ := json.Marshal(recs)
	noValueOn(t, "audit trail", string(raw), "v4lue-never-audited")

	// A write that fails (bad input) is pending, then failed with its code and without its message,
	// which may quote the request.
	s.do("POST", s.rest+"/v1/credentials", `{"name":"audited","credential_pairs":{"api_key":"v4lue-never-audited"},"documentation":"d"}`,
		http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"req-create-8"}}).must(t, 409)
	recs = trail.take(t)
	if len(recs) != 2 || recs[0]["outcome"] != "pending" {
		t.Fatalf("a failed create: records %v, want pending and failed", recs)
	}
	wantEveryField(t, recs[1])
	wantRecord(t, recs[1], map[string]any{"outcome": "failed", "action": "CreateCredential", "code": "AlreadyExists", "reason": nil,
		"request_id": "req-create-8", "principal": "alice"})
	raw, _ = json.Marshal(recs)
	noValueOn(t, "audit trail", string(raw), "v4lue-never-audited")

	for _, e := range logs.All() {
		if e.Level < zapcore.WarnLevel {
			t.Errorf("a %s line at log level warn: %s", e.Level, e.Message)
		}
	}
}

// TestWritesFailClosedWhileTheAuditTrailIsDown: while no audit sink can be written, every write
// answers 503 with a message that says why and changes nothing; so does every read that would give
// secret values out (a credential's or a service's values: Vault's rule, issue 40), while reads
// without values go on; once the sink works again, so do writes and reads of values.
func TestWritesFailClosedWhileTheAuditTrailIsDown(t *testing.T) {
	trail := &auditTrail{}
	s := startStackLogged(t, func(c *stack.Config) { c.AuditStdout = trail }, nil)
	id := s.createCredential("before-the-outage", map[string]any{"password": "v1"})
	svc := map[string]any{"credentials": []string{id}}
	s.call("PUT", "/v1/services/billing", svc).must(t, 200)

	trail.setBroken(true)
	for _, w := range []struct{ method, path string }{
		{"POST", "/v1/credentials"},
		{"PUT", "/v1/credentials/" + id},
		{"PUT", "/v1/services/billing"},
		{"PUT", "/v1/services/payroll"},
	} {
		var body any = map[string]any{"name": "during-the-outage", "credential_pairs": map[string]any{"password": "v2"}, "documentation": "d"}
		if strings.Contains(w.path, "services") {
			body = map[string]any{"credentials": []string{}}
		}
		got := s.call(w.method, w.path, body).must(t, 503)
		if msg := fmt.Sprint(got["error"]); !strings.Contains(msg, "audit trail cannot be written") {
			t.Errorf("%s %s: error %q does not say the audit trail is down", w.method, w.path, msg)
		}
	}
	// Reads of values are refused: no disclosure without its record.
	for _, path := range []string{"/v1/credentials/" + id, "/v1/services/billing"} {
		got := s.get(path).must(t, 503)
		if msg := fmt.Sprint(got["error"]); !strings.Contains(msg, "secret values are not given out") {
			t.Errorf("GET %s: error %q does not say values are withheld while the trail is down", path, msg)
		}
	}
	// Reads without values go on, and show that nothing changed.
	cred := s.get("/v1/credentials/"+id+"?metadata_only=True").must(t, 200)
	if rev := cred["revision"]; rev != float64(1) {
		t.Errorf("credential revision %v during the outage, want 1", rev)
	}
	list := s.get("/v1/credentials").must(t, 200)
	if n := len(list["credentials"].([]any)); n != 1 {
		t.Errorf("%d credentials after refused creates, want 1", n)
	}
	billing := s.get("/v1/services/billing?metadata_only=True").must(t, 200)
	if n := len(billing["credentials"].([]any)); n != 1 {
		t.Errorf("service billing has %d credentials after a refused update, want 1", n)
	}
	s.get("/v1/services/payroll").must(t, 404)

	trail.setBroken(false)
	trail.take(t)
	cred = s.get("/v1/credentials/"+id).must(t, 200)
	jsonEqual(t, "credential_pairs after the outage", cred["credential_pairs"], `{"password":"v1"}`)
	trail.take(t)
	s.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"password": "v2"}}).must(t, 200)
	recs := trail.take(t)
	if len(recs) != 2 || recs[0]["outcome"] != "pending" || recs[1]["outcome"] != "allowed" || recs[1]["revision"] != float64(2) {
		t.Errorf("a write after the outage: records %v, want pending then allowed revision 2", recs)
	}
}

// TestFullAuditFileFailsWritesClosed: an audit file that cannot take a record (a full disk: Linux's
// /dev/full answers every write with ENOSPC) and no other sink: writes answer 503 and change nothing,
// reads go on.
func TestFullAuditFileFailsWritesClosed(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs /dev/full")
	}
	core, logs := observer.New(zapcore.InfoLevel)
	s := startStackLogged(t, func(c *stack.Config) {
		c.Audit.Stdout = false
		c.Audit.File = "/dev/full"
	}, zap.New(core))
	got := s.call("POST", "/v1/credentials", map[string]any{"name": "c", "credential_pairs": map[string]any{"k": "v"}, "documentation": "d"}).must(t, 503)
	if msg := fmt.Sprint(got["error"]); !strings.Contains(msg, "audit trail cannot be written") {
		t.Errorf("error %q does not say the audit trail is down", msg)
	}
	if n := len(s.get("/v1/credentials").must(t, 200)["credentials"].([]any)); n != 0 {
		t.Errorf("%d credentials after a refused create, want 0", n)
	}
	if n := logs.FilterMessageSnippet("audit sink cannot be written").FilterField(zap.String("sink", "file")).Len(); n != 1 {
		t.Errorf("%d error lines about the audit file, want 1: %v", n, logs.All())
	}
}

// TestChatActionsAndDenialsAreAudited: the chat service records every refused call (who, which bot,
// which Slack method, the request id and address) and every action (pending, then its outcome),
// never the message; while the trail is down an action is refused with 503 and Slack is not called.
func TestChatActionsAndDenialsAreAudited(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	trail := &auditTrail{}
	s := startChat(t, f, chatTeams+chatACL, func(c *stack.Config) { c.AuditStdout = trail })
	action := func(caller, requestID, text string) response {
		h := http.Header{"Content-Type": {"application/json"}, "X-Proxy-Downstream-Service-Cluster": {caller}, "X-Request-Id": {requestID}}
		return s.do("POST", s.rest+"/api/v2/chat/action/acme/pingbot", `{"action":"chat.postMessage","kwargs":{"channel":"C0GENERAL","text":"`+text+`"}}`, h)
	}
	common := map[string]any{"service": "chat", "principal_type": "internal", "auth_type": "gateway-identity", "action": "chat.postMessage",
		"method": "/chat.v1.ChatService/PerformAction", "resource": "bot", "resource_id": "acme/pingbot", "client_addr": "127.0.0.1"}

	trail.take(t)
	errorBody(t, action("viewer", "req-chat-denied", "t0p-secret-message"), 403)
	recs := trail.take(t)
	if len(recs) != 1 {
		t.Fatalf("a refused action: records %v, want one denial", recs)
	}
	wantEveryField(t, recs[0])
	// The gateway refuses this call before reading its body (the caller may not use the route
	// whatever it sends), so the record is the gateway's: the RPC as the action and the route as the
	// resource, since the chat action named in the body was never read.
	wantRecord(t, recs[0], map[string]any{"service": "chat", "principal_type": "internal", "auth_type": "gateway-identity",
		"method": "/chat.v1.ChatService/PerformAction", "action": "PerformAction", "resource": "route",
		"resource_id": "/api/v2/chat/action/acme/pingbot", "client_addr": "127.0.0.1"})
	wantRecord(t, recs[0], map[string]any{"outcome": "denied", "principal": "viewer", "request_id": "req-chat-denied", "code": "PermissionDenied"})

	action("echobot", "req-chat-ok", "t0p-secret-message").must(t, 200)
	recs = trail.take(t)
	if len(recs) != 2 {
		t.Fatalf("an action: records %v, want pending and allowed", recs)
	}
	for i, outcome := range []string{"pending", "allowed"} {
		wantEveryField(t, recs[i])
		wantRecord(t, recs[i], common)
		wantRecord(t, recs[i], map[string]any{"outcome": outcome, "principal": "echobot", "request_id": "req-chat-ok"})
	}
	raw, _ := json.Marshal(recs)
	noValueOn(t, "audit trail", string(raw), "t0p-secret-message")

	sent := len(f.Requests("chat.postMessage"))
	trail.setBroken(true)
	if m := errorBody(t, action("echobot", "req-chat-down", "not sent"), 503); !strings.Contains(fmt.Sprint(m["error"]), "audit trail cannot be written") {
		t.Errorf("503 error %v does not say the audit trail is down", m["error"])
	}
	if n := len(f.Requests("chat.postMessage")); n != sent {
		t.Errorf("Slack got %d chat.postMessage calls while the trail was down", n-sent)
	}
	// Lookups are reads: they go on.
	s.chatCall("GET", "/api/v1/chat/get_team/acme", "echobot", "").must(t, 200)
}

// TestAdminMutationsAreAudited: a mutation through the admin listener (a log level changed, counters
// reset) is on the audit trail with the client's address and its query; a read is not.
func TestAdminMutationsAreAudited(t *testing.T) {
	trail := &auditTrail{}
	s := startStackLogged(t, func(c *stack.Config) { c.AuditStdout = trail }, nil)
	trail.take(t)
	for _, path := range []string{"/logging", "/stats", "/clusters"} {
		if r := s.admin(path); r.code != 200 {
			t.Fatalf("GET %s: %d", path, r.code)
		}
	}
	if recs := trail.take(t); len(recs) != 0 {
		t.Fatalf("admin reads wrote audit records: %v", recs)
	}
	for _, path := range []string{"/logging?level=warning", "/reset_counters"} {
		if r := s.do("POST", s.adm+path, "", nil); r.code != 200 {
			t.Fatalf("POST %s: %d %s", path, r.code, r.body)
		}
	}
	recs := trail.take(t)
	if len(recs) != 2 {
		t.Fatalf("two admin mutations: records %v", recs)
	}
	for i, want := range []map[string]any{
		{"action": "SetLogging", "resource": "logging", "resource_id": "level=warning"},
		{"action": "ResetCounters", "resource": "reset_counters", "resource_id": ""},
	} {
		wantEveryField(t, recs[i])
		wantRecord(t, recs[i], want)
		wantRecord(t, recs[i], map[string]any{"service": "admin", "outcome": "allowed", "principal": "", "auth_type": "admin-listener", "client_addr": "127.0.0.1"})
	}
}

// TestLoginsAreAudited: a login through a one-time link is an allowed login record naming the user;
// the link used again is a denied record (an authentication failure on a public route), with the
// request id and address, and never the link's code.
func TestLoginsAreAudited(t *testing.T) {
	trail := &auditTrail{}
	s := startStackLogged(t, func(c *stack.Config) { c.AuditStdout = trail }, nil)
	link := s.loginLink(t, "carol@example.com")
	code := link[strings.Index(link, "code=")+len("code="):]
	trail.take(t)
	open := func(requestID string) response {
		return s.do(http.MethodGet, link, "", http.Header{"Authorization": {""}, "X-Request-Id": {requestID}})
	}
	if r := open("req-login-1"); r.code != http.StatusFound {
		t.Fatalf("first use: %d %s", r.code, r.body)
	}
	if r := open("req-login-2"); r.code != http.StatusUnauthorized {
		t.Fatalf("second use: %d %s", r.code, r.body)
	}
	recs := trail.take(t)
	if len(recs) != 2 {
		t.Fatalf("two logins: records %v", recs)
	}
	common := map[string]any{"service": "secrets", "action": "login", "resource": "session", "method": "/secrets.v1.SecretsService/Login", "client_addr": "127.0.0.1"}
	wantEveryField(t, recs[0])
	wantRecord(t, recs[0], common)
	wantRecord(t, recs[0], map[string]any{"outcome": "allowed", "principal": "carol@example.com", "auth_type": "login link", "request_id": "req-login-1"})
	wantEveryField(t, recs[1])
	wantRecord(t, recs[1], map[string]any{"outcome": "denied", "action": "Login", "resource": "session", "principal": "", "code": "Unauthenticated",
		"request_id": "req-login-2", "client_addr": "127.0.0.1"})
	if reason := fmt.Sprint(recs[1]["reason"]); !strings.Contains(reason, "already used") {
		t.Errorf("denied login reason %q", reason)
	}
	raw, _ := json.Marshal(recs)
	noValueOn(t, "audit trail", string(raw), code)
}

// TestReadsWhenDownGivesValuesOut: with -audit-reads-when-down an operator chooses that reads of
// values go on while no audit sink can record them (writes are still refused), and the start says so
// loudly.
func TestReadsWhenDownGivesValuesOut(t *testing.T) {
	trail := &auditTrail{}
	core, logs := observer.New(zapcore.InfoLevel)
	s := startStackLogged(t, func(c *stack.Config) {
		c.AuditStdout = trail
		c.Audit.ReadsWhenDown = true
	}, zap.New(core))
	if logs.FilterMessageSnippet("-audit-reads-when-down is on").Len() != 1 {
		t.Errorf("no warning at start about -audit-reads-when-down")
	}
	id := s.createCredential("read-while-down", map[string]any{"password": "v1"})
	trail.setBroken(true)
	cred := s.get("/v1/credentials/"+id).must(t, 200)
	jsonEqual(t, "credential_pairs while the trail is down", cred["credential_pairs"], `{"password":"v1"}`)
	s.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"password": "v2"}}).must(t, 503)
}
