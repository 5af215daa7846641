package secrets

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// headerAuthenticator is an authenticator for header login whose clock the test moves.
func headerAuthenticator(lifetime time.Duration, clock *time.Time) *authenticator {
	cfg := AuthConfig{UseAuth: true, UserAuthModule: "header", HeaderUsername: "X-Forwarded-User", HeaderEmail: "X-Forwarded-Email",
		SessionSecret: "header-xsrf-test-secret-0123456789abcdef", SessionCookieName: "session",
		PermanentSessionLifetime: lifetime, MaxPermanentSessionLifetime: 2 * lifetime}
	a := &authenticator{cfg: cfg, sessions: newSessions(cfg, "XSRF-TOKEN")}
	a.sessions.now = func() time.Time { return *clock }
	return a
}

func headerRequest(email, xsrf string, write bool) AuthRequest {
	return AuthRequest{Headers: map[string]string{"x-forwarded-user": "someone", "x-forwarded-email": email}, XSRFToken: xsrf, Write: write}
}

func xsrfCookieValue(t *testing.T, cookies []*http.Cookie) string {
	t.Helper()
	for _, c := range cookies {
		if c.Name == "XSRF-TOKEN" {
			return c.Value
		}
	}
	t.Fatalf("no XSRF-TOKEN cookie in %v", cookies)
	return ""
}

// TestHeaderLoginXSRFTokenRotates: a user logged in by trusted headers has no session, so the XSRF
// token must carry its own expiry: it changes over time, a fresh one comes with every response, and
// one older than the session lifetime (or made for another user) is refused.
func TestHeaderLoginXSRFTokenRotates(t *testing.T) {
	const lifetime = time.Hour
	clock := time.Unix(1_800_000_000, 0)
	a := headerAuthenticator(lifetime, &clock)
	read := func(email string) string {
		t.Helper()
		res, err := a.authenticate(t.Context(), headerRequest(email, "", false))
		if err != nil {
			t.Fatalf("read as %s: %v", email, err)
		}
		return xsrfCookieValue(t, res.Cookies)
	}
	write := func(email, xsrf string) error {
		_, err := a.authenticate(t.Context(), headerRequest(email, xsrf, true))
		return err
	}
	refused := func(err error) bool {
		var authErr *authError
		return errors.As(err, &authErr) && authErr.code == codes.Unauthenticated
	}

	first := read("alice@example.com")
	if err := write("alice@example.com", first); err != nil {
		t.Fatalf("write with a fresh token: %v", err)
	}
	if err := write("bob@example.com", first); !refused(err) {
		t.Errorf("alice's token used by bob: %v, want 401", err)
	}

	clock = clock.Add(time.Second)
	second := read("alice@example.com")
	if second == first {
		t.Errorf("the XSRF token did not change in a second: %q", first)
	}
	clock = clock.Add(lifetime - 2*time.Second) // first is one second short of its lifetime
	if err := write("alice@example.com", first); err != nil {
		t.Errorf("write with a token within its lifetime: %v", err)
	}
	clock = clock.Add(time.Second) // first is exactly lifetime old
	if err := write("alice@example.com", first); !refused(err) {
		t.Errorf("write with a token as old as the session lifetime: %v, want 401", err)
	}
	if err := write("alice@example.com", second); err != nil {
		t.Errorf("write with the newer token: %v", err)
	}
	clock = clock.Add(24 * time.Hour)
	if err := write("alice@example.com", second); !refused(err) {
		t.Errorf("write with a day-old token: %v, want 401", err)
	}
	if err := write("alice@example.com", read("alice@example.com")); err != nil {
		t.Errorf("write with the token of the last response: %v", err)
	}
}

// TestHeaderLoginXSRFTokenForgeries: tokens the server did not issue, or issued for a moment that has
// not come yet, are refused.
func TestHeaderLoginXSRFTokenForgeries(t *testing.T) {
	clock := time.Unix(1_800_000_000, 0)
	a := headerAuthenticator(time.Hour, &clock)
	s := a.sessions
	genuine := s.headerXSRFToken("alice@example.com", clock.Unix())
	future := s.headerXSRFToken("alice@example.com", clock.Add(time.Hour).Unix())
	for _, token := range []string{
		"", ".", "-", genuine[:len(genuine)-1], genuine + "0", "0" + genuine, "+" + genuine,
		future,
		s.xsrfToken("alice@example.com", clock.Unix()), // the session form
		s.xsrfToken("alice@example.com", 0),            // what header login used to issue, for good
	} {
		if s.checkHeaderXSRF(token, "alice@example.com") {
			t.Errorf("token %q accepted", token)
		}
	}
	if !s.checkHeaderXSRF(genuine, "alice@example.com") {
		t.Errorf("genuine token %q refused", genuine)
	}
}
