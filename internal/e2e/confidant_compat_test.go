package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/services/secrets/store/boltstore"
)

// This file holds the Confidant-compatibility checks of issue 15 (secrets items 8-11) and the replay
// of python-confidant-client's requests.

// writeLegacyBlindMapping adds blind credential ids to the current revision of a service directly in
// the stopped stack's store, as data written before gantry refused unknown blind ids looks; it
// returns the restarted stack.
func writeLegacyBlindMapping(t *testing.T, s *testStack, service string, blindIDs ...string) *testStack {
	t.Helper()
	s.stop()
	store, err := boltstore.Open(filepath.Join(s.cfg.DataDir, "secrets.db"), boltdb.Options{Timeout: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cur, err := store.GetService(ctx, service)
	if err != nil {
		t.Fatal(err)
	}
	next := *cur
	next.Revision, next.BlindCredentials, next.ModifiedDate = cur.Revision+1, blindIDs, time.Now().UTC()
	if err := store.PutService(ctx, &next, cur.Revision); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	return s.restart()
}

// Item 8: gantry stores no blind credentials, so a mapping naming one is refused on write, and ids
// stored before that check are never rendered as fabricated objects (python-confidant-client reads
// blind_credentials[].metadata.context and crashed on the null metadata of such an entry).
func TestServiceBlindCredentialIDs(t *testing.T) {
	s := startStack(t, nil)
	db := s.createCredential("db", map[string]any{"password": "p1"})

	t.Run("unknown blind ids are refused and named", func(t *testing.T) {
		r := s.call("PUT", "/v1/services/api", map[string]any{"credentials": []string{db}, "blind_credentials": []string{"blind-2", "blind-1"}}).must(t, 400)
		if r["error"] != "unknown blind credential ids: blind-1, blind-2" {
			t.Errorf("error = %v", r["error"])
		}
		if r := s.get("/v1/services/api"); r.code != 404 {
			t.Errorf("the refused write created the service: %d %s", r.code, r.body)
		}
	})

	s.call("PUT", "/v1/services/api", map[string]any{"credentials": []string{db}}).must(t, 200)
	s = writeLegacyBlindMapping(t, s, "api", "legacy-blind")

	t.Run("stored unknown blind ids are not fabricated", func(t *testing.T) {
		for _, path := range []string{"/v1/services/api", "/v1/services/api?metadata_only=True"} {
			svc := s.get(path).must(t, 200)
			checkFields(t, "service", svc, serviceFields)
			jsonEqual(t, path+" blind_credentials", svc["blind_credentials"], `[]`)
			if n := len(asList(t, svc["credentials"])); n != 1 {
				t.Errorf("%s: %d credentials, want 1", path, n)
			}
		}
		// The mapping's history still shows what was stored: ids, never objects.
		d := s.get("/v1/services/api/1/2").must(t, 200)
		jsonEqual(t, "blind diff", d["blind_credentials"], `{"added":["legacy-blind"],"removed":[]}`)
	})

	t.Run("add_creds round trip drops the unknown ids", func(t *testing.T) {
		svc := s.get("/v1/services/api?metadata_only=False").must(t, 200)
		payload := map[string]any{"id": "api", "account": svc["account"], "enabled": svc["enabled"],
			"credentials": []string{db}, "blind_credentials": []string{}}
		s.call("PUT", "/v1/services/api", payload).must(t, 200)
		if r := s.get("/v1/services/api/2/3").must(t, 200); r["blind_credentials"] == nil {
			t.Errorf("diff of the rewrite lacks the dropped blind ids: %v", r)
		}
	})

	t.Run("revert to a revision with unknown blind ids keeps only what exists", func(t *testing.T) {
		// Revision 2 differs from revision 3 only by its unknown blind id, which cannot come back.
		r := s.call("PUT", "/v1/services/api/2", nil).must(t, 400)
		if r["error"] != "No difference between old and new service." {
			t.Errorf("revert: %v", r)
		}
	})
}

// noNulls fails when a diff carries a null entry: only differing fields belong in it.
func noNulls(t *testing.T, what string, diff map[string]any) {
	t.Helper()
	for k, v := range diff {
		if v == nil {
			t.Errorf("%s: %s is null; unchanged fields must be absent", what, k)
			continue
		}
		m := asMap(t, v)
		if _, ok := m["added"]; !ok {
			t.Errorf("%s: %s lacks added: %v", what, k, m)
		}
		if _, ok := m["removed"]; !ok {
			t.Errorf("%s: %s lacks removed: %v", what, k, m)
		}
	}
}

// Item 9: a diff holds only the fields that differ, each {added, removed}; nothing differs: {}.
func TestDiffOnlyDifferingFields(t *testing.T) {
	s := startStack(t, nil)
	id := s.createCredential("db", map[string]any{"user": "app", "password": "one"})
	s.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"user": "app", "password": "two"}}).must(t, 200)

	for _, path := range []string{"/v1/credentials/" + id + "/1/1", "/v1/credentials/" + id + "/2/2"} {
		r := s.get(path)
		if r.code != 200 || strings.TrimSpace(string(r.body)) != "{}" {
			t.Errorf("%s: %d %s, want 200 {}", path, r.code, r.body)
		}
	}
	d := s.get("/v1/credentials/"+id+"/1/2").must(t, 200)
	noNulls(t, "credential diff", d)
	// Same user, same name, documentation, metadata and tags: only the pairs, the date and the
	// rotation date (the values changed) differ.
	if got := sortedKeysOf(d); !slices.Equal(got, []string{"credential_pairs", "last_rotation_date", "modified_date"}) {
		t.Errorf("credential diff fields %v", got)
	}
	jsonEqual(t, "pairs diff", d["credential_pairs"], `{"added":["password"],"removed":["password"]}`)

	s.call("PUT", "/v1/services/api", map[string]any{"credentials": []string{id}}).must(t, 200)
	s.call("PUT", "/v1/services/api", map[string]any{"credentials": []string{}, "enabled": false}).must(t, 200)
	if r := s.get("/v1/services/api/2/2"); r.code != 200 || strings.TrimSpace(string(r.body)) != "{}" {
		t.Errorf("service diff with itself: %d %s, want 200 {}", r.code, r.body)
	}
	sd := s.get("/v1/services/api/1/2").must(t, 200)
	noNulls(t, "service diff", sd)
	if got := sortedKeysOf(sd); !slices.Equal(got, []string{"credentials", "enabled", "modified_date"}) {
		t.Errorf("service diff fields %v", got)
	}
	jsonEqual(t, "credentials diff", sd["credentials"], fmt.Sprintf(`{"added":[],"removed":[%q]}`, id))
	jsonEqual(t, "enabled diff", sd["enabled"], `{"added":false,"removed":true}`)

	// Another user's write: modified_by differs and is reported.
	bob := http.Header{"Authorization": {s.basic("bob", "user")}, "Content-Type": {"application/json"}}
	s.do("PUT", s.rest+"/v1/services/api", `{"credentials":[]}`, bob).must(t, 200)
	jsonEqual(t, "modified_by diff", s.get("/v1/services/api/2/3").must(t, 200)["modified_by"], `{"added":"bob","removed":"alice"}`)
}

