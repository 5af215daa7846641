package gantryclient

import (
	"context"
	"net/http"
	"net/url"

	"github.com/gantry-dev/gantry/pkg/credpair"
)

// Credential is a credential as the server answers it. CredentialPairs holds the secret values, each
// with its JSON type (string, number, boolean or null): only single-credential and single-service
// answers carry them.
type Credential struct {
	ID               string            `json:"id"`
	Name             string            `json:"name"`
	CredentialKeys   []string          `json:"credential_keys"`
	CredentialPairs  credpair.Map      `json:"credential_pairs,omitempty"`
	Metadata         map[string]string `json:"metadata"`
	Revision         int               `json:"revision"`
	Enabled          bool              `json:"enabled"`
	Documentation    string            `json:"documentation"`
	Tags             []string          `json:"tags"`
	ModifiedDate     string            `json:"modified_date"`
	ModifiedBy       string            `json:"modified_by"`
	LastRotationDate *string           `json:"last_rotation_date"`
	NextRotationDate *string           `json:"next_rotation_date"`
	Permissions      map[string]bool   `json:"permissions,omitempty"`
}

// WithoutValues is the credential without its secret values, for every output but an explicit get.
func (c Credential) WithoutValues() Credential {
	c.CredentialPairs = nil
	return c
}

