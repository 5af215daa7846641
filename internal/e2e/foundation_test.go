package e2e

import (
	"context"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/internal/stack"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

var generatedValue = regexp.MustCompile(`^[A-Za-z0-9]{50}$`)

func TestValueGeneratorThroughGateway(t *testing.T) {
	s := startStack(t, nil)
	first := ""
	for range 2 {
		r := s.get("/v1/value_generator")
		if r.code != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("status %d, content type %q, body %s", r.code, r.header.Get("Content-Type"), r.body)
		}
		v, _ := r.json(t)["value"].(string)
		if !generatedValue.MatchString(v) {
			t.Fatalf("value %q is not 50 alphanumeric characters", v)
		}
		if v == first {
			t.Fatalf("two calls returned the same value %q", v)
		}
		first = v
	}
}

func TestGetTeamThroughGateway(t *testing.T) {
	s := startStack(t, nil)
	tests := []struct {
		path      string
		wantCode  int
		wantField string
		wantValue string
	}{
		{path: "/api/v1/chat/get_team/gantry-team", wantCode: 200, wantField: "team_id", wantValue: "T0GANTRY1"},
		{path: "/api/v1/chat/get_team/nope", wantCode: 404, wantField: "error", wantValue: "provided team_name is not configured."},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			r := s.get(tt.path)
			if r.code != tt.wantCode {
				t.Fatalf("status %d, want %d (body %s)", r.code, tt.wantCode, r.body)
			}
			if got := r.json(t)[tt.wantField]; got != tt.wantValue {
				t.Errorf("%s = %v, want %q", tt.wantField, got, tt.wantValue)
			}
		})
	}
}

func TestServerInfoOnAdminListener(t *testing.T) {
	s := startStack(t, nil)
	r := s.admin("/server_info")
	line := regexp.MustCompile(`^gantry [0-9a-f]{6}/RELEASE live \d+ \d+ 0\n$`)
	if r.code != http.StatusOK || !line.Match(r.body) || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Fatalf("got %d %q %q", r.code, r.header.Get("Content-Type"), r.body)
	}
	// The admin paths are not on the REST listener, and the REST paths not on the admin listener.
	if r := s.get("/server_info"); r.code != http.StatusNotFound {
		t.Errorf("REST listener serves /server_info: %d", r.code)
	}
	if r := s.admin("/v1/value_generator"); r.code != http.StatusNotFound {
		t.Errorf("admin listener serves /v1/value_generator: %d", r.code)
	}
}

// TestBadInputIsA4xxJSONError sends what careless and hostile clients send. Nothing may answer 5xx,
// and every answer is a JSON error.
func TestBadInputIsA4xxJSONError(t *testing.T) {
	s := startStack(t, func(c *stack.Config) { c.Gateway.MaxBodyBytes = 1 << 10 })
	tests := []struct {
		name, method, path, body string
		wantCode                 int
	}{
		{"malformed JSON", "POST", "/v1/credentials", `{"name": "db", `, 400},
		{"JSON of the wrong type", "POST", "/v1/credentials", `{"name": ["db"]}`, 400},
		{"wrong boolean type", "PUT", "/v1/services/api", `{"enabled": "yes"}`, 400},
		{"body is an array", "POST", "/api/v2/chat/action/gantry-team/gantry-bot", `[]`, 400},
		{"invalid UTF-8", "POST", "/v1/credentials", "{\"name\": \"\xff\xfe\"}", 400},
		{"path parameter of the wrong type", "PUT", "/v1/credentials/abc/latest", "", 400},
		{"revision out of int32 range", "GET", "/v1/credentials/abc/1/99999999999", "", 400},
		{"query parameter of the wrong type", "GET", "/v1/services?limit=ten", "", 400},
		{"oversized body", "POST", "/v1/credentials", `{"name": "` + strings.Repeat("a", 2<<10) + `"}`, 413},
		{"unknown path", "GET", "/v1/nothing/here", "", 404},
		{"wrong method", "PATCH", "/v1/credentials", "", 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.do(tt.method, s.rest+tt.path, tt.body, http.Header{"Content-Type": {"application/json"}})
			if r.code != tt.wantCode {
				t.Fatalf("status %d, want %d (body %s)", r.code, tt.wantCode, r.body)
			}
			if msg, _ := r.json(t)["error"].(string); msg == "" {
				t.Errorf("no error message in %s", r.body)
			}
		})
	}
}

