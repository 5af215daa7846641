package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/grpcserver"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
)

// rateLimitingChat answers every GetTeam as a service whose caller used up its allowance does:
// ResourceExhausted with retry-after response metadata.
type rateLimitingChat struct {
	chatv1.UnimplementedChatServiceServer
}

func (rateLimitingChat) GetTeam(ctx context.Context, _ *chatv1.GetTeamRequest) (*chatv1.GetTeamResponse, error) {
	_ = grpc.SetHeader(ctx, metadata.Pairs("retry-after", "7"))
	return nil, status.Error(codes.ResourceExhausted, "too many writes")
}

func startRateLimitingChat(t *testing.T) string {
	t.Helper()
	lis := listen(t)
	srv := grpcserver.New(logtest.New(t))
	chatv1.RegisterChatServiceServer(srv.Server, rateLimitingChat{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	return lis.Addr().String()
}

// A service's rate limit is the caller's problem, not the host's: every 429 reaches the client with
// its Retry-After and JSON body, the call is not retried on another host (even a read the gateway may
// retry), and no number of them ejects a host.
func TestRateLimitAnswerIsNotAHostFailure(t *testing.T) {
	a, b := startRateLimitingChat(t), startRateLimitingChat(t)
	rest, admin := startGateway(t, func(cfg *Config) {
		cfg.ChatUpstream = a + "," + b
		cfg.Outlier.ConsecutiveFailures = 2
		cfg.Outlier.MaxEjectionPercent = 100
	})
	const calls = 30
	for i := range calls {
		code, header, body := do(t, "GET", rest+"/api/v1/chat/get_team/t", nil, nil)
		var msg struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(body, &msg); err != nil || code != 429 || msg.Error != "too many writes" || header.Get("Retry-After") != "7" {
			t.Fatalf("call %d: %d Retry-After %q body %s, want 429, Retry-After 7, {\"error\": \"too many writes\"}", i, code, header.Get("Retry-After"), body)
		}
	}
	for name, want := range map[string]int{
		"cluster.chat.upstream_rq_total":                                    calls,
		"cluster.chat.upstream_rq_retry":                                    0,
		"cluster.chat.upstream_rq_429":                                      calls,
		"cluster.chat.outlier_detection.ejections_total":                    0,
		"cluster.chat.outlier_detection.ejections_detected_consecutive_5xx": 0,
	} {
		if got := statValue(t, admin, name); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
	if _, _, clusters := do(t, "GET", admin+"/clusters", nil, nil); strings.Contains(string(clusters), "failed_outlier_check") {
		t.Errorf("a host is ejected after %d rate-limit answers:\n%s", calls, clusters)
	}
}
