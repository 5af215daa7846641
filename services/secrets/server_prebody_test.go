package secrets

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	optionsv1 "github.com/gantry-dev/gantry/proto/gantry/options/v1"
)

// TestMissingCredentialCheckAnswersAsTheInterceptor: for every method, login module and set of
// request headers, the check the gateway runs before reading a body refuses only calls that
// AuthInterceptor refuses, with the same code and message; and it does refuse every call without any
// credential to a method that is not public (so the gateway never has to read such a body).
func TestMissingCredentialCheckAnswersAsTheInterceptor(t *testing.T) {
	headerSets := map[string]metadata.MD{
		"none":               {},
		"basic":              metadata.Pairs("authorization", "Basic Zm9vOmJhcg=="),
		"basic lower case":   metadata.Pairs("authorization", "basic Zm9vOmJhcg=="),
		"bearer":             metadata.Pairs("authorization", "Bearer abc"),
		"scheme only":        metadata.Pairs("authorization", "Basic"),
		"x-auth-from only":   metadata.Pairs("x-auth-from", "alice"),
		"x-auth-token only":  metadata.Pairs("x-auth-token", "t"),
		"session cookie":     metadata.Pairs("cookie", "confidant_session=abc"),
		"empty session":      metadata.Pairs("cookie", "confidant_session="),
		"other cookie":       metadata.Pairs("cookie", "theme=dark"),
		"two cookie lines":   metadata.Pairs("cookie", "theme=dark", "cookie", "confidant_session=abc"),
		"last session empty": metadata.Pairs("cookie", "confidant_session=abc; confidant_session="),
		"proxy user only":    metadata.Pairs("x-user", "alice"),
		"proxy email blank":  metadata.Pairs("x-user", "alice", "x-email", "  "),
		"proxy headers":      metadata.Pairs("x-user", "alice", "x-email", "alice@example.com"),
	}
	for _, tc := range []struct {
		name    string
		mutate  func(*Config)
		module  string // set on the running authenticator (login modules need identity providers to start)
		refuses bool   // a call without any credential is refused
	}{
		{name: "null with login links", mutate: func(c *Config) { c.Auth.SessionSecret = strings.Repeat("k", 32) }, refuses: true},
		{name: "null", refuses: true},
		{name: "header", mutate: func(c *Config) {
			c.Auth.UserAuthModule, c.Auth.HeaderUsername, c.Auth.HeaderEmail = "header", "X-User", "X-Email"
			c.Auth.SessionSecret = strings.Repeat("k", 32)
		}, refuses: true},
		{name: "saml", module: "saml", refuses: true},
		{name: "oidc", module: "oidc", refuses: true},
		{name: "auth off", mutate: func(c *Config) { c.Auth.UseAuth = false }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tc.mutate != nil {
				tc.mutate(&cfg)
			}
			svc, _ := keyringTestService(t, cfg, logtest.New(t))
			if tc.module != "" {
				svc.auth.cfg.UserAuthModule = tc.module
				cfg.Auth.UserAuthModule = tc.module
			}
			srv := NewServer(svc, logtest.New(t))
			interceptor := srv.AuthInterceptor()
			check := MissingCredentialCheck(cfg.Auth)
			refusedWithout := 0
			for method, policy := range policies {
				for setName, md := range headerSets {
					early := check(method, func(name string) []string { return md.Get(name) })
					if early == nil {
						if setName == "none" && tc.refuses && policy.Access != optionsv1.Access_ACCESS_PUBLIC {
							t.Errorf("%s without any credential: not refused before the body", method)
						}
						continue
					}
					if setName == "none" {
						refusedWithout++
					}
					called := false
					ctx := metadata.NewIncomingContext(context.Background(), md)
					_, err := interceptor(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) {
						called = true
						return nil, nil
					})
					if called || status.Code(err) != status.Code(early) || status.Convert(err).Message() != status.Convert(early).Message() {
						t.Errorf("%s with %s: refused before the body with %v, the service answers %v (handler called: %v)", method, setName, early, err, called)
					}
				}
			}
			if tc.refuses && refusedWithout == 0 {
				t.Error("no call without credentials was refused before the body")
			}
			if !tc.refuses && refusedWithout != 0 {
				t.Errorf("%d calls refused before the body with USE_AUTH off", refusedWithout)
			}
		})
	}
}
