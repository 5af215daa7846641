package gateway

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/grpcserver"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
)

// allMetadata returns every metadata key and value the echo upstream received for one request.
func allMetadata(t *testing.T, rest string, header http.Header) map[string][]string {
	t.Helper()
	return echoReport(t, rest, "allmd", header)
}

func TestOnlyAllowListedHeadersReachServices(t *testing.T) {
	// -forward-headers naming the gateway's route metadata does not let a client set it.
	rest, _ := startGateway(t, func(c *Config) { c.InternalCIDRs = "10.0.0.0/8"; c.ForwardHeaders = "X-Forwarded-User,X-Proxy-Route" })
	md := allMetadata(t, rest, http.Header{
		"Grpc-Metadata-X-Proxy-Internal":                   {"true"},
		"Grpc-Metadata-X-Proxy-Downstream-Service-Cluster": {"admin"},
		"Grpc-Metadata-X-Nginx-Internal":                   {"true"},
		"Grpc-Metadata-X-Goog-Authenticated-User-Email":    {"admin@example.com"},
		"Grpc-Metadata-Anything":                           {"x"},
		"Grpc-Timeout":                                     {"1n"},
		"Grpc-Metadata-Grpc-Timeout":                       {"1n"},
		"X-Nginx-Internal":                                 {"true"},
		"X-Goog-Authenticated-User-Email":                  {"admin@example.com"},
		"X-Forwarded-For":                                  {"10.1.2.3"},
		"X-Forwarded-Host":                                 {"internal.example"},
		"Forwarded":                                        {"for=10.1.2.3"},
		"X-Forwarded-User":                                 {"bob"},
		"X-Auth-From":                                      {"svc"},
		"Accept-Language":                                  {"de"},
		"If-Match":                                         {`"3"`},
		"X-Proxy-Route":                                    {"/api/v1/slack/get_team/{team_name}"},
		"Grpc-Metadata-X-Proxy-Route":                      {"/api/v1/slack/get_team/{team_name}"},
	})
	allowed := map[string]bool{
		// gRPC's own, and what grpc-gateway derives from the connection itself.
		":authority": true, "content-type": true, "user-agent": true, "x-forwarded-for": true, "x-forwarded-host": true,
		// The route the request matched, the gateway's own (checked below).
		"x-proxy-route": true,
		// The allow-list: auth material, the expected revision of a write, -forward-headers, the request id.
		"x-auth-from": true, "if-match": true, "x-forwarded-user": true, "x-request-id": true,
	}
	var extra []string
	for k := range md {
		if !allowed[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		t.Errorf("client headers reached the service as metadata: %v (all: %v)", extra, md)
	}
	if got := md["x-forwarded-for"]; len(got) != 1 || got[0] != "127.0.0.1" {
		t.Errorf("x-forwarded-for = %q, want only the gateway-derived peer address", got)
	}
	if got := md["x-forwarded-host"]; len(got) != 1 || !strings.HasPrefix(got[0], "127.0.0.1:") {
		t.Errorf("x-forwarded-host = %q, want the request's Host", got)
	}
	if got := md["if-match"]; len(got) != 1 || got[0] != `"3"` {
		t.Errorf("if-match = %q, want the client's If-Match as it was sent", got)
	}
	if got := md["x-proxy-route"]; len(got) != 1 || got[0] != "/api/v1/chat/get_team/{team_name}" {
		t.Errorf("x-proxy-route = %q, want only the route the gateway matched", got)
	}
	if got := md["x-forwarded-user"]; len(got) != 1 || got[0] != "bob" {
		t.Errorf("-forward-headers header = %q, want [bob]", got)
	}
}

func TestClientDeadlineNeverEjects(t *testing.T) {
	h := startHarness(t, func(c *Config) { c.HealthCheck.Interval = time.Hour })
	for i := 0; i < 20; i++ {
		code, _, body := do(t, "GET", h.rest+"/api/v1/chat/get_team/echo", nil, http.Header{"Grpc-Timeout": {"1n"}})
		if code != http.StatusOK {
			t.Fatalf("request %d with Grpc-Timeout: 1n: %d %s", i, code, body)
		}
	}
	if got := clusterLines(t, h.admin, "chat", h.chatAddr)["health_flags"]; got != "healthy" {
		t.Fatalf("after client deadlines: health_flags %q", got)
	}
}

func TestRequestID(t *testing.T) {
	rest, _ := startGateway(t, nil)
	_, header, _ := do(t, "GET", rest+"/api/v1/chat/get_team/echo", nil, nil)
	generated := header.Get("X-Request-Id")
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(generated) {
		t.Fatalf("generated X-Request-Id %q", generated)
	}
	md := allMetadata(t, rest, http.Header{"X-Request-Id": {"trace-1.2_3"}})
	if got := md["x-request-id"]; len(got) != 1 || got[0] != "trace-1.2_3" {
		t.Errorf("a well-formed client id reached the service as %q", got)
	}
	// From an external downstream the client's id is replaced, as Envoy does.
	external, _ := startGateway(t, func(c *Config) { c.InternalCIDRs = "10.0.0.0/8" })
	if got := allMetadata(t, external, http.Header{"X-Request-Id": {"trace-1.2_3"}})["x-request-id"]; len(got) != 1 || got[0] == "trace-1.2_3" {
		t.Errorf("an external client's id reached the service: %q", got)
	}
	for _, bad := range []string{"has space", strings.Repeat("a", 129), "new\\nline", "é"} {
		md := allMetadata(t, rest, http.Header{"X-Request-Id": {bad}})
		if got := md["x-request-id"]; len(got) != 1 || got[0] == bad || !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(got[0]) {
			t.Errorf("client id %q: service saw %q, want a generated one", bad, got)
		}
	}
}

// hangingChat answers GetTeam only when its call ends, and reports each call as it starts.
type hangingChat struct {
	chatv1.UnimplementedChatServiceServer
	started chan struct{}
}

func (c hangingChat) GetTeam(ctx context.Context, _ *chatv1.GetTeamRequest) (*chatv1.GetTeamResponse, error) {
	c.started <- struct{}{}
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestTransportFailuresNeverRevealAddresses(t *testing.T) {
	// A host that dies with the call in flight: the client gets a plain 503.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lis := listen(t)
	srv := grpcserver.New(logtest.New(t))
	hc := hangingChat{started: make(chan struct{}, 1)}
	chatv1.RegisterChatServiceServer(srv.Server, hc)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis, time.Second) }()
	h := startHarness(t, func(c *Config) { c.ChatUpstream = lis.Addr().String() })
	go func() {
		<-hc.started
		srv.Stop() // closes the connection under the call: no status ever arrives
	}()
	code, _, body := do(t, "GET", h.rest+"/api/v1/chat/get_team/x", nil, nil)
	if code != http.StatusServiceUnavailable || string(body) != `{"error":"upstream service unavailable"}`+"\n" {
		t.Errorf("host died mid-call: %d %s", code, body)
	}
	<-served

	// A host that cannot be reached (the harness's secrets address serves nothing).
	code, _, body = do(t, "GET", h.rest+"/v1/value_generator", nil, nil)
	if code != http.StatusServiceUnavailable || string(body) != `{"error":"upstream service unavailable"}`+"\n" {
		t.Errorf("unreachable host: %d %s", code, body)
	}
}

