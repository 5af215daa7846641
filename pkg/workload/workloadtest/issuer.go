// Package workloadtest is an in-test OIDC issuer of workload tokens: it serves a discovery document
// and a JSON Web Key Set over HTTP, as a Kubernetes API server's service-account issuer or GitHub
// Actions' token service does, and signs real RS256 and ES256 tokens with its keys.
package workloadtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Issuer is a running issuer; URL is its iss.
type Issuer struct {
	URL string
	rsa *rsa.PrivateKey
	ec  *ecdsa.PrivateKey
	srv *httptest.Server

	mu                        sync.Mutex
	fault                     Fault
	requests, held, abandoned atomic.Int64
}

// Fault makes the issuer's key server (its discovery document and key set) misbehave, until the test
// sets another; the zero Fault serves normally.
type Fault struct {
	// Status answers this HTTP status instead of the document.
	Status int
	// Hold holds each answer until the channel is closed or the client gives up, so a test decides
	// when a fetch in flight ends instead of guessing with a delay.
	Hold <-chan struct{}
}

// Key ids of the issuer's keys.
const (
	KidRSA = "rsa-1"
	KidEC  = "ec-1"
)

// New starts an issuer on a loopback port, stopped when t ends.
func New(t testing.TB) *Issuer {
	t.Helper()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	is := &Issuer{rsa: rk, ec: ek}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", is.faulty(func(w http.ResponseWriter) {
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": is.URL, "jwks_uri": is.URL + "/openid/v1/jwks",
			"id_token_signing_alg_values_supported": []string{"RS256", "ES256"}})
	}))
	mux.HandleFunc("GET /openid/v1/jwks", is.faulty(func(w http.ResponseWriter) { _, _ = w.Write(is.JWKS()) }))
	is.srv = httptest.NewServer(mux)
	is.URL = is.srv.URL
	t.Cleanup(is.srv.Close)
	return is
}

// SetFault makes the key server answer with f from the next request on.
func (is *Issuer) SetFault(f Fault) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.fault = f
}

// Requests is how many requests the key server has received (discovery documents and key sets).
func (is *Issuer) Requests() int64 { return is.requests.Load() }

// Held is how many requests a Hold fault holds right now.
func (is *Issuer) Held() int64 { return is.held.Load() }

// Abandoned is how many held requests ended because their client gave up.
func (is *Issuer) Abandoned() int64 { return is.abandoned.Load() }

func (is *Issuer) faulty(serve func(http.ResponseWriter)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		is.requests.Add(1)
		is.mu.Lock()
		f := is.fault
		is.mu.Unlock()
		if f.Hold != nil {
			is.held.Add(1)
			select {
			case <-f.Hold:
				is.held.Add(-1)
			case <-r.Context().Done():
				is.held.Add(-1)
				is.abandoned.Add(1)
				return
			}
		}
		if f.Status != 0 {
			http.Error(w, http.StatusText(f.Status), f.Status)
			return
		}
		serve(w)
	}
}

// JWKS is the issuer's public key set, as it serves it.
func (is *Issuer) JWKS() []byte {
	b := base64.RawURLEncoding
	point, err := is.ec.PublicKey.Bytes() // 04||x||y
	if err != nil {
		panic(err)
	}
	data, _ := json.Marshal(map[string]any{"keys": []map[string]string{
		{"kty": "RSA", "kid": KidRSA, "use": "sig", "alg": "RS256", "n": b.EncodeToString(is.rsa.N.Bytes()), "e": b.EncodeToString(big.NewInt(int64(is.rsa.E)).Bytes())},
		{"kty": "EC", "kid": KidEC, "use": "sig", "alg": "ES256", "crv": "P-256", "x": b.EncodeToString(point[1:33]), "y": b.EncodeToString(point[33:])},
	}})
	return data
}

// Sign returns a JWT of claims signed with the key kid (KidRSA: RS256, KidEC: ES256).
func (is *Issuer) Sign(t testing.TB, kid string, claims map[string]any) string {
	t.Helper()
	p, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	return is.SignPayload(t, kid, p)
}

// SignPayload is Sign of claims given as JSON bytes, as they are (a test can make them malformed in
// ways a map cannot, such as a member named twice).
func (is *Issuer) SignPayload(t testing.TB, kid string, p []byte) string {
	t.Helper()
	alg := "RS256"
	if kid == KidEC {
		alg = "ES256"
	}
	b := base64.RawURLEncoding
	h, _ := json.Marshal(map[string]string{"alg": alg, "kid": kid, "typ": "JWT"})
	var err error
	input := b.EncodeToString(h) + "." + b.EncodeToString(p)
	digest := sha256.Sum256([]byte(input))
	var sig []byte
	if kid == KidEC {
		r, s, err := ecdsa.Sign(rand.Reader, is.ec, digest[:])
		if err != nil {
			t.Fatal(err)
		}
		sig = append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...)
	} else {
		if sig, err = rsa.SignPKCS1v15(rand.Reader, is.rsa, crypto.SHA256, digest[:]); err != nil {
			t.Fatal(err)
		}
	}
	return input + "." + b.EncodeToString(sig)
}

// KubernetesClaims are the claims of a projected service-account token of namespace/account for
// audience, issued at now and valid for ttl, as the API server mints them.
func (is *Issuer) KubernetesClaims(namespace, account, audience string, now time.Time, ttl time.Duration) map[string]any {
	return map[string]any{
		"iss": is.URL, "aud": []string{audience}, "sub": "system:serviceaccount:" + namespace + ":" + account,
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(ttl).Unix(),
		"kubernetes.io": map[string]any{
			"namespace":      namespace,
			"serviceaccount": map[string]any{"name": account, "uid": "5f0e0c2e-1f5e-4b7a-9a59-000000000001"},
			"pod":            map[string]any{"name": account + "-7d9f8", "uid": "5f0e0c2e-1f5e-4b7a-9a59-000000000002"},
		},
	}
}

// GitHubClaims are the claims of a GitHub Actions OIDC token of repository at ref for audience.
func (is *Issuer) GitHubClaims(repository, ref, audience string, now time.Time, ttl time.Duration) map[string]any {
	return map[string]any{
		"iss": is.URL, "aud": audience, "sub": "repo:" + repository + ":ref:" + ref,
		"repository": repository, "ref": ref, "repository_owner": "acme", "workflow": "deploy", "event_name": "push",
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(ttl).Unix(),
	}
}
