package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/services/secrets"
)

// TestStoreLimitsThroughTheGateway: with the default limits, a credential with too many pairs, too
// long a key or value or too much metadata, and a service mapping too many credentials, get a 400
// JSON error naming the limit and its setting, and nothing is stored.
func TestStoreLimitsThroughTheGateway(t *testing.T) {
	s := startStack(t, nil)
	manyPairs := map[string]any{}
	for i := range 1001 {
		manyPairs[fmt.Sprintf("key_%d", i)] = "v"
	}
	bigMetadata := map[string]any{"notes": strings.Repeat("m", 64<<10)}
	for _, tc := range []struct {
		name  string
		body  map[string]any
		limit string
	}{
		{"1001 pairs", map[string]any{"name": "many", "documentation": "d", "credential_pairs": manyPairs}, "GANTRY_MAX_CREDENTIAL_PAIRS"},
		{"a 1025-byte key", map[string]any{"name": "longkey", "documentation": "d", "credential_pairs": map[string]any{strings.Repeat("k", 1025): "v"}}, "GANTRY_MAX_CREDENTIAL_KEY_BYTES"},
		{"a 256 KiB + 1 value", map[string]any{"name": "longvalue", "documentation": "d", "credential_pairs": map[string]any{"blob": strings.Repeat("s", 256<<10+1)}}, "GANTRY_MAX_CREDENTIAL_VALUE_BYTES"},
		{"metadata over 64 KiB", map[string]any{"name": "bigmeta", "documentation": "d", "credential_pairs": map[string]any{"k": "v"}, "metadata": bigMetadata}, "GANTRY_MAX_CREDENTIAL_METADATA_BYTES"},
	} {
		msg := jsonError(t, tc.name, s.call("POST", "/v1/credentials", tc.body), http.StatusBadRequest)
		if !strings.Contains(msg, tc.limit) || strings.Contains(msg, "ssssssss") {
			t.Errorf("%s: error %.200q, want it to name %s and never quote the value", tc.name, msg, tc.limit)
		}
	}
	if creds := asList(t, s.get("/v1/credentials").must(t, 200)["credentials"]); len(creds) != 0 {
		t.Fatalf("refused creates stored %d credentials", len(creds))
	}

	// Updates are held to the same limits, and write no revision.
	id := s.createCredential("db", map[string]any{"password": "x"})
	msg := jsonError(t, "update with a long value", s.call("PUT", "/v1/credentials/"+id,
		map[string]any{"credential_pairs": map[string]any{"password": strings.Repeat("s", 256<<10+1)}}), http.StatusBadRequest)
	if !strings.Contains(msg, "-max-credential-value-bytes") {
		t.Errorf("update with a long value: %q", msg)
	}
	jsonError(t, "update with big metadata", s.call("PUT", "/v1/credentials/"+id, map[string]any{"metadata": bigMetadata}), http.StatusBadRequest)
	if cur := s.get("/v1/credentials/"+id).must(t, 200); cur["revision"] != float64(1) || cur["credential_pairs"].(map[string]any)["password"] != "x" {
		t.Errorf("refused updates changed the credential: revision %v", cur["revision"])
	}

	// 1001 mapped credentials (credentials and blind credentials together) are refused by number,
	// before any id is looked up.
	ids := []string{id}
	for i := range 1000 {
		ids = append(ids, fmt.Sprintf("%032x", i))
	}
	for _, body := range []map[string]any{
		{"credentials": ids},
		{"credentials": ids[:1], "blind_credentials": ids[1:]},
	} {
		msg := jsonError(t, "service mapping 1001 credentials", s.call("PUT", "/v1/services/api", body), http.StatusBadRequest)
		if !strings.Contains(msg, "-max-service-credentials or GANTRY_MAX_SERVICE_CREDENTIALS") {
			t.Errorf("service mapping 1001 credentials: %q", msg)
		}
	}
	if r := s.get("/v1/services/api"); r.code != http.StatusNotFound {
		t.Errorf("refused service was stored: %d %s", r.code, r.body)
	}
	// At the limit is allowed.
	s.call("PUT", "/v1/services/api", map[string]any{"credentials": []string{id}}).must(t, 200)
}

