package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/logging"
	"github.com/gantry-dev/gantry/pkg/testwait"
	"github.com/gantry-dev/gantry/services/chat"
	"github.com/gantry-dev/gantry/services/chat/events"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// rawSlackRequest opens a connection to the REST listener and sends a POST's request line and
// headers, announcing contentLength body bytes, and the first sent of them: the rest is the caller's
// to send (or not). Headers with an empty value are left out.
func rawSlackRequest(t *testing.T, addr, path string, contentLength int, sent []byte, headers map[string]string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", path, addr, contentLength)
	for k, v := range headers {
		if v != "" {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	if _, err := conn.Write(append([]byte(b.String()), sent...)); err != nil {
		t.Fatal(err)
	}
	return conn
}

// readRawResponse reads the answer on conn. The deadline only turns a hang (the server waiting for a
// body it should not read) into a failure; a correct server answers at once.
func readRawResponse(t *testing.T, conn net.Conn) (*http.Response, []byte) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer before the body was sent: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

func slackHeaders(contentType, secret string, at time.Time, body []byte) map[string]string {
	return map[string]string{"Content-Type": contentType, "X-Slack-Request-Timestamp": fmt.Sprint(at.Unix()),
		"X-Slack-Signature": events.Sign(secret, at.Unix(), body)}
}

// TestSlackRefusedBeforeBody: a Slack request without well-formed signature headers, or with a
// timestamp outside the replay window, is refused before one byte of its body is read: the answer
// comes while the client still holds back the megabyte it announced, with today's JSON refusal, and
// the refusal is counted by kind in /stats.
func TestSlackRefusedBeforeBody(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	be := startBackend(t, `{}`)
	s := startInbound(t, f, be, nil)
	now := time.Now()
	body := []byte(messageEvent("Ev0EARLY01", "<@U0BOT0001> ping"))
	good := events.Sign(inboundSecret, now.Unix(), body)
	for _, tc := range []struct {
		name, path, ts, sig, want, counter string
	}{
		{"unsigned event", "/api/v1/slack/event", "", "", "missing Slack request signature", "missing_signature"},
		{"unsigned interactive", "/api/v1/chat/interactive", "", "", "missing Slack request signature", "missing_signature"},
		{"timestamp only", "/api/v1/slack/event", fmt.Sprint(now.Unix()), "", "missing Slack request signature", "missing_signature"},
		{"timestamp not a number", "/api/v1/slack/event", "yesterday", good, "bad X-Slack-Request-Timestamp", "bad_timestamp"},
		{"old timestamp", "/api/v1/slack/event", fmt.Sprint(now.Add(-6 * time.Minute).Unix()), good, "X-Slack-Request-Timestamp is outside the allowed window", "stale_timestamp"},
		{"future timestamp", "/api/v1/chat/slash_command", fmt.Sprint(now.Add(6 * time.Minute).Unix()), good, "X-Slack-Request-Timestamp is outside the allowed window", "stale_timestamp"},
		{"signature version", "/api/v1/slack/event", fmt.Sprint(now.Unix()), "v1=" + good[3:], "unsupported signature version", "bad_signature"},
		{"signature not hex", "/api/v1/slack/interactive", fmt.Sprint(now.Unix()), "v0=" + strings.Repeat("z", 64), "invalid signature", "bad_signature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := rawSlackRequest(t, s.GatewayAddr, tc.path, 1<<20-1, nil, map[string]string{
				"Content-Type": "application/json", "X-Slack-Request-Timestamp": tc.ts, "X-Slack-Signature": tc.sig})
			resp, raw := readRawResponse(t, conn)
			var m map[string]any
			if err := json.Unmarshal(raw, &m); err != nil || resp.StatusCode != 401 || m["error"] != tc.want || m["status"] != "failure" {
				t.Fatalf("answer %d %s, want 401 {error: %q, status: failure}", resp.StatusCode, raw, tc.want)
			}
			if !resp.Close {
				t.Error("the connection stays open: the server would read the body to reuse it")
			}
		})
	}
	stats := string(s.admin("/stats?filter=http.ingress.slack.refused").body)
	for _, line := range []string{"refused.missing_signature: 3", "refused.bad_timestamp: 1", "refused.stale_timestamp: 2", "refused.bad_signature: 2"} {
		if !strings.Contains(stats, "http.ingress.slack."+line) {
			t.Errorf("stats lack %q:\n%s", line, stats)
		}
	}
	if n := len(be.calls()); n != 0 {
		t.Errorf("refused requests reached the backend %d times", n)
	}
}

