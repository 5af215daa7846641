package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// pendingRequest is a change request as the server answers a held write.
const pendingRequest = `{"id":"cr1","status":"pending","status_url":"/v1/changes/cr1","action":"update",
"resource_type":"credential","resource_id":"c1","resource_name":"prod-db","base_revision":2,
"requested_by":"user:alice","reason":"quarterly","created_date":"2026-01-01T00:00:00Z",
"expiry_date":"2026-01-08T00:00:00Z","approvals_required":2,"approvals":[{"by":"user:bob","date":"2026-01-02T00:00:00Z","via":"api"}],
"changes":{"keys_added":["new_key"],"keys_removed":[],"keys_changed":["password"],"metadata_changed":[],
"credentials_added":[],"credentials_removed":[],"blind_credentials_added":[],"blind_credentials_removed":[],
"name":null,"enabled":false,"fields_changed":[],"to_revision":null},
"decided_by":"","decided_date":null,"decision_reason":"","applied_revision":null,"channel":""}`

// heldServer answers every write with 202 and pendingRequest, as a gantry whose approval rules
// protect every record; it records the requests. The change request routes answer the request.
func heldServer(t *testing.T) (url string, requests func() []string) {
	t.Helper()
	var (
		mu   sync.Mutex
		seen []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.RequestURI()+" "+string(body))
		mu.Unlock()
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/v1/services/prod-orders":
			_, _ = io.WriteString(w, `{"id":"prod-orders","revision":1,"enabled":true,"account":null,"credentials":[{"id":"c0"}]}`)
		case r.URL.Path == "/v1/changes":
			_, _ = io.WriteString(w, `{"change_requests":[`+pendingRequest+`],"next_page":null}`)
		case r.URL.Path == "/v1/rotation/due":
			_, _ = io.WriteString(w, `{"credentials":[{"id":"c1","name":"prod-db","state":"overdue","next_rotation_date":"2026-01-01T00:00:00Z","last_rotation_date":null,"services":["prod-orders"]}]}`)
		case strings.HasPrefix(r.URL.Path, "/v1/changes/"):
			_, _ = io.WriteString(w, pendingRequest)
		case r.Method == http.MethodGet:
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":"not found"}`)
		default:
			w.Header().Set("Location", "/v1/changes/cr1")
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, pendingRequest)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// TestHeldWriteExitsFour: each write an approval rule holds prints the change request on stdout (as
// JSON in a pipe, as text on request), says on stderr that nothing was written and how to follow
// it, and exits 4, never 0: a script cannot take the held change for an applied one.
func TestHeldWriteExitsFour(t *testing.T) {
	addr, _ := heldServer(t)
	client := []string{"-addr", addr, "-token", "2/user/alice:dG9rZW4="}
	writes := [][]string{
		{"creds", "update", "c1", "-enabled=false", "-reason", "quarterly"},
		{"creds", "revert", "c1", "1"},
		{"creds", "archive", "c1"},
		{"services", "map", "prod-orders", "c1"},
		{"services", "unmap", "prod-orders", "c0"},
		{"services", "revert", "prod-orders", "1"},
	}
	for _, args := range writes {
		t.Run(strings.Join(args[:2], " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := dispatch(append(append([]string{}, args...), client...), &stdout, &stderr); code != exitHeld {
				t.Fatalf("exit %d, want %d; stderr %q", code, exitHeld, stderr.String())
			}
			var printed map[string]any
			if err := json.Unmarshal(stdout.Bytes(), &printed); err != nil || printed["id"] != "cr1" || printed["status"] != "pending" {
				t.Errorf("stdout is not the change request: %q", stdout.String())
			}
			for _, want := range []string{"held for approval, not applied", "cr1", "gantry changes show cr1"} {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr %q lacks %q", stderr.String(), want)
				}
			}
		})
	}
	var stdout, stderr bytes.Buffer
	if code := dispatch(append([]string{"creds", "update", "c1", "-enabled=false", "-output", "table"}, client...), &stdout, &stderr); code != exitHeld {
		t.Fatalf("table: exit %d", code)
	}
	for _, want := range []string{"pending: not applied, waiting for 1 more approval", "update credential prod-db (c1)",
		"keys added: new_key", "keys changed (values not shown): password", "enabled: false", "1 of 2", "user:bob", "gantry changes approve cr1"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("table output lacks %q:\n%s", want, stdout.String())
		}
	}
}

