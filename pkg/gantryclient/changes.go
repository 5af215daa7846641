package gantryclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// Change says why a write is made and whether it breaks glass; the zero value is a plain write. An
// approval rule shows Reason to the approvers of the change it holds; BreakGlass asks the server to
// apply the write at once although a rule protects the record, which only principals the rule names
// may do, and only with a Reason.
type Change struct {
	Reason     string
	BreakGlass bool
}

// changeFields are a Change as the JSON body of a write carries it; unset fields are not sent, so a
// plain write is the body it always was.
type changeFields struct {
	ChangeReason string `json:"change_reason,omitempty"`
	BreakGlass   bool   `json:"break_glass,omitempty"`
}

func (c Change) fields() changeFields {
	return changeFields{ChangeReason: c.Reason, BreakGlass: c.BreakGlass}
}

// query is a Change as the query of a body-less write (the reverts) carries it; nil for a plain write.
func (c Change) query() url.Values {
	q := url.Values{}
	if c.Reason != "" {
		q.Set("change_reason", c.Reason)
	}
	if c.BreakGlass {
		q.Set("break_glass", "true")
	}
	if len(q) == 0 {
		return nil
	}
	return q
}

// ChangeRequest is a write to a protected credential or service held for approval (GET
// /v1/changes/{id}). It never carries a secret value: Changes names keys, never their values.
type ChangeRequest struct {
	ID string `json:"id"`
	// Status is pending, applied, rejected, cancelled, expired, stale (the record moved on before
	// approval), failed (approved, but the write was refused when applied: DecisionReason says why)
	// or break_glass (applied at once without approval).
	Status    string `json:"status"`
	StatusURL string `json:"status_url"`
	// Action is update, revert or archive.
	Action string `json:"action"`
	// ResourceType is credential or service.
	ResourceType string `json:"resource_type"`
	ResourceID   string `json:"resource_id"`
	ResourceName string `json:"resource_name"`
	// BaseRevision is the revision the change was made against (0: a service not created yet).
	BaseRevision      int              `json:"base_revision"`
	RequestedBy       string           `json:"requested_by"`
	Reason            string           `json:"reason"`
	CreatedDate       string           `json:"created_date"`
	ExpiryDate        string           `json:"expiry_date"`
	ApprovalsRequired int              `json:"approvals_required"`
	Approvals         []ChangeApproval `json:"approvals"`
	Changes           ChangeSummary    `json:"changes"`
	DecidedBy         string           `json:"decided_by"`
	DecidedDate       *string          `json:"decided_date"`
	DecisionReason    string           `json:"decision_reason"`
	// AppliedRevision is the revision the change was written as; nil until applied.
	AppliedRevision *int   `json:"applied_revision"`
	Channel         string `json:"channel"`
}

// ChangeApproval is one approval of a change request.
type ChangeApproval struct {
	By   string `json:"by"`
	Date string `json:"date"`
	// Via is api, or slack:<team>/<user> for a button pressed in Slack.
	Via string `json:"via"`
}

// ChangeSummary is what a change request would change, by name.
type ChangeSummary struct {
	KeysAdded               []string `json:"keys_added"`
	KeysRemoved             []string `json:"keys_removed"`
	KeysChanged             []string `json:"keys_changed"`
	MetadataChanged         []string `json:"metadata_changed"`
	CredentialsAdded        []string `json:"credentials_added"`
	CredentialsRemoved      []string `json:"credentials_removed"`
	BlindCredentialsAdded   []string `json:"blind_credentials_added"`
	BlindCredentialsRemoved []string `json:"blind_credentials_removed"`
	Name                    *string  `json:"name"`
	Enabled                 *bool    `json:"enabled"`
	FieldsChanged           []string `json:"fields_changed"`
	ToRevision              *int     `json:"to_revision"`
}

// DueCredential is a credential due or overdue for rotation.
type DueCredential struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// State is due (within the window) or overdue.
	State            string   `json:"state"`
	NextRotationDate string   `json:"next_rotation_date"`
	LastRotationDate *string  `json:"last_rotation_date"`
	Services         []string `json:"services"`
}