// TestSlackUnverifiedBodiesBounded: with every slot for unverified bodies taken by clients that hold
// their bodies back, the next Slack request gets 503 with Retry-After at once (not a read of its
// body); once those bodies arrive and are answered, requests are served again.
func TestSlackUnverifiedBodiesBounded(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	be := startBackend(t, `{}`)
	s := startInbound(t, f, be, func(c *stack.Config) { c.Gateway.SlackMaxUnverifiedInFlight = 2 })
	slow := make([]net.Conn, 2)
	bodies := make([][]byte, 2)
	for i := range slow {
		bodies[i] = []byte(messageEvent(fmt.Sprint("Ev0SLOW00", i), "<@U0BOT0001> ping"))
		// Half the body now, the rest when the test says: the gateway holds a slot meanwhile.
		half := len(bodies[i]) / 2
		slow[i] = rawSlackRequest(t, s.GatewayAddr, "/api/v1/slack/event", len(bodies[i]), bodies[i][:half],
			slackHeaders("application/json", inboundSecret, time.Now(), bodies[i]))
	}
	testwait.Until(t, "both slow bodies to hold a slot", func() bool {
		return strings.Contains(string(s.admin("/stats?filter=http.ingress.slack.unverified_in_flight").body), "unverified_in_flight: 2")
	})
	third := []byte(messageEvent("Ev0THIRD01", "<@U0BOT0001> ping"))
	conn := rawSlackRequest(t, s.GatewayAddr, "/api/v1/slack/event", len(third), nil, slackHeaders("application/json", inboundSecret, time.Now(), third))
	resp, raw := readRawResponse(t, conn)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || m["status"] != "failure" || m["error"] == nil {
		t.Fatalf("third request: %d %v %s, want 503 with Retry-After and a JSON refusal", resp.StatusCode, resp.Header, raw)
	}
	for i, c := range slow {
		if _, err := c.Write(bodies[i][len(bodies[i])/2:]); err != nil {
			t.Fatal(err)
		}
		if resp, raw := readRawResponse(t, c); resp.StatusCode != 200 {
			t.Fatalf("slow request %d: %d %s", i, resp.StatusCode, raw)
		}
	}
	s.slackPost("/api/v1/slack/event", "application/json", string(third), inboundSecret, time.Now(), 0).must(t, 200)
	// The three events reach the backend: nothing is left for a dispatcher when the test ends.
	testwait.Until(t, "the three events at the backend", func() bool { return len(be.calls()) == 3 })
	if stats := string(s.admin("/stats?filter=http.ingress.slack").body); !strings.Contains(stats, "http.ingress.slack.refused.overloaded: 1") ||
		!strings.Contains(stats, "http.ingress.slack.unverified_in_flight: 0") {
		t.Errorf("stats:\n%s", stats)
	}
}

// TestSlackUnsignedBodies: without the legacy token mode, only Slack's certificate check is read
// unsigned (up to 1 KiB); with it, an app without a signing secret is verified by the token in its
// body, read within the same cap and slots.
func TestSlackUnsignedBodies(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	be := startBackend(t, `{}`)
	creds := chat.Credentials(func(name string) string {
		if name == "CREDENTIALS_SLACK_VERIFICATION_TOKEN_A0LONELY1" {
			return "legacy-token"
		}
		return inboundCreds(name)
	})
	event := strings.Replace(strings.Replace(messageEvent("Ev0TOKEN01", "hello"), `"token":"legacy"`, `"token":"legacy-token"`, 1), "A0PING001", "A0LONELY1", 1)
	unsigned := http.Header{"Content-Type": {"application/json"}, "Authorization": {""}}
	t.Run("token mode off", func(t *testing.T) {
		s := startInbound(t, f, be, func(c *stack.Config) { c.Chat.Credentials = creds })
		if r := s.do("POST", s.rest+"/api/v1/slack/event", event, unsigned); r.code != 401 {
			t.Errorf("unsigned event: %d %s, want 401", r.code, r.body)
		}
		form := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "Authorization": {""}}
		if r := s.do("POST", s.rest+"/api/v1/slack/slash_command", "ssl_check=1&token=legacy", form); r.code != 200 {
			t.Errorf("ssl_check: %d %s, want 200", r.code, r.body)
		}
		big := "ssl_check=1&token=legacy&pad=" + strings.Repeat("x", 2<<10)
		if r := s.do("POST", s.rest+"/api/v1/slack/slash_command", big, form); r.code != 413 {
			t.Errorf("unsigned 2 KiB slash command: %d %s, want 413", r.code, r.body)
		}
	})
	t.Run("token mode on", func(t *testing.T) {
		s := startInbound(t, f, be, func(c *stack.Config) {
			c.Chat.Credentials = creds
			c.Chat.Inbound.AllowVerificationToken = true
		})
		padded := strings.Replace(event, `"type":"event_callback"`, `"type":"event_callback","pad":"`+strings.Repeat("x", 4<<10)+`"`, 1)
		if m := s.do("POST", s.rest+"/api/v1/slack/event", padded, unsigned).must(t, 200); m["status"] != "success" {
			t.Errorf("event with its verification token: %v", m)
		}
		if r := s.do("POST", s.rest+"/api/v1/slack/event", strings.Replace(event, "legacy-token", "forged", 1), unsigned); r.code != 401 {
			t.Errorf("wrong token: %d %s, want 401", r.code, r.body)
		}
	})
}