func TestGRPCDirect(t *testing.T) {
	s := startStack(t, nil)
	ctx := context.Background()

	secrets := secretsv1.NewSecretsServiceClient(s.dial(s.SecretsAddr))
	// gRPC callers pass the same authentication as REST callers: the gateway cannot be bypassed.
	if _, err := secrets.GenerateValue(ctx, &secretsv1.GenerateValueRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("GenerateValue over gRPC without credentials: %v, want Unauthenticated", err)
	}
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", s.asUser)
	resp, err := secrets.GenerateValue(authed, &secretsv1.GenerateValueRequest{})
	if err != nil || !generatedValue.MatchString(resp.GetValue()) {
		t.Fatalf("GenerateValue over gRPC: %v, %v", resp, err)
	}

	// gRPC callers pass the chat service's access control too. Only the gateway may say a call is
	// internal: from any other peer x-proxy-internal is ignored.
	internal := metadata.AppendToOutgoingContext(ctx, "x-proxy-internal", "true")
	_, err = chatv1.NewChatServiceClient(s.dial(s.ChatAddr)).GetTeam(internal, &chatv1.GetTeamRequest{TeamName: "nope"})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("GetTeam(nope) over gRPC claiming to be internal: %v, want PermissionDenied", err)
	}
	_, err = chatv1.NewChatServiceClient(s.dialAsGateway(s.ChatAddr)).GetTeam(internal, &chatv1.GetTeamRequest{TeamName: "nope"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("GetTeam(nope) over gRPC from the gateway: %v, want NotFound", err)
	}

	// The services answer health and reflection to a direct caller's client.crt; the admin gRPC
	// listener answers only the gateway's certificate (TestAdminGRPCAnswersOnlyTheGateway).
	for addr, svc := range map[string]string{
		s.SecretsAddr: "secrets.v1.SecretsService", s.ChatAddr: "chat.v1.ChatService", s.AdminGRPCAddr: "proxyadmin.v1.ProxyAdminService",
	} {
		conn := s.dial(addr)
		if addr == s.AdminGRPCAddr {
			dir := s.cfg.InternalTLS.Dir
			gw, err := grpc.NewClient(addr, grpc.WithTransportCredentials(
				identityCreds(t, dir, filepath.Join(dir, "gateway.crt"), filepath.Join(dir, "gateway.key"))))
			if err != nil {
				t.Fatal(err)
			}
			defer gw.Close()
			conn = gw
		}
		h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %s: %v %v", svc, h, err)
		}
		if got := listServices(t, conn); !strings.Contains(got, svc) {
			t.Errorf("reflection on %s lists %q, want %s", addr, got, svc)
		}
	}
}

func listServices(t *testing.T, conn *grpc.ClientConn) string {
	t.Helper()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stream.CloseSend() }()
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return strings.Join(names, ",")
}

func TestStackConfigErrorsNameTheSetting(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*stack.Config)
		wantErr string
	}{
		{"unknown target", func(c *stack.Config) { c.Target = "secrets,mail" }, "-target (GANTRY_TARGET)"},
		{"bad secrets listen", func(c *stack.Config) { c.Secrets.Listen = "nowhere" }, "-secrets-listen (GANTRY_SECRETS_LISTEN)"},
		{"missing chat config", func(c *stack.Config) { c.Chat.ConfigFile = "/does/not/exist.yaml" }, "-chat-config (GANTRY_CHAT_CONFIG)"},
		{"bad log level", func(c *stack.Config) { c.Log.Level = "loud" }, "log-level"},
		{"chat-only ignores gateway settings", func(c *stack.Config) { c.Target = "chat"; c.Gateway.Listen = "bad" }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := stack.DefaultConfig()
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

// `curl -d '{...}'` sends JSON labelled application/x-www-form-urlencoded; the README's first steps do
// exactly that, so the body must be read as the JSON it is, and malformed JSON is still a clear 400.
func TestJSONBodyLabelledAsForm(t *testing.T) {
	s := startStack(t, nil)
	form := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
	body := `{"name":"curl-made","documentation":"d","credential_pairs":{"K":"v"}}`
	got := s.do("POST", s.rest+"/v1/credentials", body, form).must(t, 200)
	if got["name"] != "curl-made" || got["revision"] != float64(1) {
		t.Fatalf("created %v", got)
	}
	bad := s.do("POST", s.rest+"/v1/credentials", `{"name":`, form)
	if msg, _ := bad.json(t)["error"].(string); bad.code != 400 || !strings.HasPrefix(msg, "invalid JSON request body") {
		t.Fatalf("malformed: %d %s", bad.code, bad.body)
	}
}
