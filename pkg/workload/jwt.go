package workload

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/jwtkeys"
)

// Issuer kinds.
const (
	// KindKubernetes is a cluster's service-account issuer: projected tokens carry the pod's
	// namespace and service account in the kubernetes.io claim, and the subject
	// system:serviceaccount:<namespace>:<name>.
	KindKubernetes = "kubernetes"
	// KindJWT is any OIDC/JWT issuer of workload tokens (GitHub Actions, GitLab CI, a cloud's
	// workload identity): mappings match its claims.
	KindJWT = "jwt"
)

// maxTokenLen bounds the work an untrusted token can cause; real workload tokens are 1-2 KiB.
const maxTokenLen = 16 << 10

// IssuerConfig is one trusted issuer of workload tokens.
type IssuerConfig struct {
	// Name identifies the issuer in mappings, audit lines and messages.
	Name string `yaml:"name"`
	// Kind is KindKubernetes or KindJWT.
	Kind string `yaml:"kind"`
	// Issuer is the exact iss of its tokens.
	Issuer string `yaml:"issuer"`
	// Audiences: a token must be addressed (aud) to one of them. Required: a token minted for
	// another service must not open gantry.
	Audiences []string `yaml:"audiences"`
	// JWKSFile is the issuer's key set, read again when it changes (offline verification: e.g.
	// `kubectl get --raw /openid/v1/jwks`). Else JWKSURL, else the jwks_uri of the issuer's OIDC
	// discovery document (<issuer>/.well-known/openid-configuration), fetched and cached.
	JWKSFile string `yaml:"jwks_file"`
	JWKSURL  string `yaml:"jwks_url"`
	// MaxLifetime, when set, refuses tokens whose exp - iat is longer (a leaked long-lived token).
	MaxLifetime Duration `yaml:"max_lifetime"`
}

// Duration is a time.Duration read from YAML as "10m", "24h".
type Duration time.Duration

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Mapping gives a service principal to the tokens of an issuer whose claims match. For a kubernetes
// issuer Namespace and ServiceAccount match the kubernetes.io claim; Claims match top-level string
// claims (repository, ref, sub, ...) for any issuer. Values are globs (path.Match); every one given
// must match.
type Mapping struct {
	Issuer         string            `yaml:"issuer"`
	Namespace      string            `yaml:"namespace"`
	ServiceAccount string            `yaml:"service_account"`
	Claims         map[string]string `yaml:"claims"`
	// Service is the service principal the token authenticates as.
	Service string `yaml:"service"`
}

// Identity is who a verified token is.
type Identity struct {
	// Service is the mapped service principal.
	Service string
	// Issuer is the issuer's Name, Kind its kind.
	Issuer, Kind string
	// Subject is the token's sub.
	Subject string
}

// JWTVerifier verifies workload tokens of the configured issuers and maps them to services.
type JWTVerifier struct {
	issuers  []*issuer
	mappings []Mapping
	now      func() time.Time
	leeway   time.Duration
}

// JWTConfig configures a JWTVerifier.
type JWTConfig struct {
	Issuers  []IssuerConfig
	Mappings []Mapping
	// HTTP fetches discovery documents and key sets; nil is a client whose fetches FetchTimeout bounds.
	HTTP *http.Client
	// FetchTimeout bounds one fetch of an issuer's keys (discovery document and key set together);
	// 0 is DefaultFetchTimeout. No request whose key is cached waits for a fetch, and one that names
	// a key the cache lacks waits at most this long.
	FetchTimeout time.Duration
	// Now is the clock; nil is time.Now. Leeway is the clock skew allowed on exp, nbf and iat.
	Now    func() time.Time
	Leeway time.Duration
}

