package e2e

import (
	"encoding/base64"
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

// deniedAuditEntries returns the entries of the secrets audit log that record a refusal.
func deniedAuditEntries(logs *observer.ObservedLogs) []map[string]any {
	var out []map[string]any
	for _, e := range logs.All() {
		if fields := e.ContextMap(); strings.HasSuffix(e.LoggerName, "audit") && fields["result"] == "denied" {
			out = append(out, fields)
		}
	}
	return out
}

// TestDeniedRequestsAreAudited: requests refused through the gateway, by the ACL or before there is a
// principal at all, leave an audit entry saying who asked for what, and never the credential they
// presented.
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
	s := startStackLogged(t, func(c *stack.Config) {
		c.Secrets.ACLModule = "policy"
		c.Secrets.ACLPolicyFile = policy
	}, zap.New(core))
	teamA := s.createCredential("team-a-db", map[string]any{"password": "a-value"})
	bob := http.Header{"Authorization": {s.basic("bob", "user")}}

	logs.TakeAll()
	s.do("GET", s.rest+"/v1/credentials/"+teamA, "", bob).must(t, 403)
	entries := deniedAuditEntries(logs)
	if len(entries) != 1 {
		t.Fatalf("%d denied audit entries for one refusal, want 1: %v", len(entries), entries)
	}
	for k, want := range map[string]any{"principal": "bob", "principal_type": "user", "action": "metadata", "resource": "credential", "id": teamA} {
		if entries[0][k] != want {
			t.Errorf("audit entry %s = %v, want %v (entry %v)", k, entries[0][k], want, entries[0])
		}
	}

	logs.TakeAll()
	s.do("GET", s.rest+"/v1/credentials/"+teamA, "", http.Header{"Authorization": {""}}).must(t, 401)
	bogus := "Basic " + base64.StdEncoding.EncodeToString([]byte("2/user/mallory:bm90LWEtdG9rZW4tYnV0LWxvbmctZW5vdWdoLXRvLWxvb2stbGlrZS1vbmU="))
	s.do("GET", s.rest+"/v1/credentials/"+teamA, "", http.Header{"Authorization": {bogus}}).must(t, 403)
	entries = deniedAuditEntries(logs)
	if len(entries) != 2 {
		t.Fatalf("%d denied audit entries for two refused authentications, want 2: %v", len(entries), entries)
	}
	for _, e := range entries {
		if e["principal"] != "" || e["id"] != teamA || !strings.HasSuffix(fmt.Sprint(e["action"]), "/GetCredential") || e["reason"] == "" {
			t.Errorf("audit entry of a refused authentication: %v", e)
		}
	}
	for _, e := range logs.All() {
		if line := fmt.Sprint(e.Message, e.ContextMap()); strings.Contains(line, "bm90LWEtdG9rZW4") || strings.Contains(line, "a-value") {
			t.Errorf("a credential is on the log: %s", line)
		}
	}
}