// CredentialInput is the body of a credential create or update: nil fields are not sent, so an update
// keeps their current value.
type CredentialInput struct {
	Name            *string           `json:"name,omitempty"`
	CredentialPairs credpair.Map      `json:"credential_pairs,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	Enabled         *bool             `json:"enabled,omitempty"`
	Documentation   *string           `json:"documentation,omitempty"`
	Tags            []string          `json:"tags,omitempty"`
}

// Service is a service and the credentials mapped to it.
type Service struct {
	ID           string          `json:"id"`
	Revision     int             `json:"revision"`
	Enabled      bool            `json:"enabled"`
	ModifiedDate string          `json:"modified_date"`
	ModifiedBy   string          `json:"modified_by"`
	Account      *string         `json:"account"`
	Credentials  []Credential    `json:"credentials"`
	Permissions  map[string]bool `json:"permissions,omitempty"`
}

// ServiceInput is the body of PUT /v1/services/{id}: the whole mapping, which replaces the current one.
type ServiceInput struct {
	Credentials []string `json:"credentials"`
	Enabled     *bool    `json:"enabled,omitempty"`
	Account     *string  `json:"account,omitempty"`
}

// FieldChange is one differing field of a diff. For credential_pairs it lists key names, never values.
type FieldChange struct {
	Added   any `json:"added"`
	Removed any `json:"removed"`
}

// IssuedCertificate is a certificate the server issued with a key it generated.
type IssuedCertificate struct {
	Certificate      string `json:"certificate"`
	CertificateChain string `json:"certificate_chain"`
	Key              string `json:"key"`
}

// CertificateRequest says what certificate to issue; Validity is in days, 0 meaning the CA's maximum.
type CertificateRequest struct {
	CA       string
	CN       string
	SANs     []string
	Validity int
	KeyType  string
}

// page is the paging part of every listing.
type page struct {
	NextPage *string `json:"next_page"`
}

// listAll follows next_page until the end, appending what each page holds with collect. filter is
// sent with every page (nil: none).
func (c *Client) listAll(ctx context.Context, path string, filter url.Values, decode func() (any, *page), collect func()) error {
	query := url.Values{}
	for k, v := range filter {
		query[k] = v
	}
	for {
		out, p := decode()
		if err := c.do(ctx, http.MethodGet, path, query, nil, out); err != nil {
			return err
		}
		collect()
		if p.NextPage == nil || *p.NextPage == "" {
			return nil
		}
		query.Set("next_page", *p.NextPage)
	}
}

// ListCredentials returns every current credential, without values.
func (c *Client) ListCredentials(ctx context.Context) ([]Credential, error) {
	var all []Credential
	var resp struct {
		page
		Credentials []Credential `json:"credentials"`
	}
	err := c.listAll(ctx, "/v1/credentials", nil,
		func() (any, *page) { resp.Credentials, resp.NextPage = nil, nil; return &resp, &resp.page },
		func() { all = append(all, resp.Credentials...) })
	return all, err
}

// GetCredential returns one credential with its values (when the caller may read them).
func (c *Client) GetCredential(ctx context.Context, id string) (Credential, error) {
	var cred Credential
	err := c.do(ctx, http.MethodGet, "/v1/credentials/"+escape(id), nil, nil, &cred)
	return cred, err
}

// CreateCredential creates a credential.
func (c *Client) CreateCredential(ctx context.Context, in CredentialInput) (Credential, error) {
	var cred Credential
	err := c.do(ctx, http.MethodPost, "/v1/credentials", nil, in, &cred)
	return cred, err
}

// UpdateCredential writes a new revision with the fields of in that are set. When an approval rule
// protects the credential, nothing is written and the error is a *PendingApprovalError.
func (c *Client) UpdateCredential(ctx context.Context, id string, in CredentialInput, change Change) (Credential, error) {
	var cred Credential
	body := struct {
		CredentialInput
		changeFields
	}{in, change.fields()}
	err := c.do(ctx, http.MethodPut, "/v1/credentials/"+escape(id), nil, body, &cred)
	return cred, err
}

// DiffCredential returns the fields that differ between two revisions.
func (c *Client) DiffCredential(ctx context.Context, id string, oldRevision, newRevision int) (map[string]FieldChange, error) {
	return c.diff(ctx, "/v1/credentials/"+escape(id)+"/"+itoa(oldRevision)+"/"+itoa(newRevision))
}

// CredentialHistory returns every revision of a credential, oldest first, without values.
func (c *Client) CredentialHistory(ctx context.Context, id string) ([]Credential, error) {
	var all []Credential
	var resp struct {
		page
		Revisions []Credential `json:"revisions"`
	}
	err := c.listAll(ctx, "/v1/archive/credentials/"+escape(id), nil,
		func() (any, *page) { resp.Revisions, resp.NextPage = nil, nil; return &resp, &resp.page },
		func() { all = append(all, resp.Revisions...) })
	return all, err
}

// RevertCredential writes a new revision with the content of revision (or, under an approval rule,
// returns a *PendingApprovalError).
func (c *Client) RevertCredential(ctx context.Context, id string, revision int, change Change) (Credential, error) {
	var cred Credential
	err := c.do(ctx, http.MethodPut, "/v1/credentials/"+escape(id)+"/"+itoa(revision), change.query(), nil, &cred)
	return cred, err
}

// ArchiveCredential archives a disabled, unmapped credential; with dryRun the server only checks that
// it could. It returns the server's result ("success" or "dry-run success"), or under an approval
// rule a *PendingApprovalError.
func (c *Client) ArchiveCredential(ctx context.Context, id string, dryRun bool, change Change) (string, error) {
	var resp struct {
		Result string `json:"result"`
	}
	// The archive route takes its whole request from the body: the change fields go there too.
	body := struct {
		Force bool `json:"force"`
		changeFields
	}{!dryRun, change.fields()}
	err := c.do(ctx, http.MethodPost, "/v1/credentials/"+escape(id)+"/archive", nil, body, &resp)
	return resp.Result, err
}

// ListServices returns every current service.
func (c *Client) ListServices(ctx context.Context) ([]Service, error) {
	var all []Service
	var resp struct {
		page
		Services []Service `json:"services"`
	}
	err := c.listAll(ctx, "/v1/services", nil,
		func() (any, *page) { resp.Services, resp.NextPage = nil, nil; return &resp, &resp.page },
		func() { all = append(all, resp.Services...) })
	return all, err
}

// GetService returns a service with its credentials expanded; with metadataOnly they carry no values.
func (c *Client) GetService(ctx context.Context, id string, metadataOnly bool) (Service, error) {
	var svc Service
	query := url.Values{}
	if metadataOnly {
		query.Set("metadata_only", "true")
	}
	err := c.do(ctx, http.MethodGet, "/v1/services/"+escape(id), query, nil, &svc)
	return svc, err
}

// PutService creates the service or replaces its mapping (or, under an approval rule, returns a
// *PendingApprovalError).
func (c *Client) PutService(ctx context.Context, id string, in ServiceInput, change Change) (Service, error) {
	var svc Service
	if in.Credentials == nil {
		in.Credentials = []string{} // an empty mapping, not a missing field
	}
	body := struct {
		ServiceInput
		changeFields
	}{in, change.fields()}
	err := c.do(ctx, http.MethodPut, "/v1/services/"+escape(id), nil, body, &svc)
	return svc, err
}

// RevertService writes a new revision of the service with the mapping of revision (or, under an
// approval rule, returns a *PendingApprovalError).
func (c *Client) RevertService(ctx context.Context, id string, revision int, change Change) (Service, error) {
	var svc Service
	err := c.do(ctx, http.MethodPut, "/v1/services/"+escape(id)+"/"+itoa(revision), change.query(), nil, &svc)
	return svc, err
}

// ServiceHistory returns every revision of a service, oldest first.
func (c *Client) ServiceHistory(ctx context.Context, id string) ([]Service, error) {
	var all []Service
	var resp struct {
		page
		Revisions []Service `json:"revisions"`
	}
	err := c.listAll(ctx, "/v1/archive/services/"+escape(id), nil,
		func() (any, *page) { resp.Revisions, resp.NextPage = nil, nil; return &resp, &resp.page },
		func() { all = append(all, resp.Revisions...) })
	return all, err
}

// IssueCertificate has the CA issue a certificate for a key the server generates and returns.
func (c *Client) IssueCertificate(ctx context.Context, req CertificateRequest) (IssuedCertificate, error) {
	query := url.Values{}
	for _, san := range req.SANs {
		query.Add("san", san)
	}
	if req.Validity > 0 {
		query.Set("validity", itoa(req.Validity))
	}
	if req.KeyType != "" {
		query.Set("key_type", req.KeyType)
	}
	var issued IssuedCertificate
	err := c.do(ctx, http.MethodGet, "/v1/certificates/"+escape(req.CA)+"/"+escape(req.CN), query, nil, &issued)
	return issued, err
}

func (c *Client) diff(ctx context.Context, path string) (map[string]FieldChange, error) {
	var resp map[string]FieldChange
	err := c.do(ctx, http.MethodGet, path, nil, nil, &resp)
	return resp, err
}

// Caller is who the server takes the caller to be (GET /v1/whoami).
type Caller struct {
	Principal     string `json:"principal"`
	PrincipalType string `json:"principal_type"`
	AuthType      string `json:"auth_type"`
}

// Caller returns the authenticated caller and its authentication method.
func (c *Client) Caller(ctx context.Context) (Caller, error) {
	var out Caller
	err := c.do(ctx, http.MethodGet, "/v1/whoami", nil, nil, &out)
	return out, err
}
