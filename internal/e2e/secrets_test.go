package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/gantry-dev/gantry/internal/stack"
)

var (
	credentialID = regexp.MustCompile(`^[0-9a-f]{32}$`)
	isoDate      = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?\+00:00$`)
)

// credentialFields are the keys every credential object carries (Confidant 6.x: always present).
var credentialFields = []string{"id", "name", "credential_keys", "credential_pairs", "metadata", "revision", "enabled",
	"documentation", "modified_date", "modified_by", "permissions", "tags", "last_decrypted_date", "last_rotation_date",
	"next_rotation_date"}

var serviceFields = []string{"id", "revision", "enabled", "modified_date", "modified_by", "account", "credentials",
	"blind_credentials", "permissions"}

func sortedKeysOf(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func checkFields(t *testing.T, what string, obj map[string]any, want []string) {
	t.Helper()
	w := slices.Clone(want)
	sort.Strings(w)
	if got := sortedKeysOf(obj); !slices.Equal(got, w) {
		t.Errorf("%s fields = %v, want exactly %v", what, got, w)
	}
}

func asMap(t *testing.T, v any) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%v (%T) is not an object", v, v)
	}
	return m
}

func asList(t *testing.T, v any) []any {
	t.Helper()
	l, ok := v.([]any)
	if !ok {
		t.Fatalf("%v (%T) is not a list", v, v)
	}
	return l
}

func jsonEqual(t *testing.T, what string, got any, want string) {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	g, _ := json.Marshal(got)
	wb, _ := json.Marshal(w)
	if !bytes.Equal(g, wb) {
		t.Errorf("%s = %s, want %s", what, g, wb)
	}
}

// createCredential creates a credential and returns its id.
func (s *testStack) createCredential(name string, pairs map[string]any) string {
	s.t.Helper()
	c := s.call("POST", "/v1/credentials", map[string]any{"name": name, "credential_pairs": pairs, "documentation": "docs for " + name}).must(s.t, 200)
	return c["id"].(string)
}

func TestCredentialCreateGetUpdate(t *testing.T) {
	s := startStack(t, nil)
	created := s.call("POST", "/v1/credentials", map[string]any{
		"name": "Database", "credential_pairs": map[string]any{"DB_User": "app", "db_password": "hunter2", "port": 5432},
		"metadata": map[string]any{"owner": "team-a"}, "documentation": "the main database", "tags": []string{"db"},
		"unknown_field": "ignored",
	}).must(t, 200)
	checkFields(t, "created credential", created, credentialFields)
	id, _ := created["id"].(string)
	if !credentialID.MatchString(id) {
		t.Fatalf("id %q is not 32 hex characters", id)
	}
	jsonEqual(t, "credential_keys", created["credential_keys"], `["db_password","db_user","port"]`)
	jsonEqual(t, "credential_pairs", created["credential_pairs"], `{"db_password":"hunter2","db_user":"app","port":5432}`)
	jsonEqual(t, "metadata", created["metadata"], `{"owner":"team-a"}`)
	jsonEqual(t, "permissions", created["permissions"], `{"metadata":true,"get":true,"update":true}`)
	jsonEqual(t, "tags", created["tags"], `["db"]`)
	if created["revision"] != 1.0 || created["enabled"] != true || created["name"] != "Database" ||
		created["documentation"] != "the main database" || created["modified_by"] != "alice" {
		t.Errorf("scalars wrong: %v", created)
	}
	if !isoDate.MatchString(created["modified_date"].(string)) || !isoDate.MatchString(created["last_rotation_date"].(string)) {
		t.Errorf("dates not ISO 8601 with offset: %v %v", created["modified_date"], created["last_rotation_date"])
	}
	if created["last_decrypted_date"] != nil || created["next_rotation_date"] != nil {
		t.Errorf("last_decrypted_date/next_rotation_date = %v/%v, want null", created["last_decrypted_date"], created["next_rotation_date"])
	}

	t.Run("get with and without metadata_only", func(t *testing.T) {
		for query, wantPairs := range map[string]string{
			"": `{"db_password":"hunter2","db_user":"app","port":5432}`, "?metadata_only=False": `{"db_password":"hunter2","db_user":"app","port":5432}`,
			"?metadata_only=0": `{"db_password":"hunter2","db_user":"app","port":5432}`, "?metadata_only=True": `{}`,
			"?metadata_only=true": `{}`, "?metadata_only=1": `{}`,
		} {
			got := s.get("/v1/credentials/"+id+query).must(t, 200)
			checkFields(t, "credential", got, credentialFields)
			jsonEqual(t, "pairs for "+query, got["credential_pairs"], wantPairs)
			jsonEqual(t, "keys for "+query, got["credential_keys"], `["db_password","db_user","port"]`)
		}
		if r := s.get("/v1/credentials/" + id + "?metadata_only=maybe"); r.code != 400 {
			t.Errorf("metadata_only=maybe: %d %s", r.code, r.body)
		}
	})

	t.Run("partial update keeps what is absent", func(t *testing.T) {
		upd := s.call("PUT", "/v1/credentials/"+id, map[string]any{"enabled": false}).must(t, 200)
		if upd["revision"] != 2.0 || upd["enabled"] != false || upd["name"] != "Database" {
			t.Errorf("after enabled=false: %v", upd)
		}
		jsonEqual(t, "pairs kept", upd["credential_pairs"], `{"db_password":"hunter2","db_user":"app","port":5432}`)
		if upd["last_rotation_date"] != created["last_rotation_date"] {
			t.Errorf("rotation date changed without new pairs: %v -> %v", created["last_rotation_date"], upd["last_rotation_date"])
		}
		upd = s.call("PUT", "/v1/credentials/"+id, map[string]any{"name": "database", "credential_pairs": map[string]any{"DB_PASSWORD": "s3cret"}, "enabled": true}).must(t, 200)
		if upd["revision"] != 3.0 || upd["name"] != "database" {
			t.Errorf("after rename: %v", upd)
		}
		jsonEqual(t, "new pairs", upd["credential_pairs"], `{"db_password":"s3cret"}`)
		jsonEqual(t, "metadata kept", upd["metadata"], `{"owner":"team-a"}`)
	})

	t.Run("list hides values", func(t *testing.T) {
		s.createCredential("api key", map[string]any{"key": "k"})
		s.createCredential("Cache", map[string]any{"url": "redis://"})
		list := s.get("/v1/credentials").must(t, 200)
		if list["next_page"] != nil {
			t.Errorf("next_page = %v, want null without limit", list["next_page"])
		}
		var names []string
		for _, c := range asList(t, list["credentials"]) {
			cm := asMap(t, c)
			checkFields(t, "listed credential", cm, credentialFields)
			jsonEqual(t, "listed pairs", cm["credential_pairs"], `{}`)
			jsonEqual(t, "listed permissions", cm["permissions"], `{}`)
			names = append(names, cm["name"].(string))
		}
		if !slices.Equal(names, []string{"api key", "Cache", "database"}) {
			t.Errorf("names = %v, want case-insensitive order", names)
		}
	})
}

func TestCredentialPaging(t *testing.T) {
	s := startStack(t, nil)
	for i := range 5 {
		s.createCredential(fmt.Sprintf("cred-%d", i), map[string]any{"k": "v"})
	}
	for _, param := range []string{"next_page", "page"} {
		t.Run(param, func(t *testing.T) {
			var names []string
			token := ""
			for pages := 0; ; pages++ {
				path := "/v1/credentials?limit=2"
				if token != "" {
					path += "&" + param + "=" + url.QueryEscape(token)
				}
				page := s.get(path).must(t, 200)
				items := asList(t, page["credentials"])
				if len(items) > 2 {
					t.Fatalf("page of %d items with limit 2", len(items))
				}
				for _, c := range items {
					names = append(names, asMap(t, c)["name"].(string))
				}
				if page["next_page"] == nil {
					break
				}
				token = page["next_page"].(string)
				if pages > 5 {
					t.Fatal("paging does not end")
				}
			}
			if !slices.Equal(names, []string{"cred-0", "cred-1", "cred-2", "cred-3", "cred-4"}) {
				t.Errorf("walked %v", names)
			}
		})
	}
	for _, bad := range []string{"?next_page=%21%21garbage", "?page=AAAA", "?limit=0", "?limit=-1", "?limit=ten"} {
		if r := s.get("/v1/credentials" + bad); r.code != 400 || r.json(t)["error"] == "" {
			t.Errorf("%s: %d %s, want 400 JSON", bad, r.code, r.body)
		}
	}
}

func TestCredentialValidation(t *testing.T) {
	s := startStack(t, nil)
	existing := s.createCredential("taken", map[string]any{"a": "b"})
	tests := []struct {
		name      string
		method    string
		path      string
		body      any
		wantCode  int
		wantError string
	}{
		{"missing name", "POST", "/v1/credentials", map[string]any{"credential_pairs": map[string]any{"a": "b"}, "documentation": "d"}, 400, "name is a required field"},
		{"missing pairs", "POST", "/v1/credentials", map[string]any{"name": "x", "documentation": "d"}, 400, "credential_pairs is a required field"},
		{"empty pairs", "POST", "/v1/credentials", map[string]any{"name": "x", "credential_pairs": map[string]any{}, "documentation": "d"}, 400, "credential_pairs is a required field"},
		{"missing documentation", "POST", "/v1/credentials", map[string]any{"name": "x", "credential_pairs": map[string]any{"a": "b"}}, 400, "documentation is a required field"},
		{"nested value", "POST", "/v1/credentials", map[string]any{"name": "x", "credential_pairs": map[string]any{"a": map[string]any{"b": "c"}}, "documentation": "d"}, 400, "credential pairs must be key: value"},
		{"list value", "POST", "/v1/credentials", map[string]any{"name": "x", "credential_pairs": map[string]any{"a": []string{"b"}}, "documentation": "d"}, 400, "credential pairs must be key: value"},
		{"whitespace key", "POST", "/v1/credentials", map[string]any{"name": "x", "credential_pairs": map[string]any{"a b": "c"}, "documentation": "d"}, 400, "credential key must not contain whitespace"},
		{"metadata not strings", "POST", "/v1/credentials", map[string]any{"name": "x", "credential_pairs": map[string]any{"a": "b"}, "metadata": map[string]any{"m": []int{1}}, "documentation": "d"}, 400, "metadata must be a dict of strings"},
		{"metadata not an object", "POST", "/v1/credentials", map[string]any{"name": "x", "credential_pairs": map[string]any{"a": "b"}, "metadata": "m", "documentation": "d"}, 400, ""},
		{"enabled not a boolean", "POST", "/v1/credentials", map[string]any{"name": "x", "credential_pairs": map[string]any{"a": "b"}, "enabled": "yes", "documentation": "d"}, 400, ""},
		{"duplicate name", "POST", "/v1/credentials", map[string]any{"name": "taken", "credential_pairs": map[string]any{"a": "b"}, "documentation": "d"}, 409, "Name already exists. See id: " + existing},
		{"empty pairs on update", "PUT", "/v1/credentials/" + existing, map[string]any{"credential_pairs": map[string]any{}}, 400, "Credential Pairs cannot be empty."},
		{"tags not strings", "PUT", "/v1/credentials/" + existing, map[string]any{"tags": []any{1}}, 400, "tags must be a list of strings"},
		{"unknown credential", "GET", "/v1/credentials/0123456789abcdef0123456789abcdef", nil, 404, "Credential not found."},
		{"update unknown credential", "PUT", "/v1/credentials/0123456789abcdef0123456789abcdef", map[string]any{"enabled": true}, 404, "Credential not found."},
		{"history id is not a credential", "GET", "/v1/credentials/" + existing + "-1", nil, 404, "Credential not found."},
		{"revert to unknown revision", "PUT", "/v1/credentials/" + existing + "/7", nil, 404, "Revision 7 of credential " + existing + " not found."},
		{"revert to non-integer revision", "PUT", "/v1/credentials/" + existing + "/latest", nil, 400, ""},
		{"diff with unknown revision", "GET", "/v1/credentials/" + existing + "/1/9", nil, 404, "Revision 9 of credential " + existing + " not found."},
		{"revisions of unknown credential", "GET", "/v1/archive/credentials/nope", nil, 404, "Credential not found."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := s.call(tt.method, tt.path, tt.body).must(t, tt.wantCode)
			msg, _ := got["error"].(string)
			if msg == "" || (tt.wantError != "" && msg != tt.wantError) {
				t.Errorf("error = %q, want %q", msg, tt.wantError)
			}
			if tt.wantCode == 409 && got["reference"] != existing {
				t.Errorf("reference = %v, want %s", got["reference"], existing)
			}
		})
	}
	// Nothing above wrote anything.
	list := s.get("/v1/credentials").must(t, 200)
	if n := len(asList(t, list["credentials"])); n != 1 {
		t.Errorf("%d credentials after the failed writes, want 1", n)
	}
	if rev := s.get("/v1/credentials/"+existing).must(t, 200)["revision"]; rev != 1.0 {
		t.Errorf("revision %v after failed updates, want 1", rev)
	}
}

func TestRevisionsRevertAndDiff(t *testing.T) {
	s := startStack(t, nil)
	id := s.createCredential("db", map[string]any{"user": "app", "password": "one"})
	s.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"user": "app", "password": "two", "host": "db1"},
		"name": "db-main", "documentation": "new docs", "tags": []string{"x"}}).must(t, 200)

	diff := s.get(fmt.Sprintf("/v1/credentials/%s/2/1", id)).must(t, 200)
	jsonEqual(t, "name diff", diff["name"], `{"added":"db-main","removed":"db"}`)
	jsonEqual(t, "pairs diff", diff["credential_pairs"], `{"added":["host","password"],"removed":["password"]}`)
	jsonEqual(t, "documentation diff", diff["documentation"], `{"added":"new docs","removed":"docs for db"}`)
	jsonEqual(t, "tags diff", diff["tags"], `{"added":["x"],"removed":[]}`)
	if diff["enabled"] != nil || diff["metadata"] != nil {
		t.Errorf("unchanged fields not null: enabled=%v metadata=%v", diff["enabled"], diff["metadata"])
	}
	if strings.Contains(string(s.get(fmt.Sprintf("/v1/credentials/%s/1/2", id)).body), "two") {
		t.Error("diff discloses a secret value")
	}

	reverted := s.call("PUT", fmt.Sprintf("/v1/credentials/%s/1", id), nil).must(t, 200)
	if reverted["revision"] != 3.0 || reverted["name"] != "db" {
		t.Errorf("revert: %v", reverted)
	}
	jsonEqual(t, "revert hides pairs", reverted["credential_pairs"], `{}`)
	jsonEqual(t, "revert permissions", reverted["permissions"], `{}`)
	jsonEqual(t, "pairs after revert", s.get("/v1/credentials/"+id).must(t, 200)["credential_pairs"], `{"password":"one","user":"app"}`)
	if r := s.call("PUT", fmt.Sprintf("/v1/credentials/%s/1", id), nil).must(t, 400); r["error"] != "No difference between old and new credential." {
		t.Errorf("second revert: %v", r)
	}

	history := s.get("/v1/archive/credentials/"+id).must(t, 200)
	var ids []string
	for _, r := range asList(t, history["revisions"]) {
		rm := asMap(t, r)
		checkFields(t, "revision", rm, credentialFields)
		jsonEqual(t, "history pairs", rm["credential_pairs"], `{}`)
		ids = append(ids, rm["id"].(string))
	}
	if !slices.Equal(ids, []string{id + "-1", id + "-2", id + "-3"}) {
		t.Errorf("revision ids %v", ids)
	}
	all := s.get("/v1/archive/credentials").must(t, 200)
	if n := len(asList(t, all["revisions"])); n != 3 {
		t.Errorf("%d history records, want 3", n)
	}
}

func TestServicesMappingConflictsAndArchive(t *testing.T) {
	s := startStack(t, nil)
	db := s.createCredential("db", map[string]any{"password": "p1", "user": "u"})
	cache := s.createCredential("cache", map[string]any{"url": "redis://"})
	other := s.createCredential("other", map[string]any{"password": "p2"})

	svc := s.call("PUT", "/v1/services/api-Production", map[string]any{"id": "ignored", "credentials": []string{db, cache}, "blind_credentials": []string{}}).must(t, 200)
	checkFields(t, "service", svc, serviceFields)
	if svc["id"] != "api-Production" || svc["revision"] != 1.0 || svc["enabled"] != true || svc["account"] != nil {
		t.Errorf("service scalars: %v", svc)
	}
	jsonEqual(t, "service permissions", svc["permissions"], `{"create":true,"metadata":true,"get":true,"update":true}`)
	creds := asList(t, svc["credentials"])
	if len(creds) != 2 {
		t.Fatalf("expanded credentials: %v", creds)
	}
	for _, c := range creds {
		checkFields(t, "mapped credential", asMap(t, c), credentialFields)
		jsonEqual(t, "PUT response pairs", asMap(t, c)["credential_pairs"], `{}`)
	}
	// Gantry stores no blind credentials: a mapping naming one is refused (TestServiceBlindCredentialIDs).
	jsonEqual(t, "blind credentials", svc["blind_credentials"], `[]`)

	got := s.get("/v1/services/api-Production").must(t, 200)
	jsonEqual(t, "decrypted pairs of the first mapped credential", asMap(t, asList(t, got["credentials"])[0])["credential_pairs"], `{"password":"p1","user":"u"}`)
	got = s.get("/v1/services/api-Production?metadata_only=True").must(t, 200)
	jsonEqual(t, "metadata_only pairs", asMap(t, asList(t, got["credentials"])[0])["credential_pairs"], `{}`)
	jsonEqual(t, "credential services", s.get("/v1/credentials/"+db+"/services").must(t, 200), `{"services":["api-Production"]}`)

	t.Run("unknown credential ids are named", func(t *testing.T) {
		r := s.call("PUT", "/v1/services/api-Production", map[string]any{"credentials": []string{db, "nope-2", "nope-1"}}).must(t, 400)
		if r["error"] != "unknown credential ids: nope-1, nope-2" {
			t.Errorf("error = %v", r["error"])
		}
	})
	t.Run("mapping with a key conflict", func(t *testing.T) {
		r := s.call("PUT", "/v1/services/api-Production", map[string]any{"credentials": []string{db, other}}).must(t, 400)
		if r["error"] != "Conflicting key pairs in mapped service." {
			t.Errorf("error = %v", r["error"])
		}
		want := map[string]any{"password": map[string]any{"credentials": []any{db, other}, "blind_credentials": []any{}}}
		sortIDs := func(v any) {
			l := v.(map[string]any)["password"].(map[string]any)["credentials"].([]any)
			sort.Slice(l, func(i, j int) bool { return l[i].(string) < l[j].(string) })
		}
		sortIDs(want)
		g, _ := json.Marshal(r["conflicts"])
		w, _ := json.Marshal(want)
		if !bytes.Equal(g, w) {
			t.Errorf("conflicts = %s, want %s", g, w)
		}
	})
	t.Run("credential update with a key conflict", func(t *testing.T) {
		r := s.call("PUT", "/v1/credentials/"+cache, map[string]any{"credential_pairs": map[string]any{"user": "x"}}).must(t, 400)
		jsonEqual(t, "conflicts", r["conflicts"], fmt.Sprintf(`{"user":{"credentials":[%q],"services":["api-Production"]}}`, db))
	})

	t.Run("revert and diff", func(t *testing.T) {
		s.call("PUT", "/v1/services/api-Production", map[string]any{"credentials": []string{db}, "enabled": false}).must(t, 200)
		d := s.get("/v1/services/api-Production/1/2").must(t, 200)
		jsonEqual(t, "credentials diff", d["credentials"], fmt.Sprintf(`{"added":[],"removed":[%q]}`, cache))
		jsonEqual(t, "enabled diff", d["enabled"], `{"added":false,"removed":true}`)
		if d["account"] != nil {
			t.Errorf("account diff %v, want null", d["account"])
		}
		rev := s.call("PUT", "/v1/services/api-Production/1", nil).must(t, 200)
		if rev["revision"] != 3.0 || len(asList(t, rev["credentials"])) != 2 || rev["enabled"] != true {
			t.Errorf("service revert: %v", rev)
		}
		if r := s.call("PUT", "/v1/services/api-Production/1", nil).must(t, 400); r["error"] != "No difference between old and new service." {
			t.Errorf("second revert: %v", r)
		}
		hist := s.get("/v1/archive/services/api-Production").must(t, 200)
		var ids []string
		for _, h := range asList(t, hist["revisions"]) {
			checkFields(t, "service revision", asMap(t, h), serviceFields)
			ids = append(ids, asMap(t, h)["id"].(string))
		}
		if !slices.Equal(ids, []string{"api-Production-1", "api-Production-2", "api-Production-3"}) {
			t.Errorf("service revision ids %v", ids)
		}
		if n := len(asList(t, s.get("/v1/archive/services").must(t, 200)["services"])); n != 3 {
			t.Errorf("%d service history records, want 3", n)
		}
	})

	t.Run("list services sorted case-insensitively", func(t *testing.T) {
		s.call("PUT", "/v1/services/zeta", map[string]any{}).must(t, 200)
		s.call("PUT", "/v1/services/Alpha", map[string]any{}).must(t, 200)
		var ids []string
		for _, v := range asList(t, s.get("/v1/services").must(t, 200)["services"]) {
			checkFields(t, "listed service", asMap(t, v), serviceFields)
			ids = append(ids, asMap(t, v)["id"].(string))
		}
		if !slices.Equal(ids, []string{"Alpha", "api-Production", "zeta"}) {
			t.Errorf("service order %v", ids)
		}
		page := s.get("/v1/services?limit=2").must(t, 200)
		if len(asList(t, page["services"])) != 2 || page["next_page"] == nil {
			t.Errorf("first page %v", page)
		}
	})

	t.Run("archive", func(t *testing.T) {
		if r := s.call("POST", "/v1/credentials/"+other+"/archive", map[string]any{"force": true}).must(t, 400); r["error"] != "Credential still enabled" {
			t.Errorf("enabled: %v", r)
		}
		s.call("PUT", "/v1/credentials/"+db, map[string]any{"enabled": false}).must(t, 200)
		if r := s.call("POST", "/v1/credentials/"+db+"/archive", map[string]any{"force": true}).must(t, 400); r["error"] != "Credential has mapped services" {
			t.Errorf("mapped: %v", r)
		}
		s.call("PUT", "/v1/credentials/"+other, map[string]any{"enabled": false}).must(t, 200)
		if r := s.call("POST", "/v1/credentials/"+other+"/archive", nil).must(t, 200); r["result"] != "dry-run success" {
			t.Errorf("dry run: %v", r)
		}
		s.get("/v1/credentials/"+other).must(t, 200)
		if r := s.call("POST", "/v1/credentials/"+other+"/archive", map[string]any{"force": "yes"}); r.code != 400 {
			t.Errorf("force not a boolean: %d", r.code)
		}
		if r := s.call("POST", "/v1/credentials/"+other+"/archive", map[string]any{"force": true}).must(t, 200); r["result"] != "success" {
			t.Errorf("archive: %v", r)
		}
		s.get("/v1/credentials/"+other).must(t, 404)
		s.call("POST", "/v1/credentials/"+other+"/archive", map[string]any{"force": true}).must(t, 404)
		s.createCredential("other", map[string]any{"password": "p3"}) // the name is free again
	})
}

func TestMaintenanceModeTouchFile(t *testing.T) {
	touch := filepath.Join(t.TempDir(), "maintenance")
	s := startStack(t, func(c *stack.Config) { c.Secrets.MaintenanceModeTouchFile = touch })
	id := s.createCredential("db", map[string]any{"a": "b"})
	if err := os.WriteFile(touch, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	writes := []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/credentials", map[string]any{"name": "x", "credential_pairs": map[string]any{"a": "b"}, "documentation": "d"}},
		{"PUT", "/v1/credentials/" + id, map[string]any{"enabled": false}},
		{"PUT", "/v1/credentials/" + id + "/1", nil},
		{"POST", "/v1/credentials/" + id + "/archive", map[string]any{"force": true}},
		{"PUT", "/v1/services/api", map[string]any{"credentials": []string{id}}},
		{"PUT", "/v1/services/api/1", nil},
	}
	for _, w := range writes {
		if r := s.call(w.method, w.path, w.body).must(t, 403); r["error"] != "Server in maintenance mode." {
			t.Errorf("%s %s: %v", w.method, w.path, r)
		}
	}
	s.get("/v1/credentials/"+id).must(t, 200)
	if cfg := s.get("/v1/client_config").must(t, 200); asMap(t, cfg["generated"])["maintenance_mode"] != true {
		t.Errorf("client_config: %v", cfg)
	}
	if err := os.Remove(touch); err != nil {
		t.Fatal(err)
	}
	s.call("PUT", "/v1/credentials/"+id, map[string]any{"enabled": false}).must(t, 200)
}

func TestClientConfig(t *testing.T) {
	s := startStack(t, func(c *stack.Config) {
		c.Secrets.HistoryPageLimit = 50
		c.Secrets.ClientConfig = map[string]any{"blind_keys": map[string]any{"us-east-1": "alias/blind"}}
	})
	cfg := s.get("/v1/client_config").must(t, 200)
	jsonEqual(t, "defined", cfg["defined"], `{"blind_keys":{"us-east-1":"alias/blind"}}`)
	gen := asMap(t, cfg["generated"])
	for field, want := range map[string]string{
		"key_auth_manage_grants": `true`, "cloud_accounts": `[]`, "xsrf_cookie_name": `"XSRF-TOKEN"`,
		"maintenance_mode": `false`, "history_page_limit": `50`,
	} {
		jsonEqual(t, field, gen[field], want)
	}
	perms := asMap(t, gen["permissions"])
	if perms["list"] != true || perms["create"] != true {
		t.Errorf("permissions %v", perms)
	}
}

func TestRestartKeepsDataAndLostKeyringRefusesStart(t *testing.T) {
	s := startStack(t, nil)
	id := s.createCredential("db", map[string]any{"password": "survives-restart"})
	s.call("PUT", "/v1/services/api", map[string]any{"credentials": []string{id}}).must(t, 200)

	s = s.restart()
	jsonEqual(t, "pairs after restart", s.get("/v1/credentials/"+id).must(t, 200)["credential_pairs"], `{"password":"survives-restart"}`)
	if n := len(asList(t, s.get("/v1/services/api").must(t, 200)["credentials"])); n != 1 {
		t.Errorf("service mapping after restart: %d credentials", n)
	}

	// A lost keyring no longer starts an empty one beside the data (whose values would then be
	// unreadable, and new ones written under the wrong keys): the start is refused, naming the file.
	s.stop()
	ring := filepath.Join(s.cfg.DataDir, "keyring.json")
	if err := os.Remove(ring); err != nil {
		t.Fatal(err)
	}
	startFails(t, s.cfg, ring, "restore keyring.json")
}

func TestDatabaseFileHoldsNoSecret(t *testing.T) {
	s := startStack(t, nil)
	secretsWritten := []string{"correct-horse-battery-staple", "AKIAEXAMPLESECRETVALUE1", "p@ssw0rd-revision-two"}
	id := s.createCredential("db", map[string]any{"password": secretsWritten[0], "aws": secretsWritten[1]})
	s.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"password": secretsWritten[2]}}).must(t, 200)
	s.call("PUT", fmt.Sprintf("/v1/credentials/%s/1", id), nil).must(t, 200)
	s.stop()

	db, err := os.ReadFile(filepath.Join(s.cfg.DataDir, "secrets.db"))
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range secretsWritten {
		if bytes.Contains(db, []byte(secret)) {
			t.Errorf("the database file contains the secret %q", secret)
		}
	}
	keyring, err := os.ReadFile(filepath.Join(s.cfg.DataDir, "keyring.json"))
	if err != nil {
		t.Fatal(err)
	}
	var kr struct {
		Keys map[string]struct {
			Versions []struct {
				Material string `json:"material"`
			} `json:"versions"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(keyring, &kr); err != nil {
		t.Fatal(err)
	}
	for _, k := range kr.Keys {
		for _, v := range k.Versions {
			if bytes.Contains(db, []byte(v.Material)) {
				t.Error("the database file contains keyring material")
			}
		}
	}
	for _, f := range []string{"secrets.db", "keyring.json"} {
		info, err := os.Stat(filepath.Join(s.cfg.DataDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, info.Mode().Perm())
		}
	}
}

