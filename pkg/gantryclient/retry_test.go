package gantryclient

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/credpair"
)

var name = "db"

// refusingServer answers the first refusals requests with status and Retry-After (when retryAfter is
// not empty), then 200 with a credential; it counts the requests and keeps their bodies.
func refusingServer(t *testing.T, refusals, status int, retryAfter string) (*httptest.Server, func() []string) {
	t.Helper()
	var (
		mu     sync.Mutex
		bodies []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, r.Method+" "+string(body))
		n := len(bodies)
		mu.Unlock()
		if n <= refusals {
			if retryAfter != "" {
				w.Header().Set("Retry-After", retryAfter)
			}
			w.WriteHeader(status)
			_, _ = io.WriteString(w, `{"error":"too many writes"}`)
			return
		}
		_, _ = io.WriteString(w, `{"id":"c1","name":"db"}`)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), bodies...) }
}

// TestRetryAfter429: a write refused with 429 and Retry-After is sent again, the same body, after the
// wait the server asked for, and succeeds; the caller is told once per wait.
func TestRetryAfter429(t *testing.T) {
	srv, seen := refusingServer(t, 1, http.StatusTooManyRequests, "1")
	var notified []time.Duration
	c := &Client{BaseURL: srv.URL, Retry: RetryPolicy{Notify: func(err error, wait time.Duration) {
		if !IsStatus(err, http.StatusTooManyRequests) {
			t.Errorf("notified of %v, want the 429", err)
		}
		notified = append(notified, wait)
	}}}
	start := time.Now()
	cred, err := c.CreateCredential(context.Background(), CredentialInput{Name: &name, CredentialPairs: credpair.Strings(map[string]string{"k": "v"})})
	if err != nil || cred.ID != "c1" {
		t.Fatalf("CreateCredential = %+v, %v; want c1 after one retry", cred, err)
	}
	if elapsed := time.Since(start); elapsed < time.Second {
		t.Errorf("retried after %v, before the 1 s the server asked for", elapsed)
	}
	got := seen()
	if len(got) != 2 || got[0] != got[1] {
		t.Errorf("requests = %q, want the same POST twice", got)
	}
	if len(notified) != 1 || notified[0] != time.Second {
		t.Errorf("notified = %v, want one wait of 1s", notified)
	}
}

// TestRetryNotSafe: what must not or cannot be waited out is returned at once: a 503 to a write (a
// stalled store may still commit it), a 429 without Retry-After, a 429 whose wait exceeds MaxWait,
// and any wait when retrying is off.
func TestRetryNotSafe(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		retryAfter string
		policy     RetryPolicy
	}{
		{"503 to a write", http.StatusServiceUnavailable, "1", RetryPolicy{}},
		{"429 without Retry-After", http.StatusTooManyRequests, "", RetryPolicy{}},
		{"429 with a date", http.StatusTooManyRequests, "Wed, 21 Oct 2015 07:28:00 GMT", RetryPolicy{}},
		{"wait beyond MaxWait", http.StatusTooManyRequests, "5", RetryPolicy{MaxWait: 2 * time.Second}},
		{"retrying off", http.StatusTooManyRequests, "1", RetryPolicy{MaxWait: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, seen := refusingServer(t, 1, tt.status, tt.retryAfter)
			tt.policy.Notify = func(error, time.Duration) { t.Error("waited") }
			c := &Client{BaseURL: srv.URL, Retry: tt.policy}
			_, err := c.CreateCredential(context.Background(), CredentialInput{Name: &name})
			if !IsStatus(err, tt.status) {
				t.Fatalf("err = %v, want the %d", err, tt.status)
			}
			if n := len(seen()); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
		})
	}
}

// TestRetryRead503: a read answered 503 with Retry-After (an overloaded gateway) is retried.
func TestRetryRead503(t *testing.T) {
	srv, seen := refusingServer(t, 1, http.StatusServiceUnavailable, "0")
	c := &Client{BaseURL: srv.URL}
	if _, err := c.GetCredential(context.Background(), "c1"); err != nil {
		t.Fatal(err)
	}
	if n := len(seen()); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}

// TestRetryStopsWithContext: a cancelled context ends the wait with the server's answer.
func TestRetryStopsWithContext(t *testing.T) {
	srv, _ := refusingServer(t, 100, http.StatusTooManyRequests, "30")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := (&Client{BaseURL: srv.URL}).CreateCredential(ctx, CredentialInput{Name: &name})
	if !IsStatus(err, http.StatusTooManyRequests) {
		t.Fatalf("err = %v, want the 429", err)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Errorf("returned after %v; the context ended after 200ms", elapsed)
	}
}
