package workload

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/workload/workloadtest"
)

// TestJWTVerifier verifies real RS256 and ES256 tokens of an in-test Kubernetes issuer (keys through
// OIDC discovery) and of a GitHub-Actions-style issuer (keys from a file, offline), maps them to
// services, and refuses with a reason: expired, wrong audience, unknown issuer, another namespace or
// repository, a forged kubernetes.io claim, a bad signature, alg none, no exp, a too-long lifetime.
func TestJWTVerifier(t *testing.T) {
	cluster, ci := workloadtest.New(t), workloadtest.New(t)
	jwksFile := filepath.Join(t.TempDir(), "github-jwks.json")
	if err := os.WriteFile(jwksFile, ci.JWKS(), 0o600); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	v, err := NewJWTVerifier(JWTConfig{
		Issuers: []IssuerConfig{
			{Name: "prod-cluster", Kind: KindKubernetes, Issuer: cluster.URL, Audiences: []string{"gantry"}, MaxLifetime: Duration(48 * time.Hour)},
			{Name: "github", Kind: KindJWT, Issuer: ci.URL, Audiences: []string{"https://gantry.example.com"}, JWKSFile: jwksFile},
		},
		Mappings: []Mapping{
			{Issuer: "prod-cluster", Namespace: "shop", ServiceAccount: "orders", Service: "orders"},
			{Issuer: "prod-cluster", Namespace: "billing-*", ServiceAccount: "billing", Service: "billing"},
			{Issuer: "github", Claims: map[string]string{"repository": "acme/deploy", "ref": "refs/heads/main"}, Service: "deployer"},
		},
		Now: func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	k8s := func(ns, sa, aud string, ttl time.Duration) map[string]any {
		return cluster.KubernetesClaims(ns, sa, aud, now, ttl)
	}
	for _, c := range []struct {
		name, token, service, kind string
	}{
		{"kubernetes RS256", cluster.Sign(t, workloadtest.KidRSA, k8s("shop", "orders", "gantry", time.Hour)), "orders", KindKubernetes},
		{"kubernetes ES256", cluster.Sign(t, workloadtest.KidEC, k8s("shop", "orders", "gantry", time.Hour)), "orders", KindKubernetes},
		{"kubernetes glob", cluster.Sign(t, workloadtest.KidRSA, k8s("billing-eu", "billing", "gantry", time.Hour)), "billing", KindKubernetes},
		{"github", ci.Sign(t, workloadtest.KidEC, ci.GitHubClaims("acme/deploy", "refs/heads/main", "https://gantry.example.com", now, 5*time.Minute)), "deployer", KindJWT},
	} {
		id, err := v.Verify(ctx, c.token)
		if err != nil || id.Service != c.service || id.Kind != c.kind {
			t.Errorf("%s: %+v, %v", c.name, id, err)
		}
	}

	forged := k8s("shop", "orders", "gantry", time.Hour)
	forged["sub"] = "system:serviceaccount:shop:admin"
	noExp := k8s("shop", "orders", "gantry", time.Hour)
	delete(noExp, "exp")
	good := cluster.Sign(t, workloadtest.KidRSA, k8s("shop", "orders", "gantry", time.Hour))
	parts := strings.Split(good, ".")
	// A signed token whose claims name "sub" twice: one parser reads orders, another admin.
	orders, _ := json.Marshal(k8s("shop", "orders", "gantry", time.Hour))
	twice := append(orders[:len(orders)-1:len(orders)-1], []byte(`,"sub":"system:serviceaccount:shop:admin"}`)...)
	other := workloadtest.New(t)
	for _, c := range []struct{ name, token, want string }{
		{"expired", cluster.Sign(t, workloadtest.KidRSA, cluster.KubernetesClaims("shop", "orders", "gantry", now.Add(-2*time.Hour), time.Hour)), "expired at"},
		{"wrong audience", cluster.Sign(t, workloadtest.KidRSA, k8s("shop", "orders", "vault", time.Hour)), "audience"},
		{"wrong issuer", other.Sign(t, workloadtest.KidRSA, other.KubernetesClaims("shop", "orders", "gantry", now, time.Hour)), "is not trusted"},
		{"unmapped namespace", cluster.Sign(t, workloadtest.KidRSA, k8s("dev", "orders", "gantry", time.Hour)), "no mapping"},
		{"subject not the claim", cluster.Sign(t, workloadtest.KidRSA, forged), "does not match its kubernetes.io claim"},
		{"no exp", cluster.Sign(t, workloadtest.KidRSA, noExp), "no exp"},
		{"too long", cluster.Sign(t, workloadtest.KidRSA, k8s("shop", "orders", "gantry", 72*time.Hour)), "longer than"},
		{"signed by another key", other.Sign(t, workloadtest.KidRSA, k8s("shop", "orders", "gantry", time.Hour)), "does not verify"},
		{"payload swapped", parts[0] + "." + strings.Split(cluster.Sign(t, workloadtest.KidRSA, k8s("shop", "admin", "gantry", time.Hour)), ".")[1] + "." + parts[2], "does not verify"},
		{"alg none", "eyJhbGciOiJub25lIn0." + parts[1] + ".", "is not RS256 or ES256"},
		{"wrong repository", ci.Sign(t, workloadtest.KidRSA, ci.GitHubClaims("evil/deploy", "refs/heads/main", "https://gantry.example.com", now, time.Minute)), "no mapping"},
		{"wrong ref", ci.Sign(t, workloadtest.KidRSA, ci.GitHubClaims("acme/deploy", "refs/heads/dev", "https://gantry.example.com", now, time.Minute)), "no mapping"},
		{"not a jwt", "abc", "not a JWT"},
		{"a claim named twice", cluster.SignPayload(t, workloadtest.KidRSA, twice), `"sub" named twice`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := v.Verify(ctx, c.token)
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a refusal saying %q", err, c.want)
			}
		})
	}
}

// TestJWTConfigChecks: a configuration that would accept too much stops startup.
func TestJWTConfigChecks(t *testing.T) {
	for name, cfg := range map[string]JWTConfig{
		"no audience":      {Issuers: []IssuerConfig{{Name: "a", Kind: KindJWT, Issuer: "https://x"}}},
		"bad kind":         {Issuers: []IssuerConfig{{Name: "a", Kind: "saml", Issuer: "https://x", Audiences: []string{"g"}}}},
		"unknown issuer":   {Mappings: []Mapping{{Issuer: "nope", Claims: map[string]string{"sub": "x"}, Service: "s"}}},
		"matches anything": {Issuers: []IssuerConfig{{Name: "a", Kind: KindJWT, Issuer: "https://x", Audiences: []string{"g"}}}, Mappings: []Mapping{{Issuer: "a", Service: "s"}}},
		"bad service":      {Issuers: []IssuerConfig{{Name: "a", Kind: KindJWT, Issuer: "https://x", Audiences: []string{"g"}}}, Mappings: []Mapping{{Issuer: "a", Claims: map[string]string{"sub": "x"}, Service: "a/b"}}},
	} {
		if _, err := NewJWTVerifier(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
