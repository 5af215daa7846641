package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/testwait"
	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/boltstore"
)

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Sync() error { return nil }

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// haystack is a named piece of output that must hold no secret.
type haystack struct {
	name string
	data []byte
}

// TestNoSecretLeaks runs a full workload (credentials created, updated, read, reverted, mapped to
// services and read by them; errors provoked; webhooks received; every admin page scraped), with every
// logger at debug level, then scans the logs, every error body, every webhook request, the admin
// output and the raw database file for every secret value, every data key and every token used.
func TestNoSecretLeaks(t *testing.T) {
	var hooks syncBuffer
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(&hooks, "%s %s %v\n%s\n", r.Method, r.URL, r.Header, body)
	}))
	defer receiver.Close()

	var logs syncBuffer
	logger := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), &logs, zap.DebugLevel))
	s := startStackLogged(t, func(c *stack.Config) {
		c.Secrets.WebhookURL = receiver.URL
		c.Log.Level = "debug"
	}, logger)

	// Secret values are unique strings that appear nowhere else.
	secretValues := []string{}
	secret := func(name string) string {
		v := fmt.Sprintf("S3CRET-%s-%d", name, time.Now().UnixNano())
		secretValues = append(secretValues, v)
		return v
	}
	var errorBodies []haystack
	record := func(what string, r response) response {
		if r.code >= 400 {
			errorBodies = append(errorBodies, haystack{what, r.body})
		}
		return r
	}

	db := s.createCredential("db", map[string]any{"password": secret("db1"), "user": secret("user")})
	api := s.createCredential("api", map[string]any{"api_key": secret("api")})
	record("update", s.call("PUT", "/v1/credentials/"+db, map[string]any{"credential_pairs": map[string]any{"password": secret("db2")}})).must(t, 200)
	record("revert", s.call("PUT", "/v1/credentials/"+db+"/1", nil)).must(t, 200)
	record("diff", s.get("/v1/credentials/"+db+"/1/2")).must(t, 200)
	record("read", s.get("/v1/credentials/"+db)).must(t, 200)
	record("history", s.get("/v1/archive/credentials/"+db)).must(t, 200)
	record("list", s.get("/v1/credentials")).must(t, 200)
	record("map", s.call("PUT", "/v1/services/orders", map[string]any{"credentials": []string{db, api}})).must(t, 200)
	record("update mapped", s.call("PUT", "/v1/credentials/"+api, map[string]any{"credential_pairs": map[string]any{"api_key": secret("api2")}})).must(t, 200)
	orders := s.basic("orders", "service")
	record("service read", s.do("GET", s.rest+"/v1/services/orders", "", http.Header{"Authorization": {orders}})).must(t, 200)
	record("value generator", s.get("/v1/value_generator")).must(t, 200)

	// Errors that carry a secret in the request must not echo it.
	record("nested value", s.call("POST", "/v1/credentials", map[string]any{"name": "bad", "documentation": "d",
		"credential_pairs": map[string]any{"k": map[string]any{"inner": secret("nested")}}}))
	record("list value", s.call("POST", "/v1/credentials", map[string]any{"name": "bad2", "documentation": "d",
		"credential_pairs": map[string]any{"k": []any{secret("list")}}}))
	record("nested metadata", s.call("PUT", "/v1/credentials/"+db, map[string]any{"metadata": map[string]any{"k": []any{secret("meta")}}}))
	record("duplicate name", s.call("POST", "/v1/credentials", map[string]any{"name": "db", "documentation": "d",
		"credential_pairs": map[string]any{"password": secret("dup")}}))
	record("malformed body", s.do("PUT", s.rest+"/v1/credentials/"+db, `{"credential_pairs":{"password":"`+secret("malformed")+`"`,
		http.Header{"Content-Type": {"application/json"}}))
	record("wrong type", s.do("PUT", s.rest+"/v1/credentials/"+db, `{"credential_pairs":"`+secret("wrongtype")+`"}`,
		http.Header{"Content-Type": {"application/json"}}))
	conflict := s.createCredential("conflict", map[string]any{"password": secret("conflict")})
	record("key conflict", s.call("PUT", "/v1/services/orders", map[string]any{"credentials": []string{db, conflict}}))
	record("unknown revision", s.get("/v1/credentials/"+db+"/99"))
	// A token of the wrong key, a garbage token, a token of another server: refused without echo.
	badTokens := []string{s.rawBasic("mallory", "user", kms.AliasAuth, time.Now()), basicHeader("2/user/mallory:" + secret("garbage-token"))}
	for i, h := range badTokens {
		record(fmt.Sprintf("bad token %d", i), s.do("GET", s.rest+"/v1/credentials", "", http.Header{"Authorization": {h}}))
	}
	record("service reads another", s.do("GET", s.rest+"/v1/credentials/"+db, "", http.Header{"Authorization": {orders}}))
	record("gRPC-shaped garbage", s.do("POST", s.rest+"/v1/credentials", "\x00\x00\x00\x00\x05"+secret("binary"), http.Header{"Content-Type": {"application/grpc"}}))

	// Every admin page, as an operator scrapes them.
	var admin []haystack
	for _, p := range []string{"/", "/stats", "/stats?format=json", "/stats/prometheus", "/clusters", "/clusters?format=json",
		"/server_info", "/server_info?format=json", "/logging", "/certs", "/ready", "/hot_restart_version"} {
		admin = append(admin, haystack{"admin " + p, s.admin(p).body})
	}
	// Let the webhook queue drain before the stack stops.
	testwait.Until(t, "webhooks delivered", func() bool { return bytes.Count(hooks.Bytes(), []byte("event_type")) >= 2 })
	s.stop()

	tokens := []string{s.asUser, orders}
	tokens = append(tokens, badTokens...)
	for _, h := range append([]string{}, tokens...) {
		if raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(h, "Basic ")); err == nil {
			_, tok, _ := strings.Cut(string(raw), ":")
			tokens = append(tokens, tok)
		}
	}
	needles := map[string][]byte{}
	for _, v := range secretValues {
		needles["secret value "+v] = []byte(v)
		needles["base64 of "+v] = []byte(base64.StdEncoding.EncodeToString([]byte(v)))
	}
	for i, tok := range tokens {
		needles[fmt.Sprintf("token %d", i)] = []byte(tok)
	}
	for i, k := range dataKeys(t, s.cfg.DataDir) {
		needles[fmt.Sprintf("data key %d", i)] = k
		needles[fmt.Sprintf("data key %d (base64)", i)] = []byte(base64.StdEncoding.EncodeToString(k))
		needles[fmt.Sprintf("data key %d (hex)", i)] = []byte(hex.EncodeToString(k))
	}
	for i, m := range keyringMaterial(t, s.cfg.DataDir) {
		needles[fmt.Sprintf("keyring material %d", i)] = []byte(m)
	}
	dbFile, err := os.ReadFile(filepath.Join(s.cfg.DataDir, "secrets.db"))
	if err != nil {
		t.Fatal(err)
	}
	hay := append(append(errorBodies, admin...),
		haystack{"logs", logs.Bytes()}, haystack{"webhooks", hooks.Bytes()}, haystack{"database file", dbFile})
	for _, h := range hay {
		for what, n := range needles {
			if bytes.Contains(h.data, n) {
				t.Errorf("%s contains %s", h.name, what)
			}
		}
	}
	if len(errorBodies) < 10 || len(logs.Bytes()) == 0 || !bytes.Contains(hooks.Bytes(), []byte(db)) {
		t.Fatalf("the workload did not run as planned: %d error bodies, %d bytes of logs, webhooks %q", len(errorBodies), len(logs.Bytes()), hooks.Bytes())
	}
	t.Logf("scanned %d error bodies, %d admin pages, %d KiB of logs, %d KiB of webhooks, %d KiB of database for %d needles",
		len(errorBodies), len(admin), len(logs.Bytes())>>10, len(hooks.Bytes())>>10, len(dbFile)>>10, len(needles))
	checkModes(t, s.cfg.DataDir)
}