// Item 10: path and query parameters of the wrong type get a 400 naming the parameter and the type,
// not Go's strconv message; booleans take Confidant's spellings.
func TestParameterParseErrors(t *testing.T) {
	s := startStack(t, nil)
	id := s.createCredential("db", map[string]any{"user": "app"})
	s.call("PUT", "/v1/services/api", map[string]any{"credentials": []string{id}}).must(t, 200)

	tests := []struct {
		method, path, want string
	}{
		// python-confidant-client's revert_* without --revision.
		{"PUT", "/v1/credentials/" + id + "/None", "to_revision must be an integer"},
		{"PUT", "/v1/services/api/None", "to_revision must be an integer"},
		{"PUT", "/v1/credentials/" + id + "/99999999999", "to_revision must be an integer from -2147483648 to 2147483647"},
		{"GET", "/v1/credentials/" + id + "/x/1", "old_revision must be an integer"},
		{"GET", "/v1/services/api/1/1.5", "new_revision must be an integer"},
		{"GET", "/v1/credentials/" + id + "?metadata_only=yes", "metadata_only must be a boolean: true, false, True, False, 1 or 0"},
		{"GET", "/v1/services/api?metadata_only=None", "metadata_only must be a boolean: true, false, True, False, 1 or 0"},
		{"GET", "/v1/services?limit=ten", "limit must be an integer"},
		{"GET", "/v1/archive/credentials?limit=1e3", "limit must be an integer"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			r := s.call(tt.method, tt.path, nil)
			got := r.must(t, 400)
			if got["error"] != tt.want {
				t.Errorf("error = %q, want %q", got["error"], tt.want)
			}
			if strings.Contains(string(r.body), "strconv") || strings.Contains(string(r.body), "type mismatch") {
				t.Errorf("Go parser detail in %s", r.body)
			}
		})
	}

	for spelling, withPairs := range map[string]bool{"True": false, "true": false, "1": false, "False": true, "false": true, "0": true, "": true} {
		c := s.get("/v1/credentials/"+id+"?metadata_only="+url.QueryEscape(spelling)).must(t, 200)
		if got := len(asMap(t, c["credential_pairs"])) > 0; got != withPairs {
			t.Errorf("metadata_only=%q: pairs returned %v, want %v", spelling, got, withPairs)
		}
		svc := s.get("/v1/services/api?metadata_only="+url.QueryEscape(spelling)).must(t, 200)
		pairs := asMap(t, asMap(t, asList(t, svc["credentials"])[0])["credential_pairs"])
		if got := len(pairs) > 0; got != withPairs {
			t.Errorf("service metadata_only=%q: pairs returned %v, want %v", spelling, got, withPairs)
		}
	}
}

