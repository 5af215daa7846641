package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// fuzzStack is a stack for a fuzz target with one credential and one service to aim at. Each fuzzing
// worker process builds its own. Its write rate limit is off: the fuzzer writes thousands of times a
// second as one user, and behind a 429 it would reach no validation code at all.
func fuzzStack(f *testing.F) (s *testStack, credID string) {
	s = startStack(f, unlimitedWrites)
	credID = s.createCredential("fuzz-target", map[string]any{"k": "v"})
	s.call("PUT", "/v1/services/fuzz-svc", map[string]any{"credentials": []string{credID}}).must(f, 200)
	return s, credID
}

// fuzzClient gives up on an answer long before the test binary's own timeout: a hang is a failure.
var fuzzClient = &http.Client{Timeout: 20 * time.Second, CheckRedirect: client.CheckRedirect, Transport: client.Transport}

// send sends a request through the gateway and checks what every answer to hostile input must be:
// no 5xx (501 marks routes whose milestone has not landed), and every error a JSON object with an
// "error" message. A URL the HTTP client cannot even form is skipped.
func (s *testStack) fuzzSend(t *testing.T, method, path, contentType string, body []byte) {
	s.fuzzSendAs(t, method, path, contentType, http.Header{"Authorization": {s.asUser}}, body)
}

