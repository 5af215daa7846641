package iamtest_test

import (
	"context"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/iam/types"

	"github.com/gantry-dev/gantry/pkg/awstest"
	"github.com/gantry-dev/gantry/pkg/iamroles/iamtest"
)

func newServer(t *testing.T, roles ...string) *iamtest.Server {
	t.Helper()
	srv := iamtest.NewServer(roles...)
	t.Cleanup(srv.Close)
	return srv
}

// newClient is a bare SDK client (no shared config, no retries), so these tests see exactly what the
// fake answered.
func newClient(srv *iamtest.Server) *iam.Client {
	return iam.New(iam.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(srv.URL()),
		Credentials:  credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
		Retryer:      awstest.ConnectionRetriesOnly(),
	})
}

func TestSDKDecodesRoles(t *testing.T) {
	srv := newServer(t, "web", "api", "worker")
	srv.PageSize(2)
	client := newClient(srv)
	ctx := context.Background()

	first, err := client.ListRoles(ctx, &iam.ListRolesInput{MaxItems: aws.Int32(1000)})
	if err != nil {
		t.Fatal(err)
	}
	if !first.IsTruncated || aws.ToString(first.Marker) == "" || len(first.Roles) != 2 {
		t.Fatalf("first page: truncated=%v marker=%q roles=%d; want truncated, a marker and 2 roles",
			first.IsTruncated, aws.ToString(first.Marker), len(first.Roles))
	}
	r := first.Roles[0]
	wantCreated := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if aws.ToString(r.RoleName) != "web" || aws.ToString(r.Path) != "/" ||
		aws.ToString(r.Arn) != "arn:aws:iam::"+iamtest.AccountID+":role/web" ||
		!strings.HasPrefix(aws.ToString(r.RoleId), "AROA") || len(aws.ToString(r.RoleId)) != 21 ||
		r.CreateDate == nil || !r.CreateDate.Equal(wantCreated) ||
		aws.ToString(r.AssumeRolePolicyDocument) != "%7B%7D" {
		t.Errorf("role decoded as %+v", r)
	}

	second, err := client.ListRoles(ctx, &iam.ListRolesInput{Marker: first.Marker})
	if err != nil {
		t.Fatal(err)
	}
	if second.IsTruncated || second.Marker != nil || len(second.Roles) != 1 || aws.ToString(second.Roles[0].RoleName) != "worker" {
		t.Errorf("last page: truncated=%v marker=%v roles=%+v; want just worker and no marker",
			second.IsTruncated, second.Marker, second.Roles)
	}
	if n := srv.Requests(); n != 2 {
		t.Errorf("Requests = %d, want 2", n)
	}
}

func TestSDKDecodesErrors(t *testing.T) {
	srv := newServer(t, "web")
	client := newClient(srv)

	srv.FailNext(1, http.StatusInternalServerError, "ServiceFailure")
	_, err := client.ListRoles(context.Background(), &iam.ListRolesInput{})
	var failure *types.ServiceFailureException
	if !errors.As(err, &failure) {
		t.Errorf("err = %v, want a ServiceFailureException", err)
	}

	if _, err := client.ListRoles(context.Background(), &iam.ListRolesInput{MaxItems: aws.Int32(1001)}); err == nil ||
		!strings.Contains(err.Error(), "ValidationError") {
		t.Errorf("MaxItems 1001: err = %v, want ValidationError", err)
	}
}

type errorResponse struct {
	Type      string `xml:"Error>Type"`
	Code      string `xml:"Error>Code"`
	Message   string `xml:"Error>Message"`
	RequestID string `xml:"RequestId"`
}

const signedForIAM = "AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/iam/aws4_request, SignedHeaders=host, Signature=00"

