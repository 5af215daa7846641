package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/gantry-dev/gantry/pkg/rpcerr"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
	proxyadminv1 "github.com/gantry-dev/gantry/proto/proxyadmin/v1"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// echoChat is a chat upstream whose GetTeam reports the metadata it received, or fails on demand.
type echoChat struct {
	chatv1.UnimplementedChatServiceServer
}

func (echoChat) GetTeam(ctx context.Context, req *chatv1.GetTeamRequest) (*chatv1.GetTeamResponse, error) {
	switch req.GetTeamName() {
	case "boom":
		return nil, status.Error(codes.Internal, "bolt: database password hunter2 rejected")
	case "unavailable":
		return nil, status.Error(codes.Unavailable, "the store is unreachable")
	case "dependency":
		return nil, rpcerr.DependencyUnavailable("storage unavailable", "storage")
	case "stale":
		return nil, status.Error(codes.FailedPrecondition, "Precondition failed: the current revision is 5, not 3 (If-Match).")
	case "allmd":
		// Every metadata key that reached the service.
		md, _ := metadata.FromIncomingContext(ctx)
		b, _ := json.Marshal(md)
		return &chatv1.GetTeamResponse{TeamId: string(b)}, nil
	case "unknown":
		return nil, fmt.Errorf("an error without a status")
	case "detail":
		st, _ := status.New(codes.PermissionDenied, "alice does not have access to credential abc").
			WithDetails(&structpb.Struct{Fields: map[string]*structpb.Value{"reference": structpb.NewStringValue("abc")}})
		return nil, st.Err()
	case "panic":
		panic("handler bug")
	case "slow":
		<-ctx.Done() // answers only when the gateway's deadline passes
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	md, _ := metadata.FromIncomingContext(ctx)
	seen := map[string][]string{}
	for _, k := range []string{"x-proxy-internal", "x-proxy-downstream-service-cluster", "authorization", "x-auth-from", "x-auth-token", "cookie", "x-xsrf-token", "x-forwarded-user"} {
		if v := md.Get(k); len(v) > 0 {
			seen[k] = v
		}
	}
	b, _ := json.Marshal(seen)
	return &chatv1.GetTeamResponse{TeamId: string(b)}, nil
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// startGateway runs a gateway in front of an echoChat upstream and a secrets address nothing serves
// (startHarness) and returns its REST and admin base URLs.
func startGateway(t *testing.T, mutate func(*Config)) (rest, admin string) {
	t.Helper()
	h := startHarness(t, mutate)
	return h.rest, h.admin
}

func do(t *testing.T, method, url string, body io.Reader, header http.Header) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, data
}

// upstreamSaw returns the metadata the echo upstream received for one request (the keys it reports).
func upstreamSaw(t *testing.T, rest string, header http.Header) map[string][]string {
	t.Helper()
	return echoReport(t, rest, "echo", header)
}

// echoReport sends GET get_team/<team> to the echo upstream and decodes the metadata it reports.
func echoReport(t *testing.T, rest, team string, header http.Header) map[string][]string {
	t.Helper()
	code, _, body := do(t, http.MethodGet, rest+"/api/v1/chat/get_team/"+team, nil, header)
	if code != http.StatusOK {
		t.Fatalf("status %d, body %s", code, body)
	}
	var resp struct {
		TeamID string `json:"team_id"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatal(err)
	}
	seen := map[string][]string{}
	if err := json.Unmarshal([]byte(resp.TeamID), &seen); err != nil {
		t.Fatal(err)
	}
	return seen
}

func TestInternalHeader(t *testing.T) {
	spoofed := http.Header{"X-Proxy-Internal": {"false"}, "X-Proxy-Downstream-Service-Cluster": {"echobot"}}
	t.Run("loopback is internal by default", func(t *testing.T) {
		rest, _ := startGateway(t, nil)
		seen := upstreamSaw(t, rest, spoofed)
		if got := seen["x-proxy-internal"]; len(got) != 1 || got[0] != "true" {
			t.Errorf("x-proxy-internal = %q, want exactly [true]", got)
		}
		if got := seen["x-proxy-downstream-service-cluster"]; len(got) != 1 || got[0] != "echobot" {
			t.Errorf("identity = %q, want it forwarded from an internal downstream", got)
		}
	})
	t.Run("client value stripped for external downstream", func(t *testing.T) {
		rest, _ := startGateway(t, func(c *Config) { c.InternalCIDRs = "10.0.0.0/8" })
		seen := upstreamSaw(t, rest, http.Header{"X-Proxy-Internal": {"true"}, "X-Proxy-Downstream-Service-Cluster": {"echobot"}})
		if got, ok := seen["x-proxy-internal"]; ok {
			t.Errorf("x-proxy-internal = %q reached the upstream from an external downstream", got)
		}
		if got, ok := seen["x-proxy-downstream-service-cluster"]; ok {
			t.Errorf("identity %q trusted from an external downstream", got)
		}
	})
}

func TestAuthMaterialForwarded(t *testing.T) {
	rest, _ := startGateway(t, func(c *Config) { c.ForwardHeaders = "X-Forwarded-User" })
	seen := upstreamSaw(t, rest, http.Header{
		"Authorization":    {"Basic MnVzZXJhbGljZTp0b2tlbg=="},
		"X-Auth-From":      {"2/service/api"},
		"X-Auth-Token":     {"tok"},
		"Cookie":           {"confidant_session=abc"},
		"X-Xsrf-Token":     {"xsrf"},
		"X-Forwarded-User": {"alice"},
	})
	want := map[string]string{
		"authorization": "Basic MnVzZXJhbGljZTp0b2tlbg==", "x-auth-from": "2/service/api", "x-auth-token": "tok",
		"cookie": "confidant_session=abc", "x-xsrf-token": "xsrf", "x-forwarded-user": "alice",
	}
	for k, v := range want {
		if got := seen[k]; len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, want exactly [%q]", k, got, v)
		}
	}
}

func TestErrorsAreJSON(t *testing.T) {
	rest, _ := startGateway(t, nil)
	tests := []struct {
		name, method, path, body string
		wantCode                 int
		wantError                string
		wantFields               map[string]any
	}{
		{name: "internal detail hidden", method: "GET", path: "/api/v1/chat/get_team/boom", wantCode: 500, wantError: "internal error"},
		{name: "plain error hidden", method: "GET", path: "/api/v1/chat/get_team/unknown", wantCode: 500, wantError: "internal error"},
		{name: "panic becomes 500", method: "GET", path: "/api/v1/chat/get_team/panic", wantCode: 500, wantError: "internal error"},
		{name: "status detail merged", method: "GET", path: "/api/v1/chat/get_team/detail", wantCode: 403,
			wantError: "alice does not have access to credential abc", wantFields: map[string]any{"reference": "abc"}},
		{name: "failed precondition is 412", method: "GET", path: "/api/v1/chat/get_team/stale", wantCode: 412,
			wantError: "Precondition failed: the current revision is 5, not 3 (If-Match)."},
		{name: "upstream down", method: "GET", path: "/v1/value_generator", wantCode: 503, wantError: "upstream service unavailable"},
		{name: "unimplemented", method: "GET", path: "/api/v1/chat/get_ims/t/b", wantCode: 501, wantError: "method GetIms not implemented"},
		{name: "malformed JSON", method: "POST", path: "/api/v2/chat/action/t/b", body: `{"action":`, wantCode: 400, wantError: "invalid JSON request body: unexpected EOF"},
		{name: "wrong type", method: "POST", path: "/api/v2/chat/action/t/b", body: `{"action": 5}`, wantCode: 400},
		{name: "not an object", method: "POST", path: "/api/v2/chat/action/t/b", body: `[1,2]`, wantCode: 400},
		{name: "data after the JSON", method: "POST", path: "/api/v2/chat/action/t/b", body: `{"action":"x"} junk`, wantCode: 400,
			wantError: "invalid JSON request body: data after the JSON value"},
		{name: "two JSON values", method: "POST", path: "/api/v2/chat/action/t/b", body: `{"action":"x"}{"action":"y"}`, wantCode: 400,
			wantError: "invalid JSON request body: data after the JSON value"},
		{name: "bad path parameter type", method: "PUT", path: "/v1/credentials/abc/notanumber", wantCode: 400},
		{name: "unknown path", method: "GET", path: "/v2/nothing", wantCode: 404, wantError: "no route for /v2/nothing"},
		{name: "wrong method", method: "DELETE", path: "/v1/credentials", wantCode: 405, wantError: "method DELETE not allowed on /v1/credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, header, body := do(t, tt.method, rest+tt.path, strings.NewReader(tt.body), nil)
			if code != tt.wantCode {
				t.Fatalf("status = %d, want %d (body %s)", code, tt.wantCode, body)
			}
			if ct := header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			var got map[string]any
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("body %q is not JSON: %v", body, err)
			}
			msg, _ := got["error"].(string)
			if msg == "" || (tt.wantError != "" && msg != tt.wantError) {
				t.Errorf("error = %q, want %q", msg, tt.wantError)
			}
			if strings.Contains(string(body), "hunter2") || strings.Contains(string(body), "127.0.0.1") {
				t.Errorf("body leaks internal detail: %s", body)
			}
			for k, v := range tt.wantFields {
				if got[k] != v {
					t.Errorf("%s = %v, want %v", k, got[k], v)
				}
			}
		})
	}
	// The panic above must not have taken the upstream down.
	if code, _, body := do(t, "GET", rest+"/api/v1/chat/get_team/echo", nil, nil); code != 200 {
		t.Errorf("after a panic: status %d, body %s", code, body)
	}
}

func TestBodyLimit(t *testing.T) {
	const limit = 64
	rest, _ := startGateway(t, func(c *Config) { c.MaxBodyBytes = limit })
	small := `{"action":"chat.postMessage"}`
	big := `{"action":"` + strings.Repeat("x", limit) + `"}`
	tests := []struct {
		name     string
		body     io.Reader
		wantCode int
	}{
		{name: "within limit reaches upstream", body: strings.NewReader(small), wantCode: 501},
		{name: "content-length over limit", body: strings.NewReader(big), wantCode: 413},
		// io.MultiReader hides the length, so the request is sent chunked with no Content-Length.
		{name: "chunked over limit", body: io.MultiReader(strings.NewReader(big)), wantCode: 413},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, body := do(t, "POST", rest+"/api/v2/chat/action/t/b", tt.body, nil)
			if code != tt.wantCode {
				t.Fatalf("status = %d, want %d (body %s)", code, tt.wantCode, body)
			}
			if tt.wantCode == 413 && !strings.Contains(string(body), `"error":"request body exceeds the limit of 64 bytes"`) {
				t.Errorf("body = %s", body)
			}
		})
	}
}

func TestNoGRPCPlumbingInResponseHeaders(t *testing.T) {
	rest, _ := startGateway(t, nil)
	_, header, _ := do(t, "GET", rest+"/api/v1/chat/get_team/echo", nil, nil)
	for k := range header {
		if strings.HasPrefix(strings.ToLower(k), "grpc-") {
			t.Errorf("response header %s leaks gRPC metadata", k)
		}
	}
}

func TestAdminUnknownPathPrintsMenu(t *testing.T) {
	_, admin := startGateway(t, nil)
	code, header, body := do(t, "GET", admin+"/nothing", nil, nil)
	if code != 404 || !strings.HasPrefix(string(body), "gantry admin commands:\n") || !strings.HasPrefix(header.Get("Content-Type"), "text/plain") {
		t.Errorf("got %d %q %q", code, header.Get("Content-Type"), body)
	}
	code, _, body = do(t, "GET", admin+"/", nil, nil)
	if code != 200 || !strings.Contains(string(body), "/server_info: ") {
		t.Errorf("GET / = %d %q, want the menu", code, body)
	}
}

func TestOpenAPIDocuments(t *testing.T) {
	rest, admin := startGateway(t, nil)
	for _, u := range []string{rest + "/openapi/secrets.json", rest + "/openapi/chat.json", admin + "/openapi/proxyadmin.json"} {
		code, _, body := do(t, "GET", u, nil, nil)
		var doc struct {
			Swagger string         `json:"swagger"`
			Paths   map[string]any `json:"paths"`
		}
		if err := json.Unmarshal(body, &doc); code != 200 || err != nil || doc.Swagger != "2.0" || len(doc.Paths) == 0 {
			t.Errorf("%s: status %d, err %v, doc %+v", u, code, err, doc)
		}
		if strings.Contains(string(body), "buf:lint") {
			t.Errorf("%s carries lint directives", u)
		}
	}
	if code, _, _ := do(t, "GET", rest+"/openapi/nope.json", nil, nil); code != 404 {
		t.Errorf("unknown document: status %d, want 404", code)
	}
}

func TestRawQueryParser(t *testing.T) {
	noFilter := utilities.NewDoubleArray(nil)
	logging := &proxyadminv1.SetLoggingRequest{}
	if err := (rawQueryParser{}).Parse(logging, url.Values{"upstream": {"debug"}}, noFilter); err != nil || logging.GetRawQuery() != "upstream=debug" {
		t.Errorf("admin request: raw_query = %q, err %v", logging.GetRawQuery(), err)
	}
	cert := &secretsv1.GetCertificateRequest{}
	if err := (rawQueryParser{}).Parse(cert, url.Values{"san": {"a", "b"}, "validity": {"7"}}, noFilter); err != nil ||
		len(cert.GetSan()) != 2 || cert.GetValidity() != 7 {
		t.Errorf("other request parsed the default way: got %+v, err %v", cert, err)
	}
	if err := (rawQueryParser{}).Parse(&secretsv1.GetCertificateRequest{}, url.Values{"validity": {"many"}}, noFilter); err == nil {
		t.Error("a non-integer validity must be rejected")
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{name: "defaults", mutate: func(*Config) {}},
		{name: "bad listen", mutate: func(c *Config) { c.Listen = "8080" }, wantErr: "-gateway-listen (GANTRY_GATEWAY_LISTEN)"},
		{name: "bad cidr", mutate: func(c *Config) { c.InternalCIDRs = "10.0.0.0/8, nope" }, wantErr: "-internal-cidrs (GANTRY_INTERNAL_CIDRS)"},
		{name: "zero body limit", mutate: func(c *Config) { c.MaxBodyBytes = 0 }, wantErr: "-max-body-bytes"},
		{name: "zero timeout", mutate: func(c *Config) { c.UpstreamTimeout = 0 }, wantErr: "-upstream-timeout"},
		{name: "no Slack body slots", mutate: func(c *Config) { c.SlackMaxUnverifiedInFlight = 0 }, wantErr: "-slack-max-unverified-in-flight"},
		{name: "write timeout under the upstream one", mutate: func(c *Config) { c.Limits.WriteTimeout = 10 * time.Second }, wantErr: "-http-write-timeout (GANTRY_HTTP_WRITE_TIMEOUT)"},
		{name: "bad listener limit", mutate: func(c *Config) { c.Limits.MaxHeaderBytes = 10 }, wantErr: "-http-max-header-bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.mutate(&cfg)
			err := cfg.Validate()
			if tt.wantErr == "" && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err = %v, want it to name %q", err, tt.wantErr)
			}
		})
	}
}
