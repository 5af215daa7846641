package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/faultnet"
	"github.com/gantry-dev/gantry/pkg/grpcserver"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/slacksig"
	"github.com/gantry-dev/gantry/pkg/testwait"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
)

// slackTestSecret is the signing secret of the fake Slack app the tests sign requests for.
const slackTestSecret = "gateway-test-signing-secret"

// slackChat is a chat upstream whose ReceiveSlackRequest checks Slack's signature over the body it
// received, as the chat service does, and acknowledges.
type slackChat struct {
	echoChat
}

func (slackChat) ReceiveSlackRequest(_ context.Context, req *chatv1.ReceiveSlackRequestRequest) (*chatv1.ReceiveSlackRequestResponse, error) {
	if err := slacksig.Verify(slackTestSecret, req.GetBody(), req.GetTimestamp(), req.GetSignature(), time.Now(), 5*time.Minute); err != nil {
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	return &chatv1.ReceiveSlackRequestResponse{Status: http.StatusOK}, nil
}

// startSlackChat serves a slackChat on a gantry gRPC server, whose "grpc call" lines (a chat host's
// log of every call) go to the returned logs as well as the test's.
func startSlackChat(t *testing.T) (string, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	lis := listen(t)
	srv := grpcserver.New(zap.New(zapcore.NewTee(logtest.New(t).Core(), core)))
	chatv1.RegisterChatServiceServer(srv.Server, slackChat{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	return lis.Addr().String(), logs
}

// postSlackEvent sends an event to the gateway's event receiver, signed as Slack signs it.
func postSlackEvent(t *testing.T, client *http.Client, rest string) (*http.Response, []byte, error) {
	t.Helper()
	body := []byte(`{"type":"event_callback","api_app_id":"A1","team_id":"T1","event_id":"Ev1","event":{"type":"message","text":"hello"}}`)
	ts := time.Now().Unix()
	req, err := http.NewRequest(http.MethodPost, rest+"/api/v1/slack/event", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(slacksig.HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(slacksig.HeaderSignature, slacksig.Sign(slackTestSecret, ts, body))
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp, data, err
}

// TestSlackEventRequestIDReachesChat: a Slack event carries its request id to the chat service as a
// REST call does, so the gateway's access log line and the chat host's line of the call name the
// same id (the one the answer carries back).
func TestSlackEventRequestIDReachesChat(t *testing.T) {
	chatAddr, chatLogs := startSlackChat(t)
	accessLog := filepath.Join(t.TempDir(), "access.log")
	h := startHarness(t, func(c *Config) {
		c.ChatUpstream = chatAddr
		c.AccessLog = accessLog
		c.HealthCheck.Interval = time.Hour
	})
	resp, body, err := postSlackEvent(t, http.DefaultClient, h.rest)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("signed event: %d %s", resp.StatusCode, body)
	}
	id := resp.Header.Get("X-Request-Id")
	if id == "" {
		t.Fatal("the answer carries no X-Request-Id")
	}

	receive := chatv1.ChatService_ReceiveSlackRequest_FullMethodName
	var calls []observer.LoggedEntry
	testwait.Until(t, "the chat host's line of the call", func() bool {
		calls = chatLogs.FilterMessage("grpc call").FilterField(zap.String("method", receive)).All()
		return len(calls) > 0
	})
	if got := calls[0].ContextMap()["request_id"]; got != id {
		t.Errorf("the chat host logged the call with request_id %v, want %q (the answer's)", got, id)
	}

	var line string
	testwait.Until(t, "the access log line of the event", func() bool {
		data, _ := os.ReadFile(accessLog)
		for _, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, `"POST /api/v1/slack/event HTTP/1.1"`) {
				line = l
				return true
			}
		}
		return false
	})
	if !strings.Contains(line, strconv.Quote(id)) {
		t.Errorf("access log line %q does not name request id %q", line, id)
	}
}

// TestSlackEventFrozenChatTimesOut: with the chat host frozen (its connection open, nothing
// answered), a Slack event is answered 504 once the upstream timeout has passed, as a REST call is,
// instead of holding its connection until Slack gives up (after 25 s, which Slack then retries).
func TestSlackEventFrozenChatTimesOut(t *testing.T) {
	const upstreamTimeout = 500 * time.Millisecond
	chatAddr, _ := startSlackChat(t)
	proxy, err := faultnet.Listen("", chatAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	h := startHarness(t, func(c *Config) {
		c.ChatUpstream = proxy.Addr()
		c.HealthCheck.Interval = time.Hour // the deadline alone is to end the call
		c.UpstreamTimeout = upstreamTimeout
	})
	testwait.Until(t, "an event answered through the proxy", func() bool {
		resp, _, err := postSlackEvent(t, http.DefaultClient, h.rest)
		return err == nil && resp.StatusCode == http.StatusOK
	})
	proxy.Freeze()
	t.Cleanup(proxy.Thaw)

	slack := &http.Client{Timeout: 25 * time.Second} // Slack's patience
	start := time.Now()
	resp, body, err := postSlackEvent(t, slack, h.rest)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("event with the chat host frozen: no answer after %v: %v", took.Round(time.Millisecond), err)
	}
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("event with the chat host frozen: %d %s, want 504", resp.StatusCode, body)
	}
	if want := `{"error":"upstream request timeout","status":"failure"}`; strings.TrimSpace(string(body)) != want {
		t.Errorf("body %s, want %s", body, want)
	}
	if took < upstreamTimeout {
		t.Errorf("answered after %v, before the upstream timeout %v", took, upstreamTimeout)
	}
}