// NewJWTVerifier checks cfg and returns its verifier (keys are fetched on first use).
func NewJWTVerifier(cfg JWTConfig) (*JWTVerifier, error) {
	client := cfg.HTTP
	if client == nil {
		client = &http.Client{}
	}
	timeout := cfg.FetchTimeout
	if timeout == 0 {
		timeout = DefaultFetchTimeout
	}
	if timeout < 0 {
		return nil, fmt.Errorf("fetch timeout %v is negative", timeout)
	}
	v := &JWTVerifier{mappings: cfg.Mappings, now: cfg.Now, leeway: cfg.Leeway}
	if v.now == nil {
		v.now = time.Now
	}
	names := map[string]bool{}
	for i, ic := range cfg.Issuers {
		where := fmt.Sprintf("issuer %d (%s)", i+1, ic.Name)
		switch {
		case ic.Name == "" || names[ic.Name]:
			return nil, fmt.Errorf("%s: a unique name is required", where)
		case ic.Kind != KindKubernetes && ic.Kind != KindJWT:
			return nil, fmt.Errorf("%s: kind %q is not %s or %s", where, ic.Kind, KindKubernetes, KindJWT)
		case ic.Issuer == "":
			return nil, fmt.Errorf("%s: issuer (the iss of its tokens) is required", where)
		case len(ic.Audiences) == 0:
			return nil, fmt.Errorf("%s: audiences is required: tokens must be minted for gantry", where)
		}
		names[ic.Name] = true
		v.issuers = append(v.issuers, &issuer{cfg: ic, http: client, now: v.now, timeout: timeout})
	}
	for i, m := range cfg.Mappings {
		where := fmt.Sprintf("mapping %d", i+1)
		if !names[m.Issuer] {
			return nil, fmt.Errorf("%s: issuer %q is not configured", where, m.Issuer)
		}
		if !ServiceName.MatchString(m.Service) {
			return nil, fmt.Errorf("%s: service %q is not a service name", where, m.Service)
		}
		globs := []string{m.Namespace, m.ServiceAccount}
		for _, g := range m.Claims {
			globs = append(globs, g)
		}
		for _, g := range globs {
			if _, err := path.Match(g, ""); err != nil {
				return nil, fmt.Errorf("%s: bad pattern %q", where, g)
			}
		}
		if m.Namespace == "" && m.ServiceAccount == "" && len(m.Claims) == 0 {
			return nil, fmt.Errorf("%s: match at least one of namespace, service_account, claims (every token of an issuer as one service is too broad)", where)
		}
	}
	return v, nil
}

// LooksLikeJWT reports whether a bearer credential has a JWT's shape (three dot-separated parts).
func LooksLikeJWT(s string) bool { return strings.Count(s, ".") == 2 }

