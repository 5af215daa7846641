package e2e

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// The python-confidant-client cannot be installed here (no PyPI), so these tests replay, byte for byte
// where it matters, the HTTP requests its commands send (confidant_client/__init__.py and cli.py of
// lyft/python-confidant-client 2.x) and check that every field the client code then reads is present
// with the type it expects. requests serialises params={'metadata_only': False} as
// "metadata_only=False"; PUT/POST of the library send Content-type: application/json and
// Accept: text/plain; _update_service uses json= (Content-Type: application/json); every call uses
// HTTP Basic with the kmsauth username and token, and only 200 (get_service: 200/403/404,
// get_credential: 200/404) counts as success.

// pythonClientHeaders are the headers of the client's JSON_HEADERS requests, with its Basic auth.
func pythonClientHeaders(auth string) http.Header {
	return http.Header{"Authorization": {auth}, "Content-Type": {"application/json"}, "Accept": {"text/plain"}}
}

// field returns obj[key], failing the test when it is absent or not of the wanted JSON type: "string",
// "number", "bool", "object", "list", or "object|null" / "string|null" where the client tolerates null.
func field(t *testing.T, what string, obj map[string]any, key, kind string) any {
	t.Helper()
	v, ok := obj[key]
	if !ok {
		t.Fatalf("%s: the client reads %q, which is absent: %v", what, key, obj)
	}
	okType := false
	for _, k := range strings.Split(kind, "|") {
		switch k {
		case "string":
			_, okType = v.(string)
		case "number":
			_, okType = v.(float64)
		case "bool":
			_, okType = v.(bool)
		case "object":
			_, okType = v.(map[string]any)
		case "list":
			_, okType = v.([]any)
		case "null":
			okType = v == nil
		}
		if okType {
			break
		}
	}
	if !okType {
		t.Fatalf("%s: %q is %T (%v), the client needs %s", what, key, v, v, kind)
	}
	return v
}

// checkClientService asserts what get_service, env, confidant-format and add_creds/remove_creds read
// of a service.
func checkClientService(t *testing.T, svc map[string]any, wantPairs bool) {
	t.Helper()
	field(t, "service", svc, "revision", "number")
	field(t, "service", svc, "enabled", "bool")
	field(t, "service", svc, "account", "string|null")
	for _, c := range field(t, "service", svc, "credentials", "list").([]any) {
		cred := asMap(t, c)
		field(t, "service credential", cred, "id", "string")
		field(t, "service credential", cred, "name", "string")
		field(t, "service credential", cred, "revision", "number")
		// confidant-format reads metadata.get('env_var_prefix'): an object, never null.
		field(t, "service credential", cred, "metadata", "object")
		pairs := field(t, "service credential", cred, "credential_pairs", "object").(map[string]any)
		if wantPairs && len(pairs) == 0 {
			t.Errorf("service credential %v: no pairs for env/get_service", cred["id"])
		}
		for k, v := range pairs {
			if _, ok := v.(string); !ok {
				t.Errorf("pair %s is %T; env puts values in the environment as strings", k, v)
			}
		}
	}
	// get_service decrypts each blind credential by metadata.context[region], data_key[region] and
	// credential_pairs[region]: any entry must carry all of them, and gantry (which stores no blind
	// credentials) must send none.
	if blind := field(t, "service", svc, "blind_credentials", "list").([]any); len(blind) != 0 {
		t.Errorf("blind_credentials %v: entries the client would try to decrypt", blind)
	}
}

