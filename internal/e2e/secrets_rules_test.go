package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/services/secrets"
)

// denyACL allows only what a test lists, as "<resource>/<action>".
type denyACL map[string]bool

func (a denyACL) Allowed(_ context.Context, _ secrets.Principal, resourceType, action, _ string, _ map[string]any) bool {
	return a[resourceType+"/"+action]
}

func TestAccessDeniedBodies(t *testing.T) {
	// The caller may create, list and read metadata, nothing else.
	s := startStack(t, func(c *stack.Config) {
		c.SecretsACL = denyACL{"credential/create": true, "credential/metadata": true, "service/create": true}
	})
	id := s.createCredential("db", map[string]any{"password": "p"})
	got := s.get("/v1/credentials/"+id).must(t, 200)
	jsonEqual(t, "pairs without get permission", got["credential_pairs"], `{}`)
	jsonEqual(t, "permission hints", got["permissions"], `{"metadata":true,"get":false,"update":false}`)

	user := "alice"
	tests := []struct {
		method, path string
		body         any
		wantError    string
		wantRef      string
	}{
		{"GET", "/v1/credentials", nil, user + " does not have access to list credentials", ""},
		{"PUT", "/v1/credentials/" + id, map[string]any{"enabled": false}, user + " does not have access to update credential " + id, id},
		{"PUT", "/v1/credentials/" + id + "/1", nil, user + " does not have access to revert credential " + id, id},
		{"POST", "/v1/credentials/" + id + "/archive", nil, user + " does not have access to archive credential " + id, id},
		{"GET", "/v1/archive/credentials", nil, user + " does not have access to list credentials", ""},
		{"GET", "/v1/services", nil, user + " does not have access to list services", ""},
		{"GET", "/v1/services/api", nil, user + " does not have access to get service api", "api"},
		{"PUT", "/v1/services/api", map[string]any{"credentials": []string{id}}, user + " does not have access to map the credentials because they do not own the credentials being added", "api"},
		{"GET", "/v1/services/api/1/2", nil, user + " does not have access to service api", "api"},
		{"GET", "/v1/archive/services/api", nil, user + " does not have access to service api revisions", ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			r := s.call(tt.method, tt.path, tt.body).must(t, 403)
			if r["error"] != tt.wantError {
				t.Errorf("error = %q, want %q", r["error"], tt.wantError)
			}
			if ref, _ := r["reference"].(string); ref != tt.wantRef {
				t.Errorf("reference = %q, want %q", ref, tt.wantRef)
			}
		})
	}
	if rev := s.get("/v1/credentials/"+id).must(t, 200)["revision"]; rev != 1.0 {
		t.Errorf("revision %v after refused writes", rev)
	}
}

// TestHistoryPageLimitForcesPaging: HISTORY_PAGE_LIMIT pages the history listings of every record
// (/v1/archive/credentials, /v1/archive/services), as in Confidant; the history of one credential or
// service is answered whole, as Confidant does (issue 25: 2 revisions and a next_page where Confidant
// returned all 10), unless the caller asks for a page with limit.
func TestHistoryPageLimitForcesPaging(t *testing.T) {
	s := startStack(t, func(c *stack.Config) { c.Secrets.HistoryPageLimit = 2 })
	id := s.createCredential("db", map[string]any{"n": "0"})
	for i := 1; i <= 4; i++ {
		s.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"n": fmt.Sprint(i)}}).must(t, 200)
	}
	first := s.get("/v1/archive/credentials").must(t, 200)
	if n := len(asList(t, first["revisions"])); n != 2 || first["next_page"] == nil {
		t.Fatalf("history of every credential, first page: %d revisions, next_page %v", n, first["next_page"])
	}
	second := s.get("/v1/archive/credentials?next_page="+first["next_page"].(string)).must(t, 200)
	if ids := asList(t, second["revisions"]); len(ids) != 2 || asMap(t, ids[0])["id"] != id+"-3" {
		t.Errorf("second page: %v", ids)
	}
	if n := len(asList(t, s.get("/v1/archive/credentials?limit=10").must(t, 200)["revisions"])); n != 5 {
		t.Errorf("limit=10 overrides the default page size: got %d", n)
	}

	// One credential's history: every revision at once, as Confidant answers.
	whole := s.get("/v1/archive/credentials/"+id).must(t, 200)
	if revs := asList(t, whole["revisions"]); len(revs) != 5 || whole["next_page"] != nil || asMap(t, revs[4])["id"] != id+"-5" {
		t.Errorf("history of %s: %d revisions, next_page %v; want all 5 and null", id, len(revs), whole["next_page"])
	}
	if paged := s.get("/v1/archive/credentials/"+id+"?limit=2").must(t, 200); len(asList(t, paged["revisions"])) != 2 || paged["next_page"] == nil {
		t.Errorf("an explicit limit still pages one credential's history: %v", paged)
	}
	for i := 1; i <= 3; i++ {
		s.call("PUT", "/v1/services/api", map[string]any{"credentials": []string{id}, "enabled": i%2 == 1}).must(t, 200)
	}
	svc := s.get("/v1/archive/services/api").must(t, 200)
	if revs := asList(t, svc["revisions"]); len(revs) != 3 || svc["next_page"] != nil {
		t.Errorf("history of service api: %d revisions, next_page %v; want all 3 and null", len(revs), svc["next_page"])
	}
}

