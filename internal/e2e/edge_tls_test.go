package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/internaltls"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
)

// edgePKI issues a REST-listener certificate for 127.0.0.1 from a private CA of its own (not the
// internal one): the files of -tls-cert-file, -tls-key-file and the client's -ca-file.
func edgePKI(t *testing.T) (certFile, keyFile, caFile string) {
	t.Helper()
	root := t.TempDir()
	leaf := internaltls.LeafSpec{Name: "gantry-edge.test", Server: true, Dir: filepath.Join(root, "edge")}
	if err := internaltls.Init(filepath.Join(root, "ca"), []internaltls.LeafSpec{leaf}, nil); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(leaf.Dir, internaltls.LeafCertFile), filepath.Join(leaf.Dir, internaltls.LeafKeyFile), filepath.Join(leaf.Dir, internaltls.LeafCAFile)
}

// httpsClient trusts caFile and never follows redirects.
func httpsClient(t testing.TB, caFile string) *http.Client {
	t.Helper()
	data, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(data)
	return &http.Client{
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// loggedLines is every message and string field the stack logged, one line each.
func loggedLines(logs *observer.ObservedLogs) []string {
	var out []string
	for _, e := range logs.All() {
		line := e.Message
		for k, v := range e.ContextMap() {
			line += fmt.Sprintf(" %s=%v", k, v)
		}
		out = append(out, line)
	}
	return out
}

// TestTourOverHTTPSWithAPrivateCA runs the README's tour (create a credential, list, map a service,
// env) with the real gantry binary against a REST listener that serves TLS with a certificate of a
// private CA: refused with a hint naming -ca-file without the CA, done with GANTRY_CA_FILE or
// -ca-file. Every URL of the REST listener in the startup lines is https://, the `gantry login`
// command they print makes an https link, and the session cookie it opens is Secure with
// SECURE_COOKIES left off.
func TestTourOverHTTPSWithAPrivateCA(t *testing.T) {
	certFile, keyFile, caFile := edgePKI(t)
	core, logs := observer.New(zapcore.InfoLevel)
	logger := zap.New(zapcore.NewTee(core, logtest.New(t).Core()))
	s := startStackLogged(t, func(c *stack.Config) {
		c.Gateway.TLSCertFile, c.Gateway.TLSKeyFile = certFile, keyFile
		c.Secrets.Auth.SecureCookies = false // the default: TLS at the listener is enough
	}, logger)
	rest := "https://" + s.GatewayAddr

	// The startup lines: the REST listener only ever as https://, and the hints work as copied.
	var loginCmd, tryIt string
	for _, line := range loggedLines(logs) {
		if rest, ok := strings.CutPrefix(line, "try it: "); ok {
			tryIt = rest
		}
		if strings.Contains(line, "http://"+s.GatewayAddr) {
			t.Errorf("a startup line names the TLS listener as http://: %s", line)
		}
		if i := strings.Index(line, " login -user "); i >= 0 {
			loginCmd = line[i:]
		}
	}
	var sawRest bool
	for _, e := range logs.FilterMessage("gateway listening").All() {
		sawRest = e.ContextMap()["rest"] == rest
	}
	if !sawRest {
		t.Errorf("the gateway listening line lacks rest=%s", rest)
	}
	if !strings.Contains(loginCmd, "-url "+rest) {
		t.Fatalf("no `gantry login -url %s` hint in the startup lines (found %q)", rest, loginCmd)
	}

	dir := t.TempDir()
	// The try-it line works as copied (its first word is how to run gantry; the test runs its build).
	tryArgs := strings.Fields(tryIt)
	if len(tryArgs) < 2 || !strings.Contains(tryIt, "-addr "+rest) {
		t.Fatalf("try-it line %q, want one with -addr %s", tryIt, rest)
	}
	runGantry(t, dir, []string{"GANTRY_FROM=alice"}, "", tryArgs[1:]...).must(t, 0)

	env := []string{"GANTRY_ADDR=" + rest, "GANTRY_DATA_DIR=" + s.cfg.DataDir, "GANTRY_FROM=alice"}
	// Without the CA the CLI refuses the certificate and says how to trust it.
	refused := runGantry(t, dir, env, "", "creds", "list").must(t, 1)
	if !strings.Contains(refused.stderr, "-ca-file") || !strings.Contains(refused.stderr, "GANTRY_CA_FILE") {
		t.Errorf("stderr %q does not point at -ca-file / GANTRY_CA_FILE", refused.stderr)
	}
	runGantry(t, dir, env, "", "creds", "list", "-ca-file", filepath.Join(dir, "missing.pem")).must(t, 2)

	withCA := append(append([]string{}, env...), "GANTRY_CA_FILE="+caFile)
	var created map[string]any
	runGantry(t, dir, withCA, `{"api_key": "s3cret"}`, "creds", "create", "--name", "payments-api", "--doc", "payments API key", "--pairs-stdin").
		must(t, 0).json(t, &created)
	id, _ := created["id"].(string)
	if id == "" {
		t.Fatalf("create printed %v", created)
	}
	var list []map[string]any
	runGantry(t, dir, withCA, "", "creds", "list").must(t, 0).json(t, &list)
	if len(list) != 1 || list[0]["id"] != id {
		t.Fatalf("list = %v", list)
	}
	// The flag does what the variable does.
	runGantry(t, dir, env, "", "services", "map", "payments", id, "-ca-file", caFile).must(t, 0)
	run := runGantry(t, dir, withCA, "", "env", "--service", "payments", "--from", "payments", "--user-type", "service", "--", "/usr/bin/env").must(t, 0)
	if !strings.Contains(run.stdout, "CREDENTIALS_API_KEY=s3cret\n") {
		t.Errorf("the child's environment lacks CREDENTIALS_API_KEY")
	}

	// The login command of the startup lines, as printed, makes an https link whose session is Secure.
	args := strings.Fields(loginCmd)
	for i, a := range args {
		if a == "<email>" {
			args[i] = "alice@example.com"
		}
	}
	link := strings.TrimSpace(runGantry(t, dir, nil, "", args...).must(t, 0).stdout)
	if !strings.HasPrefix(link, rest+"/v1/login?code=") {
		t.Fatalf("gantry login printed %q, want a link under %s", link, rest)
	}
	assertSecureSession(t, httpsClient(t, caFile), link)

	// Every HTTPS answer pins the host to HTTPS for a year (HSTS, -hsts-max-age; issue 40).
	for _, path := range []string{"/", "/healthcheck", "/v1/credentials"} {
		resp, err := httpsClient(t, caFile).Get(rest + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Strict-Transport-Security"); got != "max-age=31536000" {
			t.Errorf("GET %s over https: Strict-Transport-Security %q, want max-age=31536000", path, got)
		}
	}
}

// assertSecureSession opens a login link and checks that it sets a session and that every cookie
// it sets is Secure.
func assertSecureSession(t *testing.T, c *http.Client, link string) {
	t.Helper()
	resp, err := c.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusFound || len(cookies) == 0 {
		t.Fatalf("login link: %d with cookies %v, want 302 with a session", resp.StatusCode, resp.Header.Values("Set-Cookie"))
	}
	for _, c := range cookies {
		if !c.Secure {
			t.Errorf("cookie %s is not Secure over https: %v", c.Name, resp.Header.Values("Set-Cookie"))
		}
	}
}

// TestSplitGatewayOverHTTPSMarksCookiesSecure: the secrets service runs in another process that
// knows nothing of the gateway's TLS (SECURE_COOKIES off); the gateway serving https marks its
// cookies Secure itself.
func TestSplitGatewayOverHTTPSMarksCookiesSecure(t *testing.T) {
	certFile, keyFile, caFile := edgePKI(t)
	services := startStack(t, func(c *stack.Config) { c.Target = "secrets,chat" })
	gw := splitGateway(t, services, func(c *stack.Config) { c.Gateway.TLSCertFile, c.Gateway.TLSKeyFile = certFile, keyFile })
	link := services.loginLink(t, "alice@example.com")
	code := link[strings.Index(link, "/v1/login?code="):]
	assertSecureSession(t, httpsClient(t, caFile), "https://"+gw.GatewayAddr+code)
}
