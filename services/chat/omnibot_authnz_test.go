package chat

import (
	"os"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/gantry-dev/gantry/pkg/wirekeys"
)

// TestOmnibotAuthnzCases runs the cases of Omnibot's own access-control tests
// (tests/unit/omnibot/authnz/authnz_test.py and envoy_checks_test.py of lyft/omnibot), carried over
// to the project's own names, against an authorization section of the same shapes as Omnibot's test
// configuration (testdata/omnibot_authorization.yaml, ours), each check
// alone as those tests call it, then the whole section on the spellings gantry adds: a grant of
// Omnibot's paths opens Omnibot's paths, as the caller spells them, and nothing else.
func TestOmnibotAuthnzCases(t *testing.T) {
	data, err := os.ReadFile("testdata/omnibot_authorization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Authorization Authorization `yaml:"authorization"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	only := func(module string, kwargs map[string]any) *acl {
		a := file.Authorization
		a.Checks = []Check{{Module: module, Kwargs: kwargs}}
		compiled, err := compileACL(a)
		if err != nil {
			t.Fatal(err)
		}
		return compiled
	}
	internalCheck := only("omnibot.authnz.envoy_checks:envoy_internal_check", nil)
	permissionsCheck := only("omnibot.authnz.envoy_checks:envoy_permissions_check", nil)
	allowedPaths := only("omnibot.authnz:allowed_paths", map[string]any{"paths": []any{
		"/api/v1/slack/event", "/api/v1/slack/get_team/acme", "/api/v2/slack/action/initech/helper"}})
	full, err := compileACL(file.Authorization)
	if err != nil {
		t.Fatal(err)
	}
	internal := map[string]string{wirekeys.ProxyInternal: "true"}
	as := func(id string) map[string]string {
		return map[string]string{wirekeys.ProxyInternal: "true", wirekeys.DownstreamServiceCluster: id}
	}
	tests := []struct {
		name    string
		acl     *acl
		method  string
		path    string
		headers map[string]string
		allowed bool
	}{
		// envoy_checks_test.py: test_envoy_internal_check
		{"internal header set", internalCheck, "GET", "/api/v1/slack/get_team/acme", internal, true},
		{"internal header false", internalCheck, "GET", "/api/v1/slack/get_team/acme", map[string]string{wirekeys.ProxyInternal: "false"}, false},
		{"internal header absent", internalCheck, "GET", "/api/v1/slack/get_team/acme", nil, false},
		{"a route not internal only", internalCheck, "POST", "/api/v1/slack/event", nil, true},
		// envoy_checks_test.py: test_envoy_permissions_check
		{"envoy may post events", permissionsCheck, "POST", "/api/v1/slack/event", map[string]string{wirekeys.DownstreamServiceCluster: "envoy"}, true},
		{"an unbound subject", permissionsCheck, "POST", "/api/v1/slack/event", map[string]string{wirekeys.DownstreamServiceCluster: "notasubject"}, false},
		{"no identity", permissionsCheck, "POST", "/api/v1/slack/event", nil, false},
		{"billing reads relay", permissionsCheck, "GET", "/api/v1/slack/get_user/acme/relay/test@example.com", map[string]string{wirekeys.DownstreamServiceCluster: "billing"}, true},
		{"billing reads another bot", permissionsCheck, "GET", "/api/v1/slack/get_user/acme/mutebot/test@example.com", map[string]string{wirekeys.DownstreamServiceCluster: "billing"}, false},
		{"stranger reads", permissionsCheck, "GET", "/api/v1/slack/get_user/acme/relay/test@example.com", map[string]string{wirekeys.DownstreamServiceCluster: "stranger"}, false},
		{"worker-test acts as pager", permissionsCheck, "POST", "/api/v2/slack/action/globex/pager", map[string]string{wirekeys.DownstreamServiceCluster: "worker-test"}, true},
		{"worker acts as pager", permissionsCheck, "POST", "/api/v2/slack/action/globex/pager", map[string]string{wirekeys.DownstreamServiceCluster: "worker"}, true},
		{"stranger acts", permissionsCheck, "POST", "/api/v2/slack/action/globex/pager", map[string]string{wirekeys.DownstreamServiceCluster: "stranger"}, false},
		// authnz_test.py: test_allowed_paths
		{"a basic post route", allowedPaths, "POST", "/api/v1/slack/event", nil, true},
		{"a route that uses regex", allowedPaths, "GET", "/api/v1/slack/get_team/acme", nil, true},
		{"a route that's not allowed", allowedPaths, "GET", "/api/v2/slack/action/initrode/nobot", nil, false},
		// The whole section, on gantry's spellings of the same routes: not granted.
		{"the action, Omnibot's path", full, "POST", "/api/v2/slack/action/globex/pager", as("worker"), true},
		{"the action, gantry's v2 path", full, "POST", "/api/v2/chat/action/globex/pager", as("worker"), false},
		{"a read, Omnibot's path", full, "GET", "/api/v1/slack/get_team/acme", as("billing"), true},
		{"a read, gantry's path", full, "GET", "/api/v1/chat/get_team/acme", as("billing"), false},
		{"send_im, Omnibot's path", full, "POST", "/api/v1/slack/send_im/ops-team/opsbot/a@b.c", as("billing"), true},
		{"send_im, gantry's path", full, "POST", "/api/v1/chat/send_im/ops-team/opsbot/a@b.c", as("billing"), false},
	}
	for _, tt := range tests {
		headers := tt.headers
		err := tt.acl.authorize(AccessRequest{Method: tt.method, Path: tt.path, Header: func(n string) string { return headers[n] }})
		if (err == nil) != tt.allowed {
			t.Errorf("%s: %s %s: %v, want allowed %v", tt.name, tt.method, tt.path, err, tt.allowed)
		}
	}
}