// Item 11: a body field of the wrong JSON type gets a 400 naming the field and the expected type,
// never quoting the value (it may be a secret).
func TestBodyTypeErrorsNameTheField(t *testing.T) {
	s := startStack(t, nil)
	id := s.createCredential("db", map[string]any{"user": "app"})
	const secret = "s3cr3t-v4lue"
	valid := func(extra map[string]any) map[string]any {
		body := map[string]any{"name": "x", "credential_pairs": map[string]any{"a": "b"}, "documentation": "d"}
		for k, v := range extra {
			body[k] = v
		}
		return body
	}
	tests := []struct {
		name, method, path string
		body               any
		want               string
	}{
		{"pairs as a list", "POST", "/v1/credentials", valid(map[string]any{"credential_pairs": []string{secret}}), "credential_pairs must be an object"},
		{"pairs as a string", "PUT", "/v1/credentials/" + id, map[string]any{"credential_pairs": secret}, "credential_pairs must be an object"},
		{"enabled as a string", "POST", "/v1/credentials", valid(map[string]any{"enabled": "yes"}), "enabled must be a boolean"},
		{"enabled as a string on update", "PUT", "/v1/credentials/" + id, map[string]any{"enabled": secret}, "enabled must be a boolean"},
		{"name as a number", "POST", "/v1/credentials", valid(map[string]any{"name": 5}), "name must be a string"},
		{"documentation as an object", "PUT", "/v1/credentials/" + id, map[string]any{"documentation": map[string]any{"a": secret}}, "documentation must be a string"},
		{"metadata as a string", "POST", "/v1/credentials", valid(map[string]any{"metadata": secret}), "metadata must be an object"},
		{"tags as a string", "POST", "/v1/credentials", valid(map[string]any{"tags": secret}), "tags must be a list of strings"},
		{"tags with a number", "POST", "/v1/credentials", valid(map[string]any{"tags": []any{1}}), "tags must be a list of strings"},
		{"credentials as a string", "PUT", "/v1/services/api", map[string]any{"credentials": id}, "credentials must be a list of strings"},
		{"credentials with an object", "PUT", "/v1/services/api", map[string]any{"credentials": []any{map[string]any{"id": id}}}, "credentials must be a list of strings"},
		{"blind_credentials as an object", "PUT", "/v1/services/api", map[string]any{"blind_credentials": map[string]any{}}, "blind_credentials must be a list of strings"},
		{"service enabled as a number", "PUT", "/v1/services/api", map[string]any{"enabled": 1}, "enabled must be a boolean"},
		{"account as a list", "PUT", "/v1/services/api", map[string]any{"account": []string{secret}}, "account must be a string"},
		{"archive force as a string", "POST", "/v1/credentials/" + id + "/archive", map[string]any{"force": "yes"}, "force must be a boolean"},
		{"revision as a string", "PUT", "/v1/credentials/" + id, map[string]any{"revision": secret}, "revision must be an integer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.call(tt.method, tt.path, tt.body)
			got := r.must(t, 400)
			if want := "invalid JSON request body: " + tt.want; got["error"] != want {
				t.Errorf("error = %q, want %q", got["error"], want)
			}
			if strings.Contains(string(r.body), secret) {
				t.Errorf("the error quotes the value: %s", r.body)
			}
		})
	}
	// Broken JSON keeps its own message, without the body's text.
	r := s.do("POST", s.rest+"/v1/credentials", `{"name": "`+secret+`", "credential_pairs": {"a": "b"`, http.Header{"Content-Type": {"application/json"}})
	if body := r.must(t, 400); !strings.HasPrefix(body["error"].(string), "invalid JSON request body") || strings.Contains(string(r.body), secret) {
		t.Errorf("broken JSON: %s", r.body)
	}
}