// TestWriteRateLimitThroughTheGateway: one principal's burst of writes ends in 429 with Retry-After
// and a JSON error, while another principal still writes, reads still work, the allowance refills,
// and the gateway never ejects the secrets host for the 429s.
func TestWriteRateLimitThroughTheGateway(t *testing.T) {
	const burst = 5
	s := startStack(t, func(c *stack.Config) {
		c.Secrets.Limits.WriteRate = 1
		c.Secrets.Limits.WriteBurst = burst
		// Ejection would show after 3 host failures in a row; 429s must never count as one.
		c.Gateway.Outlier.ConsecutiveFailures = 3
	})
	create := func(auth, name string) response {
		body := fmt.Sprintf(`{"name": %q, "documentation": "d", "credential_pairs": {"k": "v"}}`, name)
		return s.do("POST", s.rest+"/v1/credentials", body, http.Header{"Content-Type": {"application/json"}, "Authorization": {auth}})
	}
	alice, bob := s.asUser, s.basic("bob@example.com", "user")
	var first string
	for i := range burst {
		c := create(alice, fmt.Sprintf("alice-%d", i)).must(t, 200)
		if first == "" {
			first = c["id"].(string)
		}
	}
	var limited response
	for i := range 20 { // well past the outlier threshold
		limited = create(alice, fmt.Sprintf("alice-over-%d", i))
		msg := jsonError(t, "write past the burst", limited, http.StatusTooManyRequests)
		if !strings.Contains(msg, "GANTRY_WRITE_RATE") {
			t.Fatalf("429 error %q does not name the setting", msg)
		}
		if ra, err := strconv.Atoi(limited.header.Get("Retry-After")); err != nil || ra < 1 {
			t.Fatalf("Retry-After %q, want whole seconds, at least 1", limited.header.Get("Retry-After"))
		}
	}
	// Other writes of alice's count too (update, service mapping): they share her allowance.
	jsonError(t, "update past the burst", s.call("PUT", "/v1/credentials/"+first, map[string]any{"enabled": false}), http.StatusTooManyRequests)
	jsonError(t, "service write past the burst", s.call("PUT", "/v1/services/api", map[string]any{"credentials": []string{first}}), http.StatusTooManyRequests)

	// Nothing past the burst was stored, bob still writes and alice still reads.
	if n := len(asList(t, s.get("/v1/credentials").must(t, 200)["credentials"])); n != burst {
		t.Errorf("%d credentials stored, want the %d of the burst", n, burst)
	}
	create(bob, "bob-0").must(t, 200)
	for range 3 * burst {
		s.get("/v1/credentials/"+first).must(t, 200)
	}

	// The gateway saw 429s, not host failures: the secrets host is neither ejected nor marked.
	if r := s.admin("/stats?filter=^cluster\\.secrets\\.outlier_detection\\.ejections_total$"); !strings.Contains(string(r.body), "ejections_total: 0") {
		t.Errorf("outlier ejections after 429s: %s", r.body)
	}
	if r := s.admin("/clusters"); strings.Contains(string(r.body), "failed_outlier_check") {
		t.Errorf("secrets host ejected after 429s:\n%s", r.body)
	}
	if r := s.admin("/stats?filter=^cluster\\.secrets\\.upstream_rq_429$"); !strings.Contains(string(r.body), "upstream_rq_429: 22") {
		t.Errorf("429s counted: %s", r.body)
	}

	// After Retry-After, alice may write again.
	wait, _ := strconv.Atoi(limited.header.Get("Retry-After"))
	time.Sleep(time.Duration(wait) * time.Second)
	create(alice, "alice-later").must(t, 200)
}