// lockedBuffer is a log sink tests count the bytes of.
type lockedBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines []int // length of each write (zap writes one line at a time)
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, len(p))
	return b.buf.Write(p)
}

func (b *lockedBuffer) Sync() error { return nil }

func (b *lockedBuffer) stats() (total, longest, lines int, text string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range b.lines {
		longest = max(longest, n)
	}
	return b.buf.Len(), longest, len(b.lines), b.buf.String()
}

// TestSlackRefusalLogBounded: 1,000 refused unauthenticated Slack requests with 32 KB user agents
// (the header limit is 64 KiB), 200 of them read and refused by the chat service with a 500 KB app id
// (and a 1 KB team id) write lines of under 1 KB, and a total bounded by
// the sampling rate (not by their number or size): values are cut and repeated refusals sampled,
// counted in /stats instead.
func TestSlackRefusalLogBounded(t *testing.T) {
	sink := &lockedBuffer{}
	logger := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), sink, zapcore.InfoLevel))
	f := slacktest.StartWorkspace(t)
	be := startBackend(t, `{}`)
	chatFile := filepath.Join(t.TempDir(), "chat.yaml")
	if err := os.WriteFile(chatFile, []byte(chatTeams+chatACL+inboundHandlers(be.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startStackLogged(t, func(c *stack.Config) {
		c.Chat.ConfigFile = chatFile
		c.Chat.SlackAPIURL = f.APIURL()
		c.Chat.Credentials = inboundCreds
		c.Chat.RefreshInterval = -1
	}, logger)
	// Only what the requests write counts, not the startup lines.
	sink.mu.Lock()
	sink.buf.Reset()
	sink.lines = nil
	sink.mu.Unlock()

	huge := strings.Repeat("A", 500<<10)
	// The team id is checked (and would be logged) only after the app's signature: the app id is the
	// value a refusal logs. Two 500 KB values would only make the test slower.
	body, _ := json.Marshal(map[string]any{"api_app_id": huge, "team_id": "T" + huge[:1000], "type": "event_callback", "event_id": "Ev0FLOOD01",
		"event": map[string]any{"type": "message", "text": "x"}})
	interactive := url.Values{"payload": {string(body)}}.Encode()
	ua := strings.Repeat("U", 32<<10) // below the 64 KiB header limit
	const requests = 1000
	start := time.Now()
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				now := time.Now()
				var req *http.Request
				// One in ten is read and refused by the chat service (the forged app id is what it
				// logs); the others are refused before their body, on their headers. (Every read
				// 500 KB body costs the race detector a tenth of a second.)
				switch i % 10 {
				case 0:
					req, _ = http.NewRequest("POST", s.rest+"/api/v1/slack/event", bytes.NewReader(body))
					req.Header.Set("X-Slack-Signature", events.Sign("not-the-secret", now.Unix(), body))
				case 1:
					req, _ = http.NewRequest("POST", s.rest+"/api/v1/slack/interactive", strings.NewReader(interactive))
					req.Header.Set("X-Slack-Signature", events.Sign("not-the-secret", now.Unix(), []byte(interactive)))
				case 2, 3, 4, 5: // no signature (the body would not be read: TestSlackRefusedBeforeBody)
					req, _ = http.NewRequest("POST", s.rest+"/api/v1/slack/event", strings.NewReader("{}"))
				default: // stale
					req, _ = http.NewRequest("POST", s.rest+"/api/v1/slack/event", strings.NewReader("{}"))
					req.Header.Set("X-Slack-Signature", "v0="+strings.Repeat("0", 64))
					now = now.Add(-time.Hour)
				}
				if i%10 < 2 || i%10 > 5 {
					req.Header.Set("X-Slack-Request-Timestamp", fmt.Sprint(now.Unix()))
				}
				req.Header.Set("User-Agent", ua)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					t.Errorf("request %d: %v", i, err)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != 401 {
					t.Errorf("request %d: %d, want 401", i, resp.StatusCode)
				}
			}
		}()
	}
	for i := range requests {
		work <- i
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)
	total, longest, lines, text := sink.stats()
	t.Logf("%d refused requests in %v wrote %d log lines, %d bytes, the longest %d bytes", requests, elapsed, lines, total, longest)
	if longest >= 1024 {
		t.Errorf("a log line of %d bytes", longest)
	}
	// Sampling bounds the lines by time, not by requests: per interval, the first few of each kind of
	// refusal (three at the gateway, two in the chat service, one gRPC code) and a summary line each.
	intervals := int(elapsed/logging.DefaultSampleInterval) + 2
	if allowed := intervals * 6 * (logging.DefaultSampleFirst + 1); lines > allowed {
		t.Errorf("%d log lines for %d refused requests in %v, want at most %d (sampled)", lines, requests, elapsed, allowed)
	}
	if strings.Contains(text, strings.Repeat("A", 100)) || strings.Contains(text, strings.Repeat("U", 100)) {
		t.Error("a forged value reached the log uncut")
	}
	stats := string(s.admin("/stats?filter=http.ingress.slack.refused").body)
	for _, line := range []string{"refused.bad_signature: 200", "refused.missing_signature: 400", "refused.stale_timestamp: 400"} {
		if !strings.Contains(stats, "http.ingress.slack."+line) {
			t.Errorf("stats lack %q:\n%s", line, stats)
		}
	}
}