// Verify checks token: an issuer configured for its iss, a signature by one of that issuer's keys
// (RS256 or ES256 only), an audience of the issuer's, an exp in the future, nbf and iat not in the
// future, for kubernetes issuers the kubernetes.io claims matching the subject, and a mapping. Every
// refusal wraps ErrRefused and says why; a key set that cannot be fetched is another error.
func (v *JWTVerifier) Verify(ctx context.Context, token string) (Identity, error) {
	if len(token) > maxTokenLen {
		return Identity{}, refused("token is longer than %d bytes", maxTokenLen)
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return Identity{}, refused("token is not a JWT (three dot-separated parts)")
	}
	var header map[string]json.RawMessage
	if err := decodeSegment(parts[0], &header); err != nil {
		return Identity{}, refused("token header: %v", err)
	}
	alg, kid := rawString(header["alg"]), rawString(header["kid"])
	if alg != "RS256" && alg != "ES256" {
		return Identity{}, refused("token algorithm %q is not RS256 or ES256", alg)
	}
	if _, ok := header["crit"]; ok {
		return Identity{}, refused("token header has critical extensions")
	}
	// The issuer is read before the signature is checked, only to pick whose keys to check it with.
	var unverified map[string]json.RawMessage
	if err := decodeSegment(parts[1], &unverified); err != nil {
		return Identity{}, refused("token payload: %v", err)
	}
	iss := rawString(unverified["iss"])
	var is *issuer
	for _, c := range v.issuers {
		if c.cfg.Issuer == iss {
			is = c
			break
		}
	}
	if is == nil {
		return Identity{}, refused("token issuer %q is not trusted", iss)
	}
	key, err := is.key(ctx, kid, alg)
	if err != nil {
		return Identity{}, err
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return Identity{}, refused("token signature is not base64url")
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if !verifySignature(key, alg, digest[:], sig) {
		return Identity{}, refused("token signature does not verify with key %q of issuer %s", kid, is.cfg.Name)
	}
	var claims map[string]any
	if err := decodeSegmentNumbers(parts[1], &claims); err != nil {
		return Identity{}, refused("token payload: %v", err)
	}
	if err := v.checkTimes(claims, is.cfg); err != nil {
		return Identity{}, err
	}
	if !audienceMatches(claims["aud"], is.cfg.Audiences) {
		return Identity{}, refused("token audience %v is not one of %v (issuer %s): mint it for gantry", claims["aud"], is.cfg.Audiences, is.cfg.Name)
	}
	sub, _ := claims["sub"].(string)
	id := Identity{Issuer: is.cfg.Name, Kind: is.cfg.Kind, Subject: sub}
	var ns, sa string
	if is.cfg.Kind == KindKubernetes {
		if ns, sa, err = kubernetesClaims(claims); err != nil {
			return Identity{}, err
		}
	}
	for _, m := range v.mappings {
		if m.Issuer != is.cfg.Name {
			continue
		}
		if is.cfg.Kind == KindKubernetes && (!glob(m.Namespace, ns) || !glob(m.ServiceAccount, sa)) {
			continue
		}
		if is.cfg.Kind != KindKubernetes && (m.Namespace != "" || m.ServiceAccount != "") {
			continue
		}
		if !claimsMatch(m.Claims, claims) {
			continue
		}
		id.Service = m.Service
		return id, nil
	}
	return Identity{}, refused("no mapping of issuer %s gives a service to subject %q", is.cfg.Name, sub)
}

func (v *JWTVerifier) checkTimes(claims map[string]any, ic IssuerConfig) error {
	now := v.now()
	exp, ok, err := numericClaim(claims, "exp")
	if err != nil {
		return err
	}
	if !ok {
		return refused("token has no exp: long-lived tokens (legacy service-account secrets) are not accepted")
	}
	if now.After(exp.Add(v.leeway)) {
		return refused("token expired at %s", exp.UTC().Format(time.RFC3339))
	}
	if nbf, ok, err := numericClaim(claims, "nbf"); err != nil {
		return err
	} else if ok && now.Add(v.leeway).Before(nbf) {
		return refused("token is not valid before %s", nbf.UTC().Format(time.RFC3339))
	}
	iat, hasIat, err := numericClaim(claims, "iat")
	if err != nil {
		return err
	}
	if hasIat && now.Add(v.leeway).Before(iat) {
		return refused("token is issued in the future (%s)", iat.UTC().Format(time.RFC3339))
	}
	if ic.MaxLifetime > 0 {
		if !hasIat {
			return refused("token has no iat, and issuer %s limits token lifetimes", ic.Name)
		}
		if exp.Sub(iat) > time.Duration(ic.MaxLifetime) {
			return refused("token lives %s, longer than the %s issuer %s allows", exp.Sub(iat), time.Duration(ic.MaxLifetime), ic.Name)
		}
	}
	return nil
}

// kubernetesClaims returns the namespace and service account of a projected service-account token,
// checked against its subject.
func kubernetesClaims(claims map[string]any) (ns, sa string, err error) {
	k8s, _ := claims["kubernetes.io"].(map[string]any)
	if k8s == nil {
		return "", "", refused("token has no kubernetes.io claim: not a projected service-account token")
	}
	ns, _ = k8s["namespace"].(string)
	account, _ := k8s["serviceaccount"].(map[string]any)
	if account != nil {
		sa, _ = account["name"].(string)
	}
	if ns == "" || sa == "" {
		return "", "", refused("token's kubernetes.io claim names no namespace and service account")
	}
	if sub, _ := claims["sub"].(string); sub != "system:serviceaccount:"+ns+":"+sa {
		return "", "", refused("token subject %q does not match its kubernetes.io claim", sub)
	}
	return ns, sa, nil
}

func glob(pattern, s string) bool {
	if pattern == "" {
		return true
	}
	ok, _ := path.Match(pattern, s)
	return ok
}

func claimsMatch(want map[string]string, claims map[string]any) bool {
	for k, pattern := range want {
		got, ok := claims[k].(string)
		if !ok || !glob(pattern, got) {
			return false
		}
	}
	return true
}

func audienceMatches(aud any, want []string) bool {
	switch a := aud.(type) {
	case string:
		return slices.Contains(want, a)
	case []any:
		for _, x := range a {
			if s, ok := x.(string); ok && slices.Contains(want, s) {
				return true
			}
		}
	}
	return false
}

func numericClaim(claims map[string]any, name string) (time.Time, bool, error) {
	v, ok := claims[name]
	if !ok {
		return time.Time{}, false, nil
	}
	n, ok := v.(json.Number)
	if !ok {
		return time.Time{}, false, refused("token claim %s is not a number", name)
	}
	f, err := n.Float64()
	if err != nil {
		return time.Time{}, false, refused("token claim %s is not a number", name)
	}
	return time.Unix(int64(f), 0), true, nil
}

func verifySignature(key crypto.PublicKey, alg string, digest, sig []byte) bool {
	switch k := key.(type) {
	case *rsa.PublicKey:
		return alg == "RS256" && rsa.VerifyPKCS1v15(k, crypto.SHA256, digest, sig) == nil
	case *ecdsa.PublicKey:
		// JWS ES256 signatures are r||s, 32 bytes each.
		if alg != "ES256" || len(sig) != 64 || k.Curve != elliptic.P256() {
			return false
		}
		return ecdsa.Verify(k, digest, new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:]))
	}
	return false
}