func TestAdminRefusesForeignHostsAndCrossSite(t *testing.T) {
	h := startHarness(t, func(c *Config) { c.AdminAllowedHosts = "gantry-admin.internal" })
	port := h.admin[strings.LastIndex(h.admin, ":")+1:]
	send := func(method, path, host string, header http.Header) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, h.admin+path, strings.NewReader("level=error"))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		return resp.StatusCode, b.String()
	}
	// DNS rebinding: a page's own name resolving to the admin address.
	for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.2:" + port, "localhost.evil.example:" + port} {
		if code, body := send("GET", "/stats", host, nil); code != http.StatusForbidden || !strings.Contains(body, `"error"`) {
			t.Errorf("GET /stats with Host %q = %d %q, want 403", host, code, body)
		}
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "gantry-admin.internal:1234"} {
		if code, body := send("GET", "/server_info", host, nil); code != http.StatusOK {
			t.Errorf("GET /server_info with Host %q = %d %q, want 200", host, code, body)
		}
	}
	own := "127.0.0.1:" + port
	for _, header := range []http.Header{
		{"Origin": {"http://evil.example"}, "Content-Type": {"text/plain"}},
		{"Origin": {"null"}, "Content-Type": {formContentType}},
		{"Sec-Fetch-Site": {"cross-site"}, "Content-Type": {formContentType}},
		{"Sec-Fetch-Site": {"same-site"}},
	} {
		for _, path := range []string{"/healthcheck/fail", "/logging", "/stats"} {
			if code, _ := send("POST", path, own, header); code != http.StatusForbidden {
				t.Errorf("POST %s with %v = %d, want 403", path, header, code)
			}
		}
	}
	if h.gw.Draining() || h.gw.levels.List()["gateway"] == "error" {
		t.Fatal("a refused request changed the server")
	}
	// The admin page itself (same origin) and curl (no Origin) still work.
	if code, body := send("POST", "/healthcheck/fail", own, http.Header{"Origin": {"http://" + own}, "Sec-Fetch-Site": {"same-origin"}}); code != 200 {
		t.Errorf("same-origin POST = %d %q", code, body)
	}
	if code, body := send("POST", "/healthcheck/ok", own, nil); code != 200 || h.gw.Draining() {
		t.Errorf("curl-style POST = %d %q", code, body)
	}
}