// TestInboundInteractiveReplayOnce: a signed synchronous interactive request sent again within the
// replay window (a replay, or Slack resending it) reaches the backend once; the repeat still gets
// the 200 Slack expects (empty: nothing to change). The deduplication survives a restart of the stack
// on the same data folder, as an event's does.
func TestInboundInteractiveReplayOnce(t *testing.T) {
	f := slacktest.StartWorkspace(t)
	be := startBackend(t, `{"text":"approved"}`)
	dir := t.TempDir()
	mutate := func(c *stack.Config) { c.DataDir = dir }
	s := startInbound(t, f, be, mutate)
	payload, _ := json.Marshal(map[string]any{"type": "block_actions", "api_app_id": "A0PING001", "trigger_id": "13345224609.738474920.replay0001",
		"team": map[string]any{"id": "T0FAKE001"}, "user": map[string]any{"id": "U0ALICE01"}, "channel": map[string]any{"id": "C0GENERAL"},
		"actions": []any{map[string]any{"block_id": "approve", "action_id": "ok", "value": "yes"}}, "response_url": be.URL + "/response"})
	body := url.Values{"payload": {string(payload)}}.Encode()
	signedAt := time.Now()
	if m := s.slackPost("/api/v1/slack/interactive", "application/x-www-form-urlencoded", body, inboundSecret, signedAt, 0).must(t, 200); m["text"] != "approved" {
		t.Fatalf("first request answered %v", m)
	}
	// The replay: the same bytes and signature, and again signed a moment later.
	for _, at := range []time.Time{signedAt, time.Now()} {
		r := s.slackPost("/api/v1/chat/interactive", "application/x-www-form-urlencoded", body, inboundSecret, at, 0)
		if r.code != 200 || len(bytes.TrimSpace(r.body)) != 0 {
			t.Fatalf("replay: %d %q, want an empty 200", r.code, r.body)
		}
	}
	if n := len(be.calls()); n != 1 {
		t.Fatalf("backend called %d times, want 1", n)
	}
	if st := string(s.admin("/stats?filter=chat.inbound.interactive_component").body); !strings.Contains(st, "chat.inbound.interactive_component.duplicate: 2") {
		t.Errorf("stats:\n%s", st)
	}
	s.stop()
	s2 := startInbound(t, f, be, mutate)
	if r := s2.slackPost("/api/v1/slack/interactive", "application/x-www-form-urlencoded", body, inboundSecret, time.Now(), 0); r.code != 200 {
		t.Fatalf("replay after a restart: %d %s", r.code, r.body)
	}
	if n := len(be.calls()); n != 1 {
		t.Fatalf("after a restart, backend called %d times, want 1", n)
	}
	// Another click (another trigger) is another request.
	other := strings.Replace(body, "replay0001", "replay0002", 1)
	if m := s2.slackPost("/api/v1/slack/interactive", "application/x-www-form-urlencoded", other, inboundSecret, time.Now(), 0).must(t, 200); m["text"] != "approved" {
		t.Fatalf("a new click answered %v", m)
	}
	if n := len(be.calls()); n != 2 {
		t.Fatalf("backend called %d times after a new click, want 2", n)
	}
}