func decodeSegment(seg string, v any) error {
	data, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return errors.New("not base64url")
	}
	if len(bytes.TrimSpace(data)) == 0 || bytes.TrimSpace(data)[0] != '{' {
		return errors.New("not a JSON object")
	}
	if err := jwtkeys.NoDuplicateNames(data); err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// decodeSegmentNumbers decodes a signed segment strictly (see jwtkeys.DecodeJSONObject).
func decodeSegmentNumbers(seg string, v any) error {
	data, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return errors.New("not base64url")
	}
	return jwtkeys.DecodeJSONObject(data, v)
}

func rawString(raw json.RawMessage) string {
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

// issuer holds one issuer's key set: read from its file when that changes, or fetched and kept for
// keysTTL, fetched again earlier when a token names a key it lacks (a rotation).
//
// A fetch of the key server never runs under mu, and at most one runs per issuer: a token whose key
// is cached is checked with it at once, whatever the key server does (a stale set is refreshed in
// the background); a token naming a key the set lacks starts a fetch when the throttle allows one, or
// waits for the fetch in flight, and is refused at once otherwise. Fetches start at most every
// refetchEvery after a successful one, and a failed one waits longer, doubling with each failure in
// a row up to maxBackoff; so a flood of tokens with invented key ids costs the key server one request
// per window whether it answers or not. A key file is read again whenever it changes.
type issuer struct {
	cfg     IssuerConfig
	http    *http.Client
	now     func() time.Time
	timeout time.Duration // of one fetch

	mu       sync.Mutex // guards what follows; never held across a fetch or a file read
	keys     map[string]crypto.PublicKey
	fetched  time.Time // when keys were fetched
	modTime  time.Time // of the key file when it was last read
	next     time.Time // no fetch of the key server starts before this
	failures int       // fetches failed in a row
	lastErr  error     // why the last fetch failed; nil after a success
	inflight *keyFetch // the fetch running, nil when none
}

// keyFetch is one fetch (or file read) of an issuer's keys; done is closed when it has ended and
// the issuer holds its result.
type keyFetch struct {
	done chan struct{}
}

const (
	// DefaultFetchTimeout bounds one fetch of an issuer's keys when JWTConfig.FetchTimeout is 0.
	DefaultFetchTimeout = 10 * time.Second

	keysTTL      = 10 * time.Minute
	refetchEvery = 30 * time.Second
	maxBackoff   = 5 * time.Minute
	maxJWKSBytes = 1 << 20
)

// backoff is how long after the failures-th failed fetch in a row the next may start: refetchEvery,
// doubled for each failure after the first, at most maxBackoff.
func backoff(failures int) time.Duration {
	d := refetchEvery
	for i := 1; i < failures && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

func (is *issuer) key(ctx context.Context, kid, alg string) (crypto.PublicKey, error) {
	var modTime time.Time
	if is.cfg.JWKSFile != "" {
		info, err := os.Stat(is.cfg.JWKSFile)
		if err != nil {
			return nil, fmt.Errorf("workload: issuer %s: %w", is.cfg.Name, err)
		}
		modTime = info.ModTime()
	}
	is.mu.Lock()
	k, ok := is.lookup(kid)
	var wait *keyFetch
	if is.cfg.JWKSFile != "" {
		// A changed file is read before the token is checked: a key removed from it is refused
		// from the next request on.
		if is.inflight == nil && (is.keys == nil || !modTime.Equal(is.modTime)) {
			is.modTime = modTime
			is.start()
		}
		wait = is.inflight
	} else {
		now := is.now()
		stale := is.keys == nil || now.Sub(is.fetched) > keysTTL
		if (stale || !ok) && is.inflight == nil && !now.Before(is.next) {
			is.start()
		}
		if !ok {
			wait = is.inflight // nil: throttled, refused below without waiting
		}
	}
	is.mu.Unlock()
	if wait != nil {
		select {
		case <-wait.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		is.mu.Lock()
		k, ok = is.lookup(kid)
		is.mu.Unlock()
	}
	if !ok {
		is.mu.Lock()
		none, lastErr := is.keys == nil, is.lastErr
		is.mu.Unlock()
		if none {
			if lastErr == nil {
				lastErr = errors.New("no keys yet")
			}
			return nil, fmt.Errorf("workload: issuer %s: %w", is.cfg.Name, lastErr)
		}
		return nil, refused("token key %q is not one of issuer %s's keys", kid, is.cfg.Name)
	}
	switch k.(type) {
	case *rsa.PublicKey:
		if alg != "RS256" {
			return nil, refused("token algorithm %s does not fit key %q (RSA)", alg, kid)
		}
	case *ecdsa.PublicKey:
		if alg != "ES256" {
			return nil, refused("token algorithm %s does not fit key %q (EC)", alg, kid)
		}
	}
	return k, nil
}

// lookup returns the key kid of the set (the only key for a token without kid); called with mu held.
func (is *issuer) lookup(kid string) (crypto.PublicKey, bool) {
	k, ok := is.keys[kid]
	if !ok && kid == "" && len(is.keys) == 1 {
		for _, only := range is.keys {
			k, ok = only, true
		}
	}
	return k, ok
}

// start starts a fetch of the keys, called with mu held and no fetch in flight. The fetch belongs to
// no request: a request that gives up does not cancel it for the others; timeout bounds it.
func (is *issuer) start() {
	f := &keyFetch{done: make(chan struct{})}
	is.inflight = f
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), is.timeout)
		keys, err := is.load(ctx)
		cancel()
		is.mu.Lock()
		now := is.now()
		if err == nil {
			is.keys, is.fetched, is.failures, is.lastErr = keys, now, 0, nil
			is.next = now.Add(refetchEvery)
		} else {
			// Keep verifying with the keys we have while the issuer cannot be reached.
			is.failures++
			is.lastErr = err
			is.next = now.Add(backoff(is.failures))
		}
		is.inflight = nil
		is.mu.Unlock()
		close(f.done)
	}()
}

