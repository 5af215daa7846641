package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/jwtkeys"
)

func TestJWKSAndJWT(t *testing.T) {
	s := startStack(t, nil)
	pub := s.get("/v1/jwks/public/development").must(t, 200)
	for _, k := range []string{"kty", "kid", "n", "e", "alg"} {
		if v, _ := pub[k].(string); v == "" {
			t.Errorf("active key lacks %s: %v", k, pub)
		}
	}
	var keys []jwtkeys.JWK
	raw, _ := json.Marshal(pub["keys"])
	if err := json.Unmarshal(raw, &keys); err != nil || len(keys) != 1 || keys[0].Kid != pub["kid"] {
		t.Fatalf("key set %s (%v)", raw, err)
	}
	if r := s.get("/v1/jwks/public/nowhere").must(t, 404); r["error"] != "Public key not found for this environment" {
		t.Errorf("unknown environment: %v", r)
	}

	verify := func(token string) map[string]any {
		t.Helper()
		claims, err := jwtkeys.Verify(token, keys, time.Now())
		if err != nil {
			t.Fatalf("token does not verify against the published keys: %v", err)
		}
		return claims
	}
	own := verify(s.get("/v1/jwks/token?environment=development").must(t, 200)["token"].(string))
	if own["user"] != "alice" || own["requester"] != "alice" || own["is_service"] != true {
		t.Errorf("own token claims %v", own)
	}
	delegated := verify(s.get("/v1/jwks/token/bob?environment=development").must(t, 200)["token"].(string))
	if delegated["user"] != "bob" || delegated["requester"] != "alice" {
		t.Errorf("delegated token claims %v", delegated)
	}
	short := verify(s.get("/v1/jwks/token/alice/60?environment=development").must(t, 200)["token"].(string))
	iat, _ := short["iat"].(json.Number).Int64()
	exp, _ := short["exp"].(json.Number).Int64()
	if exp-iat != 60 {
		t.Errorf("expiry segment: exp-iat = %d, want 60", exp-iat)
	}

	if r := s.get("/v1/jwks/token").must(t, 400); r["error"] != "Please specify an environment" {
		t.Errorf("no environment: %v", r)
	}
	if r := s.get("/v1/jwks/token?environment=nowhere").must(t, 400); r["error"] != "Key not available for this environment" {
		t.Errorf("unknown environment: %v", r)
	}
	s.call("PUT", "/v1/services/api", map[string]any{}).must(t, 200)
	service := http.Header{"Authorization": {s.basic("api", "service")}}
	if r := s.do("GET", s.rest+"/v1/jwks/token?environment=development", "", service).must(t, 403); r["error"] != "api does not have access to get JWT api" {
		t.Errorf("service under the default rules: %v", r)
	}
	if r := s.do("GET", s.rest+"/v1/jwks/public/development", "", http.Header{"Authorization": {""}}); r.code != 401 {
		t.Errorf("public keys without authentication: %d (the spec requires authentication on every endpoint)", r.code)
	}
}