// TestChangeFlagsReachTheServer: -reason and -break-glass travel in the body of the writes that have
// one and in the query of the reverts; -break-glass without -reason is a usage error that sends
// nothing.
func TestChangeFlagsReachTheServer(t *testing.T) {
	addr, requests := heldServer(t)
	client := []string{"-addr", addr, "-token", "2/user/alice:dG9rZW4="}
	run := func(args ...string) int {
		return dispatch(append(args, client...), &bytes.Buffer{}, &bytes.Buffer{})
	}
	if code := run("creds", "update", "c1", "-enabled=false", "-break-glass"); code != exitUsage {
		t.Errorf("-break-glass without -reason: exit %d, want %d", code, exitUsage)
	}
	if code := run("services", "revert", "prod-orders", "1", "-break-glass", "-reason", " "); code != exitUsage {
		t.Errorf("-break-glass with a blank -reason: exit %d, want %d", code, exitUsage)
	}
	if got := requests(); len(got) != 0 {
		t.Fatalf("usage errors sent %q", got)
	}
	run("creds", "update", "c1", "-enabled=false", "-reason", "db outage", "-break-glass")
	run("creds", "revert", "c1", "2", "-reason", "bad rotation")
	run("creds", "archive", "c1", "-reason", "retired")
	run("services", "map", "prod-orders", "c1", "-reason", "new queue")
	run("services", "revert", "prod-orders", "1", "-reason", "outage", "-break-glass")
	want := []string{
		`PUT /v1/credentials/c1 {"enabled":false,"change_reason":"db outage","break_glass":true}`,
		`PUT /v1/credentials/c1/2?change_reason=bad+rotation `,
		`POST /v1/credentials/c1/archive {"force":true,"change_reason":"retired"}`,
		`GET /v1/services/prod-orders?metadata_only=true `,
		`PUT /v1/services/prod-orders {"credentials":["c0","c1"],"enabled":true,"change_reason":"new queue"}`,
		`PUT /v1/services/prod-orders/1?break_glass=true&change_reason=outage `,
	}
	if got := requests(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestChangesCommands: gantry changes and gantry creds due call the contract's routes and print
// what a person needs (a table on request, JSON otherwise); a bad -status is a usage error.
func TestChangesCommands(t *testing.T) {
	addr, requests := heldServer(t)
	client := []string{"-addr", addr, "-token", "2/user/bob:dG9rZW4="}
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"changes", "list", "-output", "table"}, []string{"ID", "APPROVALS", "cr1", "pending", "credential prod-db (c1)", "1/2", "user:alice"}},
		{[]string{"changes", "list", "-status", "all"}, []string{`"id": "cr1"`}},
		{[]string{"changes", "show", "cr1", "-output", "table"}, []string{"quarterly", "expires", "2026-01-08T00:00:00Z"}},
		{[]string{"changes", "approve", "cr1"}, []string{`"status": "pending"`}},
		{[]string{"changes", "reject", "cr1", "-reason", "not on a Friday"}, []string{`"id": "cr1"`}},
		{[]string{"changes", "cancel", "cr1"}, []string{`"id": "cr1"`}},
		{[]string{"creds", "due", "-within-days", "30", "-output", "table"}, []string{"NEXT ROTATION", "prod-db", "overdue", "never", "prod-orders"}},
		{[]string{"creds", "due"}, []string{`"state": "overdue"`}},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		if code := dispatch(append(tt.args, client...), &stdout, &stderr); code != exitOK {
			t.Errorf("%v: exit %d, stderr %q", tt.args, code, stderr.String())
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(stdout.String(), w) {
				t.Errorf("%v: output lacks %q:\n%s", tt.args, w, stdout.String())
			}
		}
	}
	want := []string{
		"GET /v1/changes?status=pending ",
		"GET /v1/changes ",
		"GET /v1/changes/cr1 ",
		"POST /v1/changes/cr1/approve {}",
		`POST /v1/changes/cr1/reject {"reason":"not on a Friday"}`,
		`POST /v1/changes/cr1/cancel {"reason":""}`,
		"GET /v1/rotation/due?within_days=30 ",
		"GET /v1/rotation/due ",
	}
	if got := requests(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, args := range [][]string{{"changes", "list", "-status", "open"}, {"creds", "due", "-within-days", "-1"}, {"changes", "show"}} {
		if code := dispatch(append(args, client...), &bytes.Buffer{}, &bytes.Buffer{}); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}