// PendingApprovalError is the answer of a write that an approval rule holds (HTTP 202): nothing was
// written, and Request is the change request approvers decide on. Writes return it as an error so
// that a held change is never taken for an applied one.
type PendingApprovalError struct {
	Request ChangeRequest
}

func (e *PendingApprovalError) Error() string {
	return fmt.Sprintf("held for approval, not applied: change request %s is %s (%d of %d approvals)",
		e.Request.ID, e.Request.Status, len(e.Request.Approvals), e.Request.ApprovalsRequired)
}

// HeldForApproval returns the change request of err when it is a *PendingApprovalError.
func HeldForApproval(err error) (*ChangeRequest, bool) {
	var pending *PendingApprovalError
	if !errors.As(err, &pending) {
		return nil, false
	}
	return &pending.Request, true
}

// decodePendingApproval reads the change request of a 202 answer.
func decodePendingApproval(method, path string, body []byte) error {
	var req ChangeRequest
	if err := json.Unmarshal(body, &req); err != nil || req.ID == "" || req.Status == "" {
		// Still not applied as far as the client knows: say so rather than report success.
		return fmt.Errorf("%s %s answered 202 Accepted without a change request: the write was not applied", method, path)
	}
	return &PendingApprovalError{Request: req}
}

// ChangeStatusAll, as a ListChangeRequests status, lists change requests in every status.
const ChangeStatusAll = ""

// ListChangeRequests returns the change requests the caller may see in status (ChangeStatusAll: every
// status), newest first.
func (c *Client) ListChangeRequests(ctx context.Context, status string) ([]ChangeRequest, error) {
	var all []ChangeRequest
	var resp struct {
		page
		ChangeRequests []ChangeRequest `json:"change_requests"`
	}
	var filter url.Values
	if status != ChangeStatusAll {
		filter = url.Values{"status": {status}}
	}
	err := c.listAll(ctx, "/v1/changes", filter,
		func() (any, *page) { resp.ChangeRequests, resp.NextPage = nil, nil; return &resp, &resp.page },
		func() { all = append(all, resp.ChangeRequests...) })
	return all, err
}

// GetChangeRequest returns one change request.
func (c *Client) GetChangeRequest(ctx context.Context, id string) (ChangeRequest, error) {
	var req ChangeRequest
	err := c.do(ctx, http.MethodGet, "/v1/changes/"+escape(id), nil, nil, &req)
	return req, err
}

// ApproveChangeRequest approves a pending change request and returns it as it is then: applied once
// it has its approvals, still pending, or stale when the record moved on.
func (c *Client) ApproveChangeRequest(ctx context.Context, id string) (ChangeRequest, error) {
	return c.decide(ctx, id, "approve", nil)
}

// RejectChangeRequest rejects a pending change request with a reason (may be empty).
func (c *Client) RejectChangeRequest(ctx context.Context, id, reason string) (ChangeRequest, error) {
	return c.decide(ctx, id, "reject", map[string]string{"reason": reason})
}

// CancelChangeRequest withdraws the caller's own pending change request with a reason (may be empty).
func (c *Client) CancelChangeRequest(ctx context.Context, id, reason string) (ChangeRequest, error) {
	return c.decide(ctx, id, "cancel", map[string]string{"reason": reason})
}

func (c *Client) decide(ctx context.Context, id, decision string, body map[string]string) (ChangeRequest, error) {
	if body == nil {
		body = map[string]string{} // the routes take a JSON body, even an empty one
	}
	var req ChangeRequest
	err := c.do(ctx, http.MethodPost, "/v1/changes/"+escape(id)+"/"+decision, nil, body, &req)
	return req, err
}

// ListDueCredentials returns the credentials due for rotation within withinDays days, or overdue,
// soonest first; nil withinDays is the server's window (the approval policy's reminders).
func (c *Client) ListDueCredentials(ctx context.Context, withinDays *int) ([]DueCredential, error) {
	var query url.Values
	if withinDays != nil {
		query = url.Values{"within_days": {strconv.Itoa(*withinDays)}}
	}
	var resp struct {
		Credentials []DueCredential `json:"credentials"`
	}
	err := c.do(ctx, http.MethodGet, "/v1/rotation/due", query, nil, &resp)
	return resp.Credentials, err
}
