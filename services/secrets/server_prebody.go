package secrets

import (
	"net/http"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/wirekeys"
	optionsv1 "github.com/gantry-dev/gantry/proto/gantry/options/v1"
)

// MissingCredentialCheck returns the check the gateway runs on a secrets route before it reads the
// request's body: for a method that is not public, a call that carries no credential at all gets the
// gRPC status AuthInterceptor would answer it with (the same code and message), so an unauthenticated
// body is never read, decoded or sent upstream. It returns nil for every call the service must see:
// public methods, methods it does not know (the service refuses those itself), calls that carry
// something to verify, and every call when USE_AUTH is off.
//
// header returns the values of one request header under its lower-case name, as the service would
// receive it in metadata (authorization, x-auth-from, x-auth-token, cookie and the header login's
// trusted headers). Only settings decide, no key: a gateway of its own process reads the same
// USE_AUTH, USER_AUTH_MODULE, SESSION_COOKIE_NAME and HEADER_AUTH_* settings as the secrets service.
// Sessions of `gantry login` links count as credentials whenever they could be accepted (USE_AUTH
// with USER_AUTH_MODULE=null), because whether the service holds a session key is not a setting.
func MissingCredentialCheck(cfg AuthConfig) func(fullMethod string, header func(name string) []string) error {
	a := &authenticator{cfg: cfg, linkSessions: cfg.UseAuth && cfg.UserAuthModule == "null"}
	headerNames := cfg.headerNames()
	return func(fullMethod string, header func(string) []string) error {
		policy, ok := policies.Lookup(fullMethod)
		if !ok || (policy.Access != optionsv1.Access_ACCESS_AUTHENTICATED && policy.Access != optionsv1.Access_ACCESS_AUTHENTICATED_WRITE) {
			return nil
		}
		first := func(name string) string {
			if v := header(name); len(v) > 0 {
				return v[0]
			}
			return ""
		}
		req := AuthRequest{
			Authorization: first(wirekeys.Authorization), AuthFrom: first(wirekeys.AuthFrom), AuthToken: first(wirekeys.AuthToken),
			Cookies: map[string]string{}, Headers: map[string]string{}, ClientCert: first(wirekeys.ClientCert),
		}
		for _, line := range header(wirekeys.Cookie) {
			cookies, _ := http.ParseCookie(line)
			for _, c := range cookies {
				req.Cookies[c.Name] = c.Value
			}
		}
		for _, h := range headerNames {
			req.Headers[h] = first(h)
		}
		if err := a.missingCredential(req); err != nil {
			return toStatus(zap.NewNop(), err)
		}
		return nil
	}
}