// fuzzSendAs is fuzzSend with the caller's own identity headers (the chat routes authenticate by the
// downstream service cluster, not by Authorization).
func (s *testStack) fuzzSendAs(t *testing.T, method, path, contentType string, header http.Header, body []byte) {
	req, err := http.NewRequest(method, s.rest+path, bytes.NewReader(body))
	if err != nil {
		return
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := fuzzClient.Do(req)
	if err != nil {
		t.Fatalf("%s %q: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 500 && resp.StatusCode != http.StatusNotImplemented {
		t.Fatalf("%s %q with body %q: %d %s", method, path, body, resp.StatusCode, data)
	}
	if resp.StatusCode >= 400 {
		var e map[string]any
		if err := json.Unmarshal(data, &e); err != nil || e["error"] == nil {
			t.Fatalf("%s %q: %d with a body that is not a JSON error: %q", method, path, resp.StatusCode, data)
		}
	}
}

// bodyRoutes are the secrets routes that read a request body; {id} is the fuzz target credential
// (or service).
var bodyRoutes = []struct{ method, path string }{
	{"POST", "/v1/credentials"},
	{"PUT", "/v1/credentials/{id}"},
	{"POST", "/v1/credentials/{id}/archive"},
	{"PUT", "/v1/services/fuzz-svc"},
	{"PUT", "/v1/services/new-svc"},
	{"POST", "/v1/certificates/development"},
	{"POST", "/v1/saml/consume"},
	{"POST", "/v1/user/email"},
	{"POST", "/v1/login"},
}

// FuzzSecretsBodies sends arbitrary bytes as the body of every secrets route that reads one, as JSON
// and as a form, through the gateway's decoding path to the real secrets service.
func FuzzSecretsBodies(f *testing.F) {
	seeds := []string{
		`{"name":"n","documentation":"d","credential_pairs":{"k":"v"}}`,
		`{"credential_pairs":{"a":1,"b":true,"c":null}}`,
		`{"credential_pairs":{"k":{"nested":"x"}}}`,
		`{"metadata":{"k":["x"]},"tags":["a",1]}`,
		`{"credentials":["` + strings.Repeat("a", 40) + `"],"blind_credentials":[],"enabled":false}`,
		`{"force":true}`, `{"force":"yes"}`, `{"enabled":"false"}`, `[]`, `null`, `""`, `{`, "\xff", `{"name":"\u0000"}`,
		`{"revision":2147483648}`, `{"csr":"-----BEGIN CERTIFICATE REQUEST-----"}`, "SAMLResponse=PD94bWw&RelayState=%2F",
		strings.Repeat("[", 1000), `{"a":` + strings.Repeat(`{"a":`, 200) + `1` + strings.Repeat("}", 201),
	}
	for i, seed := range seeds {
		for r := range bodyRoutes {
			if (i+r)%3 == 0 {
				f.Add(uint8(r), []byte(seed), i%2 == 0)
			}
		}
	}
	s, id := fuzzStack(f)
	f.Fuzz(func(t *testing.T, route uint8, body []byte, form bool) {
		r := bodyRoutes[int(route)%len(bodyRoutes)]
		ct := "application/json"
		if form {
			ct = "application/x-www-form-urlencoded"
		}
		s.fuzzSend(t, r.method, strings.ReplaceAll(r.path, "{id}", id), ct, body)
	})
}

// paramRoutes are the secrets routes with path parameters; {p} takes the fuzzed value, {id} the
// target credential.
var paramRoutes = []struct{ method, path string }{
	{"GET", "/v1/credentials"},
	{"GET", "/v1/credentials/{p}"},
	{"PUT", "/v1/credentials/{id}/{p}"},
	{"GET", "/v1/credentials/{id}/{p}/1"},
	{"GET", "/v1/credentials/{id}/1/{p}"},
	{"GET", "/v1/credentials/{p}/services"},
	{"GET", "/v1/archive/credentials"},
	{"GET", "/v1/archive/credentials/{p}"},
	{"GET", "/v1/archived_credentials"},
	{"GET", "/v1/services"},
	{"GET", "/v1/services/{p}"},
	{"PUT", "/v1/services/fuzz-svc/{p}"},
	{"GET", "/v1/services/fuzz-svc/{p}/1"},
	{"GET", "/v1/archive/services"},
	{"GET", "/v1/archive/services/{p}"},
	{"GET", "/v1/grants/{p}"},
	{"PUT", "/v1/grants/{p}"},
	{"GET", "/v1/cas/{p}"},
	{"GET", "/v1/certificates/{p}/{p}"},
	{"GET", "/v1/jwks/public/{p}"},
	{"GET", "/v1/jwks/token/{p}"},
	{"GET", "/v1/jwks/token/{id}/{p}"},
	{"GET", "/v1/client_config"},
	{"GET", "/v1/roles"},
	{"GET", "/v1/login"},
}

// FuzzSecretsPaths sends arbitrary path parameters (raw, so escapes, dots and NULs arrive as sent) and
// query strings (paging tokens, limits, metadata_only, environment) to every secrets route.
func FuzzSecretsPaths(f *testing.F) {
	params := []string{"x", "..", "%2e%2e", "..%2f..%2fetc", "%00", "%ff", "-1", "2147483648", "0", "1", "latest", strings.Repeat("a", 600), "a%20b", "%25"}
	queries := []string{"", "limit=1", "limit=-1", "limit=ten", "next_page=AAAA", "page=%ff", "next_page=" + strings.Repeat("QQ", 300),
		"metadata_only=True", "metadata_only=maybe", "environment=development", "limit=99999999999", "next_page=_-_-", "a=1&a=2&limit=1&limit=2"}
	for i, p := range params {
		f.Add(uint8(i), p, queries[i%len(queries)])
	}
	for i, q := range queries {
		f.Add(uint8(i*7), "x", q)
	}
	s, id := fuzzStack(f)
	f.Fuzz(func(t *testing.T, route uint8, param, query string) {
		if strings.ContainsAny(param, "/?#") {
			// Another route or a query: covered by the route and query inputs.
			return
		}
		if strings.ContainsFunc(param+query, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			// Not a request target at all: net/http refuses the request line itself with a plain
			// 400 before any handler runs (clients percent-encode these bytes).
			return
		}
		r := paramRoutes[int(route)%len(paramRoutes)]
		path := strings.ReplaceAll(strings.ReplaceAll(r.path, "{id}", id), "{p}", param)
		if query != "" {
			path += "?" + query
		}
		s.fuzzSend(t, r.method, path, "", nil)
	})
}