func TestConfidantSwitches(t *testing.T) {
	s := startStack(t, func(c *stack.Config) {
		c.Secrets.IgnoreConflicts = true
		c.Secrets.EnforceDocumentation = true
		c.Secrets.EnableSaveLastDecryptionTime = true
	})
	a := s.createCredential("a", map[string]any{"password": "1"})
	b := s.createCredential("b", map[string]any{"password": "2"})
	s.call("PUT", "/v1/services/api", map[string]any{"credentials": []string{a, b}}).must(t, 200) // IGNORE_CONFLICTS

	if r := s.call("PUT", "/v1/credentials/"+a, map[string]any{"documentation": ""}).must(t, 400); r["error"] != "documentation is a required field" {
		t.Errorf("ENFORCE_DOCUMENTATION: %v", r)
	}
	s.call("PUT", "/v1/credentials/"+a, map[string]any{"documentation": "", "revision": 1}).must(t, 200) // the UI's restore path

	before := s.get("/v1/credentials/"+a+"?metadata_only=true").must(t, 200)
	if before["last_decrypted_date"] != nil {
		t.Fatalf("last_decrypted_date %v before any read of values", before["last_decrypted_date"])
	}
	read := s.get("/v1/credentials/"+a).must(t, 200)
	if d, _ := read["last_decrypted_date"].(string); !isoDate.MatchString(d) {
		t.Errorf("last_decrypted_date after a read of values = %v", read["last_decrypted_date"])
	}
}

// TestServiceUpdateKeepsAbsentFields: a PUT of a service changes only the fields its body names
// (issue 25: {"enabled": false} answered 200 with "credentials": [] and dropped every mapping, where
// Confidant answered 500 and wrote nothing). An empty list still clears, and a new service starts
// from the defaults.
func TestServiceUpdateKeepsAbsentFields(t *testing.T) {
	s := startStack(t, nil)
	a := s.createCredential("a", map[string]any{"user": "1"})
	s.call("PUT", "/v1/services/api", map[string]any{"credentials": []string{a}}).must(t, 200)

	off := s.call("PUT", "/v1/services/api", map[string]any{"enabled": false}).must(t, 200)
	if off["enabled"] != false || off["revision"] != 2.0 || len(asList(t, off["credentials"])) != 1 {
		t.Fatalf("PUT {enabled: false} = %v", off)
	}
	got := s.get("/v1/services/api?metadata_only=true").must(t, 200)
	if cs := asList(t, got["credentials"]); len(cs) != 1 || asMap(t, cs[0])["id"] != a || got["enabled"] != false {
		t.Errorf("after PUT {enabled: false}: %v", got)
	}
	// The mapping alone: enabled stays false.
	if r := s.call("PUT", "/v1/services/api", map[string]any{"credentials": []string{a}}).must(t, 200); r["enabled"] != false {
		t.Errorf("PUT {credentials} re-enabled the service: %v", r)
	}
	if r := s.call("PUT", "/v1/services/api", map[string]any{"credentials": []string{}, "enabled": true}).must(t, 200); len(asList(t, r["credentials"])) != 0 || r["enabled"] != true {
		t.Errorf("PUT {credentials: []} = %v", r)
	}
	if r := s.call("PUT", "/v1/services/fresh", map[string]any{"enabled": false}).must(t, 200); len(asList(t, r["credentials"])) != 0 || r["revision"] != 1.0 {
		t.Errorf("new service = %v", r)
	}
	if r := s.call("PUT", "/v1/services/api", map[string]any{"update_mask": "credentials,nonsense"}).must(t, 400); !strings.Contains(fmt.Sprint(r["error"]), "nonsense") {
		t.Errorf("bad update_mask = %v", r)
	}
}
