package gantryclient

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// heldRequest is a change request as the server answers it, with every field the gateway emits.
const heldRequest = `{"id":"cr1","status":"pending","status_url":"/v1/changes/cr1","action":"update",
"resource_type":"credential","resource_id":"c1","resource_name":"prod-db","base_revision":2,
"requested_by":"user:alice","reason":"rotate","created_date":"2026-01-01T00:00:00Z",
"expiry_date":"2026-01-08T00:00:00Z","approvals_required":1,"approvals":[],
"changes":{"keys_added":[],"keys_removed":[],"keys_changed":["password"],"metadata_changed":[],
"credentials_added":[],"credentials_removed":[],"blind_credentials_added":[],"blind_credentials_removed":[],
"name":null,"enabled":null,"fields_changed":[],"to_revision":null},
"decided_by":"","decided_date":null,"decision_reason":"","applied_revision":null,"channel":""}`

// TestHeldWritesAreErrors: every write that the server answers 202 returns a *PendingApprovalError
// with the change request, never a record that looks written; a 202 without a change request is
// an error too.
func TestHeldWritesAreErrors(t *testing.T) {
	body := heldRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/v1/changes/cr1")
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, body)
	}))
	defer srv.Close()
	c := &Client{BaseURL: srv.URL}
	ctx := context.Background()
	writes := map[string]func() error{
		"update credential": func() error { _, err := c.UpdateCredential(ctx, "c1", CredentialInput{}, Change{}); return err },
		"revert credential": func() error { _, err := c.RevertCredential(ctx, "c1", 1, Change{}); return err },
		"archive":           func() error { _, err := c.ArchiveCredential(ctx, "c1", false, Change{}); return err },
		"put service":       func() error { _, err := c.PutService(ctx, "s", ServiceInput{}, Change{}); return err },
		"revert service":    func() error { _, err := c.RevertService(ctx, "s", 1, Change{}); return err },
	}
	for name, write := range writes {
		err := write()
		req, held := HeldForApproval(err)
		if !held || req.ID != "cr1" || req.Status != "pending" || req.ApprovalsRequired != 1 ||
			len(req.Changes.KeysChanged) != 1 || req.AppliedRevision != nil {
			t.Errorf("%s: err = %v, request %+v", name, err, req)
		}
		if IsStatus(err, http.StatusAccepted) {
			t.Errorf("%s: a held change is an APIError", name)
		}
		if !strings.Contains(err.Error(), "not applied") || !strings.Contains(err.Error(), "cr1") {
			t.Errorf("%s: message %q", name, err)
		}
	}
	body = `{"id":"c1","name":"prod-db"}` // a credential, not a change request
	_, err := c.UpdateCredential(ctx, "c1", CredentialInput{}, Change{})
	if _, held := HeldForApproval(err); held || err == nil || !strings.Contains(err.Error(), "not applied") {
		t.Errorf("202 without a change request: %v", err)
	}
}