func TestWebhookOffTheRequestPath(t *testing.T) {
	var mu sync.Mutex
	var events []map[string]any
	release := make(chan struct{})
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ev map[string]any
		_ = json.Unmarshal(body, &ev)
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
		<-release // a receiver that hangs until the test lets it go
	}))
	defer receiver.Close()
	defer close(release)

	s := startStack(t, func(c *stack.Config) { c.Secrets.WebhookURL = receiver.URL })
	id := s.createCredential("db", map[string]any{"password": "never-in-a-webhook"})
	// Both writes complete while the receiver is stuck on the first event.
	s.call("PUT", "/v1/services/api", map[string]any{"credentials": []string{id}}).must(t, 200)
	s.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"password": "still-never"}}).must(t, 200)

	release <- struct{}{} // let the first event through; the second follows
	release <- struct{}{}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2 {
		t.Fatalf("received %d events, want 2: %v", len(events), events)
	}
	jsonEqual(t, "service event", events[0], fmt.Sprintf(`{"event_type":"service_update","services":["api"],"credentials":[%q]}`, id))
	jsonEqual(t, "credential event", events[1], fmt.Sprintf(`{"event_type":"credential_update","services":["api"],"credentials":[%q]}`, id))
}

func TestConcurrentUpdatesKeepHistoryWhole(t *testing.T) {
	s := startStack(t, nil)
	id := s.createCredential("hot", map[string]any{"n": "0"})
	const writers, each = 8, 10
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 1
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r := s.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"n": fmt.Sprintf("%d-%d", w, i)}})
				// Writers of one record queue: every update is acknowledged (a 409 for losing a
				// compare-and-set race was the rule before group commit and per-record locks).
				if r.code == 200 {
					mu.Lock()
					ok++
					mu.Unlock()
				} else {
					t.Errorf("concurrent update: %d %s", r.code, r.body)
				}
			}
		}()
	}
	wg.Wait()
	cur := s.get("/v1/credentials/"+id).must(t, 200)
	if cur["revision"] != float64(ok) || ok != 1+writers*each {
		t.Errorf("revision %v after %d acknowledged writes, want %d", cur["revision"], ok, 1+writers*each)
	}
	revs := asList(t, s.get("/v1/archive/credentials/"+id).must(t, 200)["revisions"])
	for i, r := range revs {
		if want := fmt.Sprintf("%s-%d", id, i+1); asMap(t, r)["id"] != want {
			t.Fatalf("revision %d has id %v, want %s (gap or duplicate)", i, asMap(t, r)["id"], want)
		}
	}
	if len(revs) != ok {
		t.Errorf("%d history records for %d acknowledged writes", len(revs), ok)
	}
}
