package userauth

import (
	"testing"
	"time"
)

// FuzzCookieOpen feeds arbitrary values to the flow-cookie verifier (SAML request tracker, OIDC
// state): nothing panics, and only values this signer sealed for this cookie name open.
func FuzzCookieOpen(f *testing.F) {
	c, err := newCookieSigner([]byte("fuzz-cookie-secret-0123456789abcdef"))
	if err != nil {
		f.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	genuine, err := c.seal("state", map[string]string{"n": "v"}, now.Add(time.Hour))
	if err != nil {
		f.Fatal(err)
	}
	f.Add("state", genuine)
	f.Add("other", genuine)
	f.Add("state", genuine[:len(genuine)-2])
	f.Add("state", "")
	f.Add("state", "eyJleHAiOjk5OTk5OTk5OTksInYiOnt9fQ.AAAA")
	f.Fuzz(func(t *testing.T, name, value string) {
		var v map[string]any
		if err := c.open(name, value, now, &v); err == nil && (value != genuine || name != "state") {
			t.Fatalf("cookie %q=%q opened without being sealed for it: %v", name, value, v)
		}
	})
}
