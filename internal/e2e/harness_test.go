package e2e

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/internal/stacktest"
	"github.com/gantry-dev/gantry/pkg/internaltls"
)

// chatConfig is the Omnibot-shaped configuration the suite's chat service runs with.
const chatConfig = `
teams:
  gantry-team: T0GANTRY1
bots:
  gantry-team:
    gantry-bot: A0GANTRY1
authorization:
  checks:
    - module: "omnibot.authnz:allowed_paths"
      kwargs: {paths: ["/api/v1/chat/", "/api/v2/chat/"]}
    - module: "omnibot.authnz.envoy_checks:envoy_internal_check"
`

// client keeps enough idle connections for the concurrent tests and benchmarks.
// It never follows redirects, like python-confidant-client, so tests see the login routes' 302s.
var client = &http.Client{
	Transport:     &http.Transport{MaxIdleConnsPerHost: 64},
	Timeout:       30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// testStack is a running in-process stack.
type testStack struct {
	*stacktest.Running
	t    testing.TB
	cfg  stack.Config
	rest string // base URL of the REST listener
	adm  string // base URL of the admin listener
	// asUser is the Authorization header sent when a request sets none: a kmsauth token of the user
	// "alice", minted with the stack's own keyring as `gantry token` does.
	asUser string
	// https, when set, is the client of a REST listener that serves TLS (serveTLS); nil: client.
	https *http.Client
}

// startStack runs every role on loopback :0 ports with a temporary data folder. mutate may adjust the
// configuration before start. The stack is stopped, and its clean exit checked, when the test ends.
func startStack(t testing.TB, mutate func(*stack.Config)) *testStack {
	t.Helper()
	return startStackLogged(t, mutate, nil)
}

// startStackLogged is startStack with the stack logging to logger (nil: the test's log).
func startStackLogged(t testing.TB, mutate func(*stack.Config), logger *zap.Logger) *testStack {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end suite skipped with -short")
	}
	chatFile := filepath.Join(t.TempDir(), "chat.yaml")
	if err := os.WriteFile(chatFile, []byte(chatConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	// stacktest.Config turns the access log and the audit trail on stdout off: their own tests turn
	// them on (auditTrail reads the trail).
	cfg := stacktest.Config(t)
	cfg.Chat.ConfigFile = chatFile
	cfg.InternalTLS.Dir = testTLSDir(t)
	if mutate != nil {
		mutate(&cfg)
	}
	return runStackLogged(t, cfg, logger)
}

// testTLSDirs holds one internal-TLS folder per top-level test: every stack and host a test (and its
// subtests) starts shares it, as processes sharing a data folder or a docker-compose volume do, so
// they trust one another. A test whose subtests start stacks calls testTLSDir itself first, so the
// folder lives as long as the whole test.
var testTLSDirs sync.Map

func testTLSDir(t testing.TB) string {
	t.Helper()
	name, _, _ := strings.Cut(t.Name(), "/")
	if dir, ok := testTLSDirs.Load(name); ok {
		return dir.(string)
	}
	dir := filepath.Join(t.TempDir(), "tls")
	testTLSDirs.Store(name, dir)
	t.Cleanup(func() { testTLSDirs.Delete(name) })
	return dir
}

func runStack(t testing.TB, cfg stack.Config) *testStack {
	t.Helper()
	return runStackLogged(t, cfg, nil)
}

func runStackLogged(t testing.TB, cfg stack.Config, logger *zap.Logger) *testStack {
	t.Helper()
	r := stacktest.Start(t, cfg, stacktest.Logger(logger))
	s := &testStack{Running: r, t: t, cfg: cfg, rest: "http://" + r.GatewayAddr, adm: "http://" + r.AdminAddr}
	s.asUser = s.basic("alice", "user")
	return s
}

// stop shuts the stack down and checks that it stopped cleanly.
func (s *testStack) stop() {
	if err := s.Stop(); err != nil {
		s.t.Errorf("stack did not stop cleanly: %v", err)
	}
}

// restart stops the stack and starts a new one on the same data folder and configuration.
func (s *testStack) restart() *testStack {
	s.t.Helper()
	s.stop()
	return runStack(s.t, s.cfg)
}

// response is what a request through the gateway returned.
type response struct {
	code   int
	header http.Header
	body   []byte
}

// json decodes the body into a generic object, failing the test when it is not a JSON object.
func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", r.body, err)
	}
	return m
}

func (s *testStack) do(method, url, body string, header http.Header) response {
	s.t.Helper()
	c := client
	if s.https != nil {
		c = s.https
	}
	return s.doWith(c, method, url, body, header)
}

// doWith is do with a client of the test's choosing (one presenting a client certificate).
func (s *testStack) doWith(c *http.Client, method, url, body string, header http.Header) response {
	s.t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if _, set := header["Authorization"]; !set && s.asUser != "" {
		req.Header.Set("Authorization", s.asUser)
	}
	if req.Header.Get("Authorization") == "" {
		req.Header.Del("Authorization") // an explicit "" means: send none
	}
	resp, err := c.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return response{code: resp.StatusCode, header: resp.Header, body: data}
}

// call sends a JSON body (any value, marshalled; nil for none) to a path of the REST listener.
func (s *testStack) call(method, path string, body any) response {
	s.t.Helper()
	payload := ""
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			s.t.Fatal(err)
		}
		payload = string(b)
	}
	return s.do(method, s.rest+path, payload, http.Header{"Content-Type": {"application/json"}})
}

// must fails the test unless the response has the wanted status, and returns its JSON object.
func (r response) must(t testing.TB, code int) map[string]any {
	t.Helper()
	if r.code != code {
		t.Fatalf("status %d, want %d; body %s", r.code, code, r.body)
	}
	return r.json(t)
}

// get sends GET to a path of the REST listener.
func (s *testStack) get(path string) response { return s.do(http.MethodGet, s.rest+path, "", nil) }

// admin sends GET to a path of the admin listener.
func (s *testStack) admin(path string) response { return s.do(http.MethodGet, s.adm+path, "", nil) }

// dial opens a gRPC connection to a service address of the stack.
func (s *testStack) dial(addr string) *grpc.ClientConn {
	s.t.Helper()
	dir := s.cfg.InternalTLS.Dir
	if dir == "" {
		dir = filepath.Join(s.cfg.DataDir, "tls")
	}
	creds, err := internaltls.DirectClientCredentials(dir, "")
	if err != nil {
		s.t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// dialAsGateway opens a gRPC connection to a service address with the gateway's own certificate: the
// one peer whose gateway-only metadata (x-proxy-internal, caller identity) services believe.
func (s *testStack) dialAsGateway(addr string) *grpc.ClientConn {
	s.t.Helper()
	in, err := internaltls.Load(s.cfg.InternalTLS, s.cfg.DataDir, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(in.ClientCredentials(internaltls.RoleGateway)))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// token mints a kmsauth token for from with the stack's keyring (the default local configuration).
func (s *testStack) token(from, userType string) string {
	s.t.Helper()
	return stacktest.Token(s.t, s.cfg.DataDir, from, userType, 10*time.Minute)
}

// basic is an HTTP Basic Authorization header carrying a kmsauth token, as python-confidant-client sends.
func (s *testStack) basic(from, userType string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte("2/"+userType+"/"+from+":"+s.token(from, userType)))
}