// dataKeys opens the stopped stack's database and keyring and unwraps the data key of every
// credential revision, so the scan can look for the keys themselves.
func dataKeys(t *testing.T, dataDir string) [][]byte {
	t.Helper()
	ctx := context.Background()
	st, err := boltstore.Open(filepath.Join(dataDir, "secrets.db"), boltdb.Options{Timeout: time.Second}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ring, err := kms.OpenKeyring(filepath.Join(dataDir, "keyring.json"), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	recs, _, err := st.ListAllCredentialRevisions(ctx, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	var keys [][]byte
	for _, r := range recs {
		k, _, err := ring.Decrypt(ctx, r.WrappedKey, map[string]string{"id": r.ID})
		if err != nil {
			t.Fatalf("unwrap the data key of %s-%d: %v", r.ID, r.Revision, err)
		}
		keys = append(keys, k)
	}
	if len(keys) < 4 {
		t.Fatalf("only %d data keys found", len(keys))
	}
	return keys
}

// keyringMaterial returns the key material of every key version in the local keyring.
func keyringMaterial(t *testing.T, dataDir string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dataDir, "keyring.json"))
	if err != nil {
		t.Fatal(err)
	}
	var kr struct {
		Keys map[string]struct {
			Versions []struct {
				Material string `json:"material"`
			} `json:"versions"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(data, &kr); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range kr.Keys {
		for _, v := range k.Versions {
			out = append(out, v.Material)
		}
	}
	if len(out) == 0 {
		t.Fatal("no keyring material found")
	}
	return out
}

// checkModes checks that the data folder is private to its owner: 0700 folders and 0600 files
// (database, keyring, session key, grants, JWT keys).
func checkModes(t *testing.T, dataDir string) {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.Walk(dataDir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dataDir, path)
		seen[rel] = true
		want := os.FileMode(0o600)
		if info.IsDir() {
			want = 0o700
		} else if publicCertificates(t, path) {
			// Certificates only (a CA's public certificate and chain): readable by others, never
			// writable; anything holding a key stays 0600.
			if info.Mode().Perm()&0o133 != 0 {
				t.Errorf("%s (certificates only) has mode %v, want at most 0644", rel, info.Mode().Perm())
			}
			return nil
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", rel, info.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{".", "secrets.db", "keyring.json", "session.key", "jwt"} {
		if !seen[f] {
			t.Errorf("%s missing from the data folder (have %v)", f, seen)
		}
	}
}

// publicCertificates reports whether a file holds PEM certificates and nothing else.
func publicCertificates(t *testing.T, path string) bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return found && len(bytes.TrimSpace(data)) == 0
		}
		if block.Type != "CERTIFICATE" {
			return false
		}
		found = true
	}
}