func (is *issuer) load(ctx context.Context) (map[string]crypto.PublicKey, error) {
	var data []byte
	var err error
	switch {
	case is.cfg.JWKSFile != "":
		data, err = os.ReadFile(is.cfg.JWKSFile)
	case is.cfg.JWKSURL != "":
		data, err = is.get(ctx, is.cfg.JWKSURL)
	default:
		var doc []byte
		if doc, err = is.get(ctx, strings.TrimSuffix(is.cfg.Issuer, "/")+"/.well-known/openid-configuration"); err != nil {
			return nil, err
		}
		var disc struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		if err := json.Unmarshal(doc, &disc); err != nil || disc.JWKSURI == "" {
			return nil, errors.New("discovery document has no jwks_uri")
		}
		if disc.Issuer != is.cfg.Issuer {
			return nil, fmt.Errorf("discovery document names issuer %q, not %q", disc.Issuer, is.cfg.Issuer)
		}
		data, err = is.get(ctx, disc.JWKSURI)
	}
	if err != nil {
		return nil, err
	}
	return ParseJWKS(data)
}

func (is *issuer) get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := is.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes))
}

// ParseJWKS reads a JSON Web Key Set's RSA (2048 bits or more) and P-256 EC signing keys by kid;
// other keys are skipped.
func ParseJWKS(data []byte) (map[string]crypto.PublicKey, error) {
	var set struct {
		Keys []struct {
			Kty, Kid, Use, Alg, N, E, Crv, X, Y string
		} `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("key set: %v", err)
	}
	out := map[string]crypto.PublicKey{}
	b := base64.RawURLEncoding
	for _, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		switch k.Kty {
		case "RSA":
			n, err1 := b.DecodeString(k.N)
			e, err2 := b.DecodeString(k.E)
			if err1 != nil || err2 != nil {
				continue
			}
			pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n)}
			exp := new(big.Int).SetBytes(e)
			if pub.N.BitLen() < 2048 || exp.BitLen() > 31 || exp.Int64() < 3 {
				continue
			}
			pub.E = int(exp.Int64())
			out[k.Kid] = pub
		case "EC":
			if k.Crv != "P-256" {
				continue
			}
			x, err1 := b.DecodeString(k.X)
			y, err2 := b.DecodeString(k.Y)
			if err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
				continue
			}
			// The uncompressed point 04||x||y; a point not on the curve does not parse.
			pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
			if err != nil {
				continue
			}
			out[k.Kid] = pub
		}
	}
	if len(out) == 0 {
		return nil, errors.New("key set holds no RSA or P-256 signing key")
	}
	return out, nil
}
