package secrets

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzSessionCookie feeds arbitrary session cookie values and XSRF headers: none may panic, and only
// the value the server itself signed may decode (a forged or altered cookie never authenticates).
func FuzzSessionCookie(f *testing.F) {
	s := newSessions(AuthConfig{SessionSecret: "fuzz-session-secret-0123456789abcdef", SessionCookieName: "session",
		PermanentSessionLifetime: time.Hour, MaxPermanentSessionLifetime: 24 * time.Hour}, "XSRF-TOKEN")
	// A fixed clock: every fuzzing worker process must sign the very same genuine cookie.
	fixed := time.Unix(1_800_000_000, 0)
	s.now = func() time.Time { return fixed }
	s.newID = func() string { return "fuzz-session-id" }
	genuine := s.encode(s.start("alice@example.com", "Alice", "A"))
	f.Add(genuine, "")
	f.Add(genuine+"x", "x")
	f.Add("", "")
	f.Add(".", ".")
	f.Add(genuine, s.headerXSRFToken("alice@example.com", fixed.Unix()))
	f.Add("eyJlIjoiYUBiLmMiLCJpIjowLCJ4Ijo5OTk5OTk5OTk5LCJtIjo5OTk5OTk5OTk5fQ.AAAA", "AAAA")
	f.Fuzz(func(t *testing.T, value, xsrf string) {
		sess, err := s.decode(value)
		if err == nil && value != genuine {
			t.Fatalf("a cookie the server never signed decoded: %q -> %+v", value, sess)
		}
		if s.checkXSRF(xsrf, "alice@example.com", 0) && xsrf != s.xsrfToken("alice@example.com", 0) {
			t.Fatalf("forged XSRF token %q accepted", xsrf)
		}
		if s.checkHeaderXSRF(xsrf, "alice@example.com") {
			at, _, _ := strings.Cut(xsrf, ".")
			issued, _ := strconv.ParseInt(at, 10, 64)
			if xsrf != s.headerXSRFToken("alice@example.com", issued) {
				t.Fatalf("forged header login XSRF token %q accepted", xsrf)
			}
		}
	})
}
