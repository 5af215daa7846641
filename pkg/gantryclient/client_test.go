package gantryclient

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/credpair"
)

// TestErrors: the server's message and conflicts come through; a body that is not gantry's error is
// not echoed; statuses are testable.
func TestErrors(t *testing.T) {
	tests := []struct {
		name, body  string
		status      int
		wantMessage string
		wantKeys    int
	}{
		{"gantry error", `{"error":"Credential not found."}`, 404, "Credential not found.", 0},
		{"conflict", `{"error":"Conflicting key pairs in mapped service.","conflicts":{"db_password":{"credentials":["a","b"],"blind_credentials":[]}}}`, 400, "Conflicting key pairs in mapped service.", 1},
		{"foreign body", `<html>secret-looking page</html>`, 502, "the answer is not a gantry error (is --addr the gantry gateway?)", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			_, err := (&Client{BaseURL: srv.URL}).GetCredential(context.Background(), "x")
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.Status != tt.status || apiErr.Message != tt.wantMessage || len(apiErr.Conflicts) != tt.wantKeys {
				t.Fatalf("err = %#v", err)
			}
			if !IsStatus(err, tt.status) || IsStatus(err, 200) {
				t.Error("IsStatus disagrees with the status")
			}
			if strings.Contains(err.Error(), "secret-looking") {
				t.Errorf("error echoes the body: %v", err)
			}
		})
	}
}

// TestRequests: values travel in the body, ids are escaped into one path segment, and listings follow
// next_page to the end.
func TestRequests(t *testing.T) {
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen = append(seen, r.Method+" "+r.URL.RequestURI()+" "+string(body))
		switch {
		case r.URL.Path == "/v1/credentials" && r.URL.Query().Get("next_page") == "":
			_, _ = io.WriteString(w, `{"credentials":[{"id":"a"}],"next_page":"p2"}`)
		case r.URL.Path == "/v1/credentials":
			_, _ = io.WriteString(w, `{"credentials":[{"id":"b"}],"next_page":null}`)
		default:
			_, _ = io.WriteString(w, `{"id":"x"}`)
		}
	}))
	defer srv.Close()
	c := &Client{BaseURL: srv.URL + "/", Authorization: "Basic abc"}
	ctx := context.Background()
	creds, err := c.ListCredentials(ctx)
	if err != nil || len(creds) != 2 || creds[1].ID != "b" {
		t.Fatalf("list = %v, %v", creds, err)
	}
	name := "n"
	if _, err := c.UpdateCredential(ctx, "a/b", CredentialInput{Name: &name, CredentialPairs: credpair.Strings(map[string]string{"k": "v"})}, Change{}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"GET /v1/credentials ",
		"GET /v1/credentials?next_page=p2 ",
		`PUT /v1/credentials/a%2Fb {"name":"n","credential_pairs":{"k":"v"}}`,
	}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}
