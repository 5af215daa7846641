package iamroles

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/smithy-go"

	"github.com/gantry-dev/gantry/pkg/awstest"
	"github.com/gantry-dev/gantry/pkg/iamroles/iamtest"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
)

// newFakeAWS returns the production lister talking to a fresh fake IAM. Retries are off so a fault
// injected with FailNext reaches the caller instead of being retried away.
func newFakeAWS(t *testing.T, roles ...string) (*AWS, *iamtest.Server) {
	t.Helper()
	srv := iamtest.NewServer(roles...)
	t.Cleanup(srv.Close)
	return newAWS(t, srv.URL()), srv
}

func newAWS(t *testing.T, endpoint string) *AWS {
	t.Helper()
	a, err := NewAWS(context.Background(), AWSConfig{Region: "us-east-1", Endpoint: endpoint, Timeout: 5 * time.Second},
		logtest.New(t), func(o *iam.Options) {
			o.Credentials = credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")
			o.Retryer = awstest.ConnectionRetriesOnly()
		})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// roleNames returns n distinct role names, shuffled so the lister's sorting is what puts them in order.
func roleNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("service-%05d", i)
	}
	rand.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	return names
}

func TestAWSRoles(t *testing.T) {
	tests := []struct {
		roles, pageSize, wantRequests int
	}{
		{roles: 0, wantRequests: 1},
		{roles: 1, wantRequests: 1},
		{roles: 1000, wantRequests: 1},
		{roles: 1001, wantRequests: 2},
		{roles: 2500, pageSize: 1000, wantRequests: 3},
		{roles: 50, pageSize: 7, wantRequests: 8},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d-roles-page-%d", tt.roles, tt.pageSize), func(t *testing.T) {
			names := roleNames(tt.roles)
			a, srv := newFakeAWS(t, names...)
			srv.PageSize(tt.pageSize)
			got, err := a.Roles(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			want := slices.Sorted(slices.Values(names))
			if !slices.Equal(got, want) {
				t.Errorf("got %d roles, want %d sorted (first got %v)", len(got), len(want), got[:min(3, len(got))])
			}
			if got == nil {
				t.Error("Roles returned nil; an empty account must list as an empty slice")
			}
			// Pages, not raw requests: the test retryer repeats a request whose pooled loopback
			// connection failed (aws-sdk-go-v2 #2737), which a loaded machine makes happen.
			if n := srv.Pages(); n != tt.wantRequests {
				t.Errorf("requested %d pages, want %d", n, tt.wantRequests)
			}
		})
	}
}

func TestAWSRolesErrors(t *testing.T) {
	tests := []struct {
		status int
		code   string
	}{
		{http.StatusInternalServerError, "ServiceFailure"},
		{http.StatusBadRequest, "Throttling"},
		{http.StatusForbidden, "AccessDenied"},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			a, srv := newFakeAWS(t, "a", "b")
			srv.FailNext(1, tt.status, tt.code)
			roles, err := a.Roles(context.Background())
			var apiErr smithy.APIError
			if !errors.As(err, &apiErr) || apiErr.ErrorCode() != tt.code {
				t.Fatalf("Roles = %v, %v; want the API error %s", roles, err, tt.code)
			}
			if roles != nil {
				t.Errorf("Roles returned %v along with an error", roles)
			}
			if roles, err := a.Roles(context.Background()); err != nil || len(roles) != 2 {
				t.Errorf("after the fault: Roles = %v, %v", roles, err)
			}
		})
	}

	// A failure on a later page must fail the listing, not return the first page as if it were all.
	t.Run("second-page", func(t *testing.T) {
		srv := iamtest.NewServer(roleNames(10)...)
		t.Cleanup(srv.Close)
		srv.PageSize(4)
		// A proxy in front of the fake arms its fault just before the second request reaches it.
		target, err := url.Parse(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		forward := httputil.NewSingleHostReverseProxy(target)
		var seen atomic.Int32
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if seen.Add(1) == 2 {
				srv.FailNext(1, http.StatusInternalServerError, "ServiceFailure")
			}
			forward.ServeHTTP(w, r)
		}))
		t.Cleanup(proxy.Close)
		a := newAWS(t, proxy.URL)
		roles, err := a.Roles(context.Background())
		var apiErr smithy.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "ServiceFailure" {
			t.Fatalf("Roles = %v, %v with a failing second page; want the ServiceFailure error", roles, err)
		}
		if n := srv.Requests(); n != 2 {
			t.Errorf("fake saw %d requests, want 2", n)
		}
	})

	t.Run("unreachable", func(t *testing.T) {
		a, srv := newFakeAWS(t, "a")
		srv.Close()
		if roles, err := a.Roles(context.Background()); err == nil {
			t.Fatalf("Roles = %v from a closed server; want an error", roles)
		}
	})

	t.Run("cancelled", func(t *testing.T) {
		a, _ := newFakeAWS(t, "a")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := a.Roles(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Roles err = %v, want context.Canceled", err)
		}
	})
}

func TestNewAWSConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  AWSConfig
	}{
		{"endpoint-no-scheme", AWSConfig{Endpoint: "iam.example.com"}},
		{"endpoint-ftp", AWSConfig{Endpoint: "ftp://iam.example.com"}},
		{"endpoint-no-host", AWSConfig{Endpoint: "https://"}},
		{"negative-timeout", AWSConfig{Timeout: -time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if a, err := NewAWS(context.Background(), tt.cfg, nil); err == nil {
				t.Errorf("NewAWS succeeded: %+v", a)
			}
		})
	}
}
