// Package userauth authenticates browser users of gantry's secrets service, the way Lyft
// Confidant's "saml" and "google" user auth modules do: a SAML 2.0 service provider (SAML) and an
// OpenID Connect relying party (OIDC).
//
// The package is transport-neutral on purpose. The secrets service is served over gRPC and exposed
// to browsers through grpc-gateway, so its handlers translate the incoming call into a Request and
// the returned Response back into an HTTP status, headers and body. Nothing here registers HTTP
// handlers, and nothing here owns a session: the caller starts its own session (and XSRF cookie)
// once this package says who the user is, and clears it on logout. The only cookies this package
// sets are its own short-lived, HMAC-signed flow cookies (the SAML request tracker and the OIDC
// state/nonce), which exist so a response from the identity provider can be tied to a login the
// same browser started.
//
// Every failure that means "this browser did not prove who it is" (forged, tampered, expired or
// unsolicited assertions, state mismatches, provider errors) wraps ErrNotAuthenticated, so callers
// map it to 401 with errors.Is. Other errors are server-side faults.
package userauth

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
)

// ErrNotAuthenticated reports that a login flow failed for a reason attributable to the request:
// a wrong, expired, forged or unsolicited assertion, a state or nonce mismatch, an error returned by
// the identity provider, or a user the configuration does not admit. It is always wrapped with a
// short reason; the reason never contains assertions, tokens or cookie values.
var ErrNotAuthenticated = errors.New("userauth: not authenticated")

// Request is the part of a browser request the login flows need, extracted by the caller's
// transport so this package stays independent of net/http handlers.
type Request struct {
	Method  string            // GET or POST
	Path    string            // e.g. "/v1/saml/consume"
	Query   url.Values        // URL query parameters
	Form    url.Values        // fields of a form POST (SAMLResponse, RelayState)
	Cookies map[string]string // request cookies by name
}

// Response is what the caller should send the browser.
type Response struct {
	Status      int            // 200, 302, 400, 401, 403; zero when only SetCookies matters
	Location    string         // for 302
	SetCookies  []*http.Cookie // this package's own short-lived flow cookies
	ContentType string
	Body        []byte
}

// User is the authenticated browser user.
type User struct {
	Email     string
	FirstName string
	LastName  string
}

// safeRelativePath reports whether s is a same-origin path that is safe to redirect a browser to
// after login. Only the path form is accepted: anything a browser could resolve to another origin
// ("https://evil", "//evil", "/\evil", which browsers treat like "//evil") is rejected, so a login
// link can never be used as an open redirect.
func safeRelativePath(s string) bool {
	if s == "" || s[0] != '/' || len(s) > 2048 {
		return false
	}
	if len(s) > 1 && (s[1] == '/' || s[1] == '\\') {
		return false
	}
	for _, r := range s {
		// Backslashes are normalised to slashes by browsers and control characters are stripped,
		// either of which can turn an innocent-looking path into a protocol-relative URL.
		if r == '\\' || r < 0x20 || r == 0x7f {
			return false
		}
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return false
	}
	return strings.HasPrefix(u.Path, "/")
}

// postLoginPath returns where to send the browser after login: next when it is a safe relative
// path that does not lead straight back into a login endpoint (which would loop), else "/".
func postLoginPath(next string) string {
	if !safeRelativePath(next) {
		return "/"
	}
	p := next
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	p = strings.TrimRight(p, "/")
	if strings.HasSuffix(p, "/saml/consume") || strings.HasSuffix(p, "/login") {
		return "/"
	}
	return next
}