// TestChangeFieldsAndRoutes: the reason and break glass travel in the JSON body of the writes that
// have one and in the query of the reverts, only when set; the change request routes and the due
// list use the contract's paths and bodies.
func TestChangeFieldsAndRoutes(t *testing.T) {
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		seen = append(seen, r.Method+" "+r.URL.RequestURI()+" "+string(data))
		switch {
		case r.URL.Path == "/v1/changes" && r.URL.Query().Get("next_page") == "":
			_, _ = io.WriteString(w, `{"change_requests":[{"id":"a"}],"next_page":"p2"}`)
		case r.URL.Path == "/v1/changes":
			_, _ = io.WriteString(w, `{"change_requests":[{"id":"b"}],"next_page":null}`)
		case r.URL.Path == "/v1/rotation/due":
			_, _ = io.WriteString(w, `{"credentials":[{"id":"c1","state":"overdue","last_rotation_date":null,"services":["s"]}]}`)
		case strings.HasPrefix(r.URL.Path, "/v1/changes/"):
			_, _ = io.WriteString(w, `{"id":"cr1","status":"applied","applied_revision":3}`)
		default:
			_, _ = io.WriteString(w, `{"id":"x"}`)
		}
	}))
	defer srv.Close()
	c := &Client{BaseURL: srv.URL}
	ctx := context.Background()
	glass := Change{Reason: "outage 42", BreakGlass: true}
	enabled := false
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.UpdateCredential(ctx, "c1", CredentialInput{Enabled: &enabled}, glass))
	must(c.UpdateCredential(ctx, "c1", CredentialInput{Enabled: &enabled}, Change{}))
	must(c.RevertCredential(ctx, "c1", 2, glass))
	must(c.RevertCredential(ctx, "c1", 2, Change{}))
	must(c.ArchiveCredential(ctx, "c1", false, Change{Reason: "gone"}))
	must(c.PutService(ctx, "s", ServiceInput{}, Change{Reason: "why"}))
	must(c.RevertService(ctx, "s", 1, Change{Reason: "why"}))
	list, err := c.ListChangeRequests(ctx, "pending")
	if err != nil || len(list) != 2 || list[1].ID != "b" {
		t.Fatalf("list = %v, %v", list, err)
	}
	must(c.ListChangeRequests(ctx, ChangeStatusAll))
	got, err := c.ApproveChangeRequest(ctx, "cr/1")
	if err != nil || got.AppliedRevision == nil || *got.AppliedRevision != 3 {
		t.Fatalf("approve = %+v, %v", got, err)
	}
	must(c.GetChangeRequest(ctx, "cr1"))
	must(c.RejectChangeRequest(ctx, "cr1", "not now"))
	must(c.CancelChangeRequest(ctx, "cr1", ""))
	week := 7
	due, err := c.ListDueCredentials(ctx, &week)
	if err != nil || len(due) != 1 || due[0].State != "overdue" || due[0].LastRotationDate != nil {
		t.Fatalf("due = %+v, %v", due, err)
	}
	must(c.ListDueCredentials(ctx, nil))
	want := []string{
		`PUT /v1/credentials/c1 {"enabled":false,"change_reason":"outage 42","break_glass":true}`,
		`PUT /v1/credentials/c1 {"enabled":false}`,
		`PUT /v1/credentials/c1/2?break_glass=true&change_reason=outage+42 `,
		`PUT /v1/credentials/c1/2 `,
		`POST /v1/credentials/c1/archive {"force":true,"change_reason":"gone"}`,
		`PUT /v1/services/s {"credentials":[],"change_reason":"why"}`,
		`PUT /v1/services/s/1?change_reason=why `,
		`GET /v1/changes?status=pending `,
		`GET /v1/changes?next_page=p2&status=pending `,
		`GET /v1/changes `,
		`GET /v1/changes?next_page=p2 `,
		`POST /v1/changes/cr%2F1/approve {}`,
		`GET /v1/changes/cr1 `,
		`POST /v1/changes/cr1/reject {"reason":"not now"}`,
		`POST /v1/changes/cr1/cancel {"reason":""}`,
		`GET /v1/rotation/due?within_days=7 `,
		`GET /v1/rotation/due `,
	}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}

// TestHeldForApprovalWrapped: a held change is recognised through wrapping, and other errors are not
// taken for one.
func TestHeldForApprovalWrapped(t *testing.T) {
	wrapped := errors.Join(errors.New("context"), &PendingApprovalError{Request: ChangeRequest{ID: "cr9"}})
	if req, ok := HeldForApproval(wrapped); !ok || req.ID != "cr9" {
		t.Errorf("wrapped: %v %v", req, ok)
	}
	if _, ok := HeldForApproval(&APIError{Status: 400}); ok {
		t.Error("an APIError is held")
	}
	if _, ok := HeldForApproval(nil); ok {
		t.Error("nil is held")
	}
}
