package secrets

import (
	"context"
	"strings"
	"testing"
)

const testPolicy = `
rules:
  - principals: ["user:*@example.com"]
    resources: ["credential:*", "service:*"]
    actions: ["list", "metadata"]
  - principals: ["user:dba@example.com"]
    resources: ["credential-name:db-*", "service:api-*"]
    actions: ["*"]
  - principals: ["service:*"]
    resources: ["service:{self}"]
    actions: ["metadata", "get"]
  - effect: deny
    principals: ["user:dba@example.com"]
    resources: ["credential-name:db-prod-root"]
    actions: ["get"]
`

func TestPolicyACL(t *testing.T) {
	names := map[string]string{"c1": "db-orders", "c2": "payments-key", "c3": "db-prod-root"}
	acl, err := ParsePolicyACL([]byte(testPolicy), func(_ context.Context, id string) (string, bool) {
		n, ok := names[id]
		return n, ok
	})
	if err != nil {
		t.Fatal(err)
	}
	dba := Principal{Name: "dba@example.com", Type: "user"}
	dev := Principal{Name: "dev@example.com", Type: "user"}
	outsider := Principal{Name: "eve@evil.example", Type: "user"}
	api := Principal{Name: "api-orders", Type: "service"}
	tests := []struct {
		p                    Principal
		resource, action, id string
		extra                map[string]any
		want                 bool
	}{
		{dev, ResourceCredential, ActionList, "", nil, true},
		{dev, ResourceCredential, ActionMetadata, "c1", nil, true},
		{dev, ResourceCredential, ActionGet, "c1", nil, false},
		{dev, ResourceCredential, ActionCreate, "", nil, false},
		{dba, ResourceCredential, ActionGet, "c1", nil, true},
		{dba, ResourceCredential, ActionUpdate, "c1", nil, true},
		{dba, ResourceCredential, ActionGet, "c2", nil, false},
		{dba, ResourceCredential, ActionGet, "c3", nil, false}, // the deny rule wins
		{dba, ResourceCredential, ActionUpdate, "c3", nil, true},
		{dba, ResourceCredential, ActionGet, "unknown", nil, false},
		{dba, ResourceService, ActionUpdate, "api-orders", map[string]any{"new_credential_ids": []string{"c1"}}, true},
		{dba, ResourceService, ActionUpdate, "api-orders", map[string]any{"new_credential_ids": []string{"c1", "c2"}}, false},
		{dba, ResourceService, ActionUpdate, "billing", nil, false},
		{outsider, ResourceCredential, ActionList, "", nil, false},
		{api, ResourceService, ActionGet, "api-orders", nil, true},
		{api, ResourceService, ActionGet, "api-other", nil, false},
		{api, ResourceCredential, ActionGet, "c1", nil, false},
	}
	for _, tt := range tests {
		if got := acl.Allowed(context.Background(), tt.p, tt.resource, tt.action, tt.id, tt.extra); got != tt.want {
			t.Errorf("%s %s/%s(%s) %v = %v, want %v", tt.p.Name, tt.resource, tt.action, tt.id, tt.extra, got, tt.want)
		}
	}
}

func TestPolicyACLRejectsMistakes(t *testing.T) {
	for doc, want := range map[string]string{
		"rules:\n  - principals: [\"group:x\"]\n    resources: [\"credential:*\"]\n    actions: [get]\n":     "principal",
		"rules:\n  - principals: [\"*\"]\n    resources: [\"secret:*\"]\n    actions: [get]\n":               "resource",
		"rules:\n  - principals: [\"*\"]\n    resources: [\"credential:*\"]\n    actions: [read]\n":          "unknown action",
		"rules:\n  - principals: [\"*\"]\n    resources: [\"credential:*\"]\n":                               "required",
		"rules:\n  - effect: maybe\n    principals: [\"*\"]\n    resources: [\"*\"]\n    actions: [\"*\"]\n": "effect",
		"rule:\n  - {}\n": "field rule not found",
		"rules:\n  - principals: [\"user:[\"]\n    resources: [\"*\"]\n    actions: [\"*\"]\n": "principal",
	} {
		_, err := ParsePolicyACL([]byte(doc), nil)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "GANTRY_ACL_POLICY_FILE") {
			t.Errorf("policy %q: err %v, want one mentioning %q", doc, err, want)
		}
	}
}

func TestPolicyACLCertificates(t *testing.T) {
	acl, err := ParsePolicyACL([]byte(`
rules:
  - principals: ["service:*"]
    resources: ["certificate:{self}.example.com", "certificate:{self}.internal", "ca:*"]
    actions: ["get", "list"]
  - principals: ["user:ops@example.com"]
    resources: ["certificate:*"]
    actions: ["get"]
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	api := Principal{Name: "api", Type: "service"}
	ops := Principal{Name: "ops@example.com", Type: "user"}
	tests := []struct {
		p       Principal
		kind    string
		id      string
		san     []string
		allowed bool
	}{
		{api, ResourceCertificate, "api.example.com", nil, true},
		{api, ResourceCertificate, "api.example.com", []string{"api.internal"}, true},
		{api, ResourceCertificate, "api.example.com", []string{"web.example.com"}, false}, // SANs are names too
		{api, ResourceCertificate, "web.example.com", nil, false},
		{api, ResourceCA, "", nil, true},
		{api, ResourceCA, "development", nil, true},
		{ops, ResourceCertificate, "anything", []string{"x.example.com"}, true},
		{ops, ResourceCA, "development", nil, false},
	}
	for _, tt := range tests {
		action := ActionGet
		if tt.id == "" {
			action = ActionList
		}
		got := acl.Allowed(ctx, tt.p, tt.kind, action, tt.id, map[string]any{"ca": "development", "san": tt.san})
		if got != tt.allowed {
			t.Errorf("%s %s %s %v: %v, want %v", tt.p.Name, tt.kind, tt.id, tt.san, got, tt.allowed)
		}
	}
}