// TestCLIWaitsOutWriteLimit: the CLI meets the per-principal write limit as a script over it would.
// With --retry-max-wait 0 it fails at once with the 429 and the setting to raise; by default it says
// once on stderr that it waits, waits the Retry-After, sends the same write again and succeeds, and
// the refused attempt stored nothing (one credential per create, no duplicate).
func TestCLIWaitsOutWriteLimit(t *testing.T) {
	// One write per 8 s, no burst beyond it: after one write, the next ones are refused for up to 8 s,
	// far longer than the two CLI runs below take to start even on a loaded machine (the binary is
	// built first).
	gantryBinary(t)
	s := startStack(t, func(c *stack.Config) {
		c.Secrets.Limits.WriteRate = 0.125
		c.Secrets.Limits.WriteBurst = 1
	})
	s.createCredential("first", map[string]any{"k": "v"}) // alice's allowance, used up

	refused := s.cli(t, `{"k":"v"}`, "creds", "create", "--name", "no-wait", "--doc", "d", "--pairs-stdin", "--retry-max-wait", "0").must(t, 1)
	if !strings.Contains(refused.stderr, "HTTP 429") || !strings.Contains(refused.stderr, "GANTRY_WRITE_RATE") || strings.Contains(refused.stderr, "waiting") {
		t.Fatalf("--retry-max-wait 0: stderr %q, want the 429 naming GANTRY_WRITE_RATE and no wait", refused.stderr)
	}

	start := time.Now()
	var created map[string]any
	waited := s.cli(t, `{"k":"v"}`, "creds", "create", "--name", "after-wait", "--doc", "d", "--pairs-stdin").must(t, 0)
	waited.json(t, &created)
	if created["name"] != "after-wait" {
		t.Fatalf("create printed %v", created)
	}
	if n := strings.Count(waited.stderr, "waiting"); n != 1 || !strings.Contains(waited.stderr, "429") {
		t.Errorf("stderr %q, want one notice of the wait for a 429", waited.stderr)
	}
	if elapsed := time.Since(start); elapsed < time.Second {
		t.Errorf("the create returned after %v: it cannot have waited the Retry-After (at least 1 s)", elapsed)
	}
	names := map[string]int{}
	for _, c := range asList(t, s.get("/v1/credentials").must(t, 200)["credentials"]) {
		name, _ := c.(map[string]any)["name"].(string)
		names[name]++
	}
	if len(names) != 2 || names["first"] != 1 || names["after-wait"] != 1 {
		t.Errorf("stored credentials %v, want first and after-wait once each (nothing of the refused writes)", names)
	}
}

// TestWriteRatePerPrincipal: -write-rate-principals gives automation its own allowance through the
// gateway: an exempt principal writes past the default, one with a larger burst gets exactly that,
// everyone else keeps the default, and the 429 names the setting that would raise it.
func TestWriteRatePerPrincipal(t *testing.T) {
	s := startStack(t, func(c *stack.Config) {
		c.Secrets.Limits.WriteRate = 0.1
		c.Secrets.Limits.WriteBurst = 2
		c.Secrets.Limits.WritePrincipals = map[string]secrets.PrincipalWriteLimit{
			"user:deployer": {Rate: 0},
			"user:bulk":     {Rate: 0.1, Burst: 8},
		}
	})
	admitted := func(who string, n int) (ok int, last response) {
		auth := s.basic(who, "user")
		for i := range n {
			body := fmt.Sprintf(`{"name": "%s-%d", "documentation": "d", "credential_pairs": {"k": "v"}}`, who, i)
			last = s.do("POST", s.rest+"/v1/credentials", body, http.Header{"Content-Type": {"application/json"}, "Authorization": {auth}})
			if last.code == http.StatusOK {
				ok++
			}
		}
		return ok, last
	}
	if ok, last := admitted("deployer", 30); ok != 30 {
		t.Errorf("the exempt principal: %d of 30 writes, last %d %s", ok, last.code, last.body)
	}
	ok, last := admitted("bulk", 12)
	if ok != 8 {
		t.Errorf("the principal with burst 8: %d of 12 writes admitted", ok)
	}
	if msg := jsonError(t, "bulk past its burst", last, http.StatusTooManyRequests); !strings.Contains(msg, "GANTRY_WRITE_RATE_PRINCIPALS") || !strings.Contains(msg, "8 at once") {
		t.Errorf("429 for bulk: %q, want its own allowance and the setting named", msg)
	}
	if ok, _ := admitted("carol@example.com", 5); ok != 2 {
		t.Errorf("a principal with the default: %d of 5 writes, want the burst of 2", ok)
	}
}