func TestPythonConfidantClientCommands(t *testing.T) {
	s := certStack(t, nil)
	user := s.basic("alice", "user")
	db := s.createCredential("db", map[string]any{"db_user": "app", "db_password": "one"})
	cache := s.createCredential("cache", map[string]any{"redis_url": "redis://"})
	// The service "api" holds grants (a user created it), so its own token is accepted.
	s.call("PUT", "/v1/services/api", map[string]any{"credentials": []string{db}}).must(t, 200)
	service := pythonClientHeaders(s.basic("api", "service"))

	t.Run("get_service and env", func(t *testing.T) {
		// confidant get_service --service api / confidant env --service api: get_service(service,
		// metadata_only=False), as the service itself.
		svc := s.do("GET", s.rest+"/v1/services/api?metadata_only=False", "", service).must(t, 200)
		checkClientService(t, svc, true)
		// confidant get_service --service api --metadata-only (library metadata_only=True).
		checkClientService(t, s.do("GET", s.rest+"/v1/services/api?metadata_only=True", "", service).must(t, 200), false)
		// 403 and 404 are read as JSON too (ret = {**ret, **response.json()}).
		if r := s.do("GET", s.rest+"/v1/services/other?metadata_only=False", "", service).must(t, 403); r["error"] == nil {
			t.Errorf("403 body %v", r)
		}
		if r := s.do("GET", s.rest+"/v1/services/nope?metadata_only=False", "", pythonClientHeaders(user)); r.code != 404 {
			t.Errorf("unknown service: %d", r.code)
		}
	})

	t.Run("get_credential and get_credential_services", func(t *testing.T) {
		c := s.do("GET", s.rest+"/v1/credentials/"+db+"?metadata_only=False", "", pythonClientHeaders(user)).must(t, 200)
		for _, k := range []string{"id", "name", "documentation"} {
			field(t, "credential", c, k, "string")
		}
		field(t, "credential", c, "revision", "number")
		field(t, "credential", c, "enabled", "bool")
		field(t, "credential", c, "metadata", "object")
		if pairs := field(t, "credential", c, "credential_pairs", "object").(map[string]any); pairs["db_password"] != "one" {
			t.Errorf("credential_pairs %v", pairs)
		}
		if r := s.do("GET", s.rest+"/v1/credentials/0123456789abcdef0123456789abcdef?metadata_only=False", "", pythonClientHeaders(user)); r.code != 404 {
			t.Errorf("unknown credential: %d", r.code)
		}
		services := s.do("GET", s.rest+"/v1/credentials/"+db+"/services", "", pythonClientHeaders(user)).must(t, 200)
		jsonEqual(t, "credential services", services, `{"services":["api"]}`)
	})

	t.Run("update_credential", func(t *testing.T) {
		// update_credential(id, credential_pairs=..., enabled=True): get_credential, then PUT with the
		// pairs (always), and name/metadata/documentation/enabled when given.
		s.do("GET", s.rest+"/v1/credentials/"+db+"?metadata_only=False", "", pythonClientHeaders(user)).must(t, 200)
		body := `{"credential_pairs": {"db_user": "app", "db_password": "two"}, "metadata": {"env_var_prefix": "DB_"}, "documentation": "rotated", "enabled": true}`
		c := s.do("PUT", s.rest+"/v1/credentials/"+db, body, pythonClientHeaders(user)).must(t, 200)
		if c["revision"] != 2.0 || asMap(t, c["credential_pairs"])["db_password"] != "two" {
			t.Errorf("updated credential %v", c)
		}
		// Only the pairs (update_credential with no other argument).
		c = s.do("PUT", s.rest+"/v1/credentials/"+db, `{"credential_pairs": {"db_user": "app", "db_password": "three"}}`, pythonClientHeaders(user)).must(t, 200)
		if c["revision"] != 3.0 || c["documentation"] != "rotated" {
			t.Errorf("pairs-only update %v", c)
		}
	})

	t.Run("revert_credential", func(t *testing.T) {
		// confidant revert_credential --id ID --revision 1: PUT /v1/credentials/ID/1, JSON headers, no body.
		c := s.do("PUT", s.rest+"/v1/credentials/"+db+"/1", "", pythonClientHeaders(user)).must(t, 200)
		field(t, "reverted credential", c, "revision", "number")
		// Without --revision the client formats None into the path: a 400 that says why.
		r := s.do("PUT", s.rest+"/v1/credentials/"+db+"/None", "", pythonClientHeaders(user)).must(t, 400)
		if r["error"] != "to_revision must be an integer" {
			t.Errorf("revert to None: %v", r)
		}
	})

	t.Run("add_creds and remove_creds", func(t *testing.T) {
		// add_credentials_to_service: get_service, then PUT the union with json= (Content-Type only).
		svc := s.do("GET", s.rest+"/v1/services/api?metadata_only=False", "", pythonClientHeaders(user)).must(t, 200)
		checkClientService(t, svc, true)
		put := func(credentials []string) {
			t.Helper()
			payload := map[string]any{"id": "api", "account": svc["account"], "enabled": svc["enabled"],
				"credentials": credentials, "blind_credentials": []string{}}
			s.do("PUT", s.rest+"/v1/services/api", mustJSON(t, payload), http.Header{"Authorization": {user}, "Content-Type": {"application/json"}}).must(t, 200)
		}
		put(sortedIDs(db, cache))
		if n := len(asList(t, s.get("/v1/services/api").must(t, 200)["credentials"])); n != 2 {
			t.Errorf("after add_creds: %d credentials", n)
		}
		put([]string{db}) // remove_credentials_from_service: the difference
		if n := len(asList(t, s.get("/v1/services/api").must(t, 200)["credentials"])); n != 1 {
			t.Errorf("after remove_creds: %d credentials", n)
		}
		// Adding a blind credential id: gantry has none, so the write is refused with a reason.
		payload := map[string]any{"id": "api", "account": nil, "enabled": true, "credentials": []string{db}, "blind_credentials": []string{"blind-1"}}
		if r := s.do("PUT", s.rest+"/v1/services/api", mustJSON(t, payload), http.Header{"Authorization": {user}, "Content-Type": {"application/json"}}).must(t, 400); r["error"] != "unknown blind credential ids: blind-1" {
			t.Errorf("blind id: %v", r)
		}
	})

	t.Run("revert_service", func(t *testing.T) {
		svc := s.do("PUT", s.rest+"/v1/services/api/2", "", pythonClientHeaders(user)).must(t, 200)
		checkClientService(t, svc, false)
		if r := s.do("PUT", s.rest+"/v1/services/api/None", "", pythonClientHeaders(user)).must(t, 400); r["error"] != "to_revision must be an integer" {
			t.Errorf("revert to None: %v", r)
		}
	})

	t.Run("get_certificate, get_ca and list_cas", func(t *testing.T) {
		// get_certificate(ca, cn, validity=120) without SANs (with SANs the client crashes before sending).
		c := s.do("GET", s.rest+"/v1/certificates/development/api.example.com?validity=120", "", service).must(t, 200)
		for _, k := range []string{"certificate", "certificate_chain", "key"} {
			if v := field(t, "certificate", c, k, "string").(string); !strings.HasPrefix(v, "-----BEGIN ") {
				t.Errorf("%s is not PEM", k)
			}
		}
		ca := s.do("GET", s.rest+"/v1/cas/development", "", service).must(t, 200)
		field(t, "ca", ca, "certificate", "string")
		field(t, "ca", ca, "certificate_chain", "string")
		field(t, "ca", ca, "tags", "object")
		field(t, "cas", s.do("GET", s.rest+"/v1/cas", "", service).must(t, 200), "cas", "list")
	})

	t.Run("get_jwt and get_jwks", func(t *testing.T) {
		// get_jwt(environment, resource_id, expiry): /v1/jwks/token[/resource][/expiry]?environment=E;
		// the answer is merged into the result, which must then carry token.
		for _, path := range []string{"/v1/jwks/token", "/v1/jwks/token/api", "/v1/jwks/token/api/300"} {
			r := s.do("GET", s.rest+path+"?environment=development", "", pythonClientHeaders(user)).must(t, 200)
			if tok := field(t, path, r, "token", "string").(string); strings.Count(tok, ".") != 2 {
				t.Errorf("%s: token %q is not a JWT", path, tok)
			}
		}
		keys := s.do("GET", s.rest+"/v1/jwks/public/development", "", pythonClientHeaders(user)).must(t, 200)
		for _, k := range []string{"kty", "kid", "n", "e", "alg"} {
			field(t, "jwks", keys, k, "string")
		}
	})
}

func sortedIDs(ids ...string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}
