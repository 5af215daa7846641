package chat

import (
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"go.yaml.in/yaml/v3"

	"github.com/gantry-dev/gantry/pkg/wirekeys"
)

func mustACL(t *testing.T, doc string) *acl {
	t.Helper()
	var a Authorization
	if err := yaml.Unmarshal([]byte(doc), &a); err != nil {
		t.Fatal(err)
	}
	compiled, err := compileACL(a)
	if err != nil {
		t.Fatal(err)
	}
	return compiled
}

func req(method, path string, headers map[string]string) AccessRequest {
	return AccessRequest{Method: method, Path: path, Header: func(n string) string { return headers[n] }}
}

func TestACL(t *testing.T) {
	full := `
checks:
  - module: "omnibot.authnz:allowed_paths"
    kwargs: {paths: ["/api/v1/chat/get_team/", "/api/v2/chat/action/acme/pingbot", "/api/v1/slack/get_user/"]}
  - module: "omnibot.authnz.envoy_checks:envoy_internal_check"
  - module: "omnibot.authnz.envoy_checks:envoy_permissions_check"
permissions:
  read: {methods: ["GET"], paths: ["/api/v1/chat/get_"]}
  write: {methods: ["POST"], paths: ["/api/v2/chat/action/acme/pingbot"]}
  public_team: {methods: ["GET"], paths: ["/api/v1/chat/get_team/open"], internal_only: false}
bindings:
  "echobot.*": ["write", "read"]
  "reader": ["read", "no-such-permission"]
`
	internal := map[string]string{wirekeys.ProxyInternal: "true"}
	as := func(id string, internalHdr string) map[string]string {
		return map[string]string{wirekeys.ProxyInternal: internalHdr, wirekeys.DownstreamServiceCluster: id}
	}
	tests := []struct {
		name   string
		acl    string
		req    AccessRequest
		denied string // substring of the denial, "" when allowed
	}{
		{"no checks denies everything", "permissions: {}", req("GET", "/api/v1/chat/get_team/acme", internal), "no access-control checks"},
		{"allowed path, prefix match", "checks: [{module: allowed_paths, kwargs: {paths: ['/api/v1/chat/get_team/']}}]", req("GET", "/api/v1/chat/get_team/acme", nil), ""},
		{"path anchored at the start", "checks: [{module: allowed_paths, kwargs: {paths: ['get_team']}}]", req("GET", "/api/v1/chat/get_team/acme", nil), "is not allowed"},
		{"Omnibot spelling of the path", "checks: [{module: allowed_paths, kwargs: {paths: ['/api/v1/slack/get_team/']}}]", req("GET", "/api/v1/slack/get_team/acme", nil), ""},
		{"a pattern of one spelling does not open another", "checks: [{module: allowed_paths, kwargs: {paths: ['/api/v1/slack/get_team/']}}]", req("GET", "/api/v1/chat/get_team/acme", nil), "path /api/v1/chat/get_team/acme is not allowed"},
		{"Omnibot's v1 grant does not open its v2 action route", "checks: [{module: allowed_paths, kwargs: {paths: ['/api/v1/']}}]", req("POST", "/api/v2/slack/action/acme/pingbot", nil), "path /api/v2/slack/action/acme/pingbot is not allowed"},
		{"a denial names the path the caller used", "checks: [{module: allowed_paths, kwargs: {paths: ['/api/v1/']}}]",
			AccessRequest{Method: "POST", Path: "/api/v2/chat/action/acme/pingbot", Called: "/api/v1/chat/action/acme/pingbot", Header: func(string) string { return "" }},
			"path /api/v1/chat/action/acme/pingbot (checked as /api/v2/chat/action/acme/pingbot) is not allowed"},
		{"internal header exactly true", "checks: [{module: envoy_internal_check}]", req("GET", "/x", map[string]string{wirekeys.ProxyInternal: "True"}), "external requests"},
		{"internal header absent", "checks: [{module: internal_check}]", req("GET", "/x", nil), "external requests"},
		{"internal header set", "checks: [{module: internal_check}]", req("GET", "/x", internal), ""},
		{"Envoy header name maps to gantry's", "checks: [{module: internal_check, kwargs: {header: X-Envoy-Internal}}]", req("GET", "/x", internal), ""},
		{"a custom header name is read as gantry's", "checks: [{module: internal_check, kwargs: {header: X-Nginx-Internal}}]", req("GET", "/x", internal), ""},
		{"the custom header itself counts for nothing", "checks: [{module: internal_check, kwargs: {header: X-Nginx-Internal}}]", req("GET", "/x", map[string]string{"x-nginx-internal": "true"}), "external requests"},
		{"a custom identity header is read as gantry's", "checks: [{module: permissions_check, kwargs: {header: X-Caller}}]\npermissions: {p: {methods: [GET], paths: [/x]}}\nbindings: {billing: [p]}",
			req("GET", "/x", map[string]string{"x-caller": "billing"}), "no caller identity (x-proxy-downstream-service-cluster)"},
		{"bound caller allowed", full, req("POST", "/api/v2/chat/action/acme/pingbot", as("echobot-staging", "true")), ""},
		{"binding is a prefix regex", full, req("GET", "/api/v1/chat/get_team/acme", as("readerx", "true")), ""},
		{"wrong method", full, req("GET", "/api/v2/chat/action/acme/pingbot", as("echobot", "true")), "may not GET"},
		{"caller without the permission", full, req("POST", "/api/v2/chat/action/acme/pingbot", as("reader", "true")), "may not POST"},
		{"no identity", full, req("GET", "/api/v1/chat/get_team/acme", internal), "no caller identity"},
		{"external caller", full, req("GET", "/api/v1/chat/get_team/acme", as("reader", "")), "external requests"},
		{"internal_only false opens the route to external callers", full, req("GET", "/api/v1/chat/get_team/open", as("reader", "")), ""},
		{"path not in allowed_paths", full, req("GET", "/api/v1/chat/get_ims/acme/pingbot", as("reader", "true")), "is not allowed"},
		{"path allowed in Omnibot spelling only", full, req("GET", "/api/v1/chat/get_user/acme/pingbot/a@b.c", as("reader", "true")), "is not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := mustACL(t, tt.acl).authorize(tt.req)
			if tt.denied == "" {
				if err != nil {
					t.Fatalf("denied: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.denied) || !errors.Is(err, ErrForbidden) {
				t.Fatalf("err = %v, want a denial containing %q", err, tt.denied)
			}
		})
	}
}

// TestCustomHeaderIsReportedAtStart: a kwargs.header other than gantry's (or Omnibot's Envoy name
// for it) is read as gantry's header, and said so at start, not accepted without a word.
func TestCustomHeaderIsReportedAtStart(t *testing.T) {
	const doc = `checks: [{module: internal_check, kwargs: {header: X-Nginx-Internal}}, {module: envoy_permissions_check, kwargs: {header: x-envoy-downstream-service-cluster}}]`
	a := mustACL(t, doc)
	if len(a.warnings) != 1 || !strings.Contains(a.warnings[0], `"X-Nginx-Internal" is read as x-proxy-internal`) {
		t.Errorf("warnings %q, want one naming X-Nginx-Internal (and none for Omnibot's Envoy name)", a.warnings)
	}
	fc, err := ParseFileConfig([]byte("teams: {acme: T0FAKE001}\nauthorization: {" + doc + "}\n"))
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	if _, err := NewService(DefaultConfig(), fc, testCreds, zap.New(core)); err != nil {
		t.Fatal(err)
	}
	if got := logs.FilterMessageSnippet("X-Nginx-Internal").Len(); got != 1 {
		t.Errorf("%d start-up warnings name X-Nginx-Internal, want 1: %v", got, logs.All())
	}
}

func TestACLConfigErrors(t *testing.T) {
	tests := []struct{ doc, want string }{
		{"checks: [{module: 'omnibot.authnz:nope'}]", "unknown check"},
		{"checks: [{module: allowed_paths}]", "kwargs.paths"},
		{"checks: [{module: allowed_paths, kwargs: {paths: ['(']}}]", "pattern"},
		{"permissions: {p: {methods: [GET]}}", "needs methods and paths"},
		{"bindings: {'(': [p]}", "bindings"},
		{"checks: [{module: internal_check, kwargs: {header: 3}}]", "kwargs.header"},
	}
	for _, tt := range tests {
		var a Authorization
		if err := yaml.Unmarshal([]byte(tt.doc), &a); err != nil {
			t.Fatal(err)
		}
		if _, err := compileACL(a); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", tt.doc, err, tt.want)
		}
	}
}