// post sends a raw request, to check the wire format rather than what the SDK makes of it.
func post(t *testing.T, srv *iamtest.Server, method, contentType, auth string, form url.Values) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL(), strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func TestWireErrors(t *testing.T) {
	const form = "application/x-www-form-urlencoded"
	listRoles := func(extra ...string) url.Values {
		v := url.Values{"Action": {"ListRoles"}, "Version": {"2010-05-08"}}
		for i := 0; i+1 < len(extra); i += 2 {
			v.Set(extra[i], extra[i+1])
		}
		return v
	}
	tests := []struct {
		name        string
		method      string
		contentType string
		auth        string
		form        url.Values
		status      int
		code        string
	}{
		{"get", http.MethodGet, form, signedForIAM, listRoles(), 400, "InvalidAction"},
		{"json", http.MethodPost, "application/json", signedForIAM, listRoles(), 400, "MalformedInput"},
		{"unsigned", http.MethodPost, form, "", listRoles(), 403, "MissingAuthenticationToken"},
		{"signed-for-sts", http.MethodPost, form, strings.Replace(signedForIAM, "/iam/", "/sts/", 1), listRoles(), 403, "SignatureDoesNotMatch"},
		{"wrong-version", http.MethodPost, form, signedForIAM, listRoles("Version", "2011-06-15"), 400, "InvalidParameterValue"},
		{"unknown-action", http.MethodPost, form, signedForIAM, listRoles("Action", "ListUsers"), 400, "InvalidAction"},
		{"max-items-zero", http.MethodPost, form, signedForIAM, listRoles("MaxItems", "0"), 400, "ValidationError"},
		{"max-items-text", http.MethodPost, form, signedForIAM, listRoles("MaxItems", "many"), 400, "ValidationError"},
		{"bad-marker", http.MethodPost, form, signedForIAM, listRoles("Marker", "nope"), 400, "ValidationError"},
		{"marker-past-end", http.MethodPost, form, signedForIAM, listRoles("Marker", "99"), 400, "ValidationError"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, "web")
			resp, body := post(t, srv, tt.method, tt.contentType, tt.auth, tt.form)
			if resp.StatusCode != tt.status {
				t.Errorf("status = %d, want %d", resp.StatusCode, tt.status)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "text/xml" {
				t.Errorf("Content-Type = %q, want text/xml", ct)
			}
			var e errorResponse
			if err := xml.Unmarshal(body, &e); err != nil {
				t.Fatalf("error body is not XML: %v\n%s", err, body)
			}
			if e.Code != tt.code || e.Type != "Sender" || e.Message == "" || e.RequestID == "" {
				t.Errorf("error = %+v, want code %s from the Sender\n%s", e, tt.code, body)
			}
		})
	}

	t.Run("injected-5xx-blames-receiver", func(t *testing.T) {
		srv := newServer(t, "web")
		srv.FailNext(2, http.StatusInternalServerError, "ServiceFailure")
		for i := range 3 {
			resp, body := post(t, srv, http.MethodPost, form, signedForIAM, listRoles())
			if i == 2 {
				if resp.StatusCode != http.StatusOK {
					t.Errorf("request after the injected failures: status %d\n%s", resp.StatusCode, body)
				}
				break
			}
			var e errorResponse
			if err := xml.Unmarshal(body, &e); err != nil || resp.StatusCode != 500 || e.Code != "ServiceFailure" || e.Type != "Receiver" {
				t.Errorf("request %d: status %d, error %+v (%v)", i+1, resp.StatusCode, e, err)
			}
		}
		if n := srv.Requests(); n != 3 {
			t.Errorf("Requests = %d, want 3 (injected failures count)", n)
		}
	})
}

func TestWireEmptyList(t *testing.T) {
	srv := newServer(t)
	resp, body := post(t, srv, http.MethodPost, "application/x-www-form-urlencoded", signedForIAM,
		url.Values{"Action": {"ListRoles"}, "Version": {"2010-05-08"}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d\n%s", resp.StatusCode, body)
	}
	for _, want := range []string{
		`<ListRolesResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/">`,
		`<IsTruncated>false</IsTruncated>`,
		`<Roles></Roles>`,
		`<ResponseMetadata><RequestId>`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("response lacks %s\n%s", want, body)
		}
	}
	if strings.Contains(string(body), "<Marker>") {
		t.Errorf("a complete listing must carry no Marker\n%s", body)
	}
}
