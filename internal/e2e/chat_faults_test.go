package e2e

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/gateway/upstream"
	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/internal/stacktest"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/testwait"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// chatFaultClient waits far less than the gateway's upstream timeout in the cases where Slack's
// failure must be answered fast: an answer at all means the chat service did not sit out a long
// Retry-After, a hanging Slack or the whole deadline.
// It shares the suite client's transport, whose idle connections leakCheck closes.
var chatFaultClient = &http.Client{Timeout: 20 * time.Second, Transport: client.Transport}

// chatFault sends one chat request as echobot through chatFaultClient.
func (s *testStack) chatFault(t *testing.T, method, path, body string) response {
	t.Helper()
	req, err := http.NewRequest(method, s.rest+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Proxy-Downstream-Service-Cluster", "echobot")
	resp, err := chatFaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: no answer within the client's timeout, well under the gateway's deadline: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return response{code: resp.StatusCode, header: resp.Header, body: data}
}

// jsonError checks an error answer: the status, a JSON content type, and an object with a message
// (Slack's own body, {"ok":false,"error":...}, for a rate-limited action).
func jsonError(t *testing.T, what string, r response, code int) string {
	t.Helper()
	var m map[string]any
	if r.code != code || json.Unmarshal(r.body, &m) != nil || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
		t.Fatalf("%s: %d %q %s, want a JSON %d", what, r.code, r.header.Get("Content-Type"), r.body, code)
	}
	msg, _ := m["error"].(string)
	if msg == "" {
		t.Fatalf("%s: no error message in %s", what, r.body)
	}
	return msg
}

// saysNotOK fails the test unless r's JSON body has "ok": false, as the action routes' 400, 429 and
// 5xx answers do, Slack-shaped.
func saysNotOK(t *testing.T, what string, r response) {
	t.Helper()
	var m map[string]any
	if json.Unmarshal(r.body, &m) != nil || m["ok"] != false {
		t.Errorf("%s: %d %s, want \"ok\": false", what, r.code, r.body)
	}
}

const (
	chatAction    = "/api/v2/chat/action/acme/pingbot"
	chatAuthTest  = `{"action":"auth.test","kwargs":{}}`
	chatLookup    = "/api/v1/chat/get_user/acme/pingbot/bob@example.com" // not cached: users.lookupByEmail
	chatChannelID = "/api/v1/chat/get_channel/acme/pingbot/C0GENERAL"    // not cached: conversations.info
)

// TestChatSlackFaults drives each kind of Slack failure through the gateway against one chat host:
// a clear JSON 429, 502 or 504 as the README's chat section documents, answered within the request's
// deadline (long before it where nothing needs waiting out), a bounded number of Slack calls, recovery
// once the fault clears, and no goroutine left behind.
func TestChatSlackFaults(t *testing.T) { forEachSpelling(t, testChatSlackFaults) }

func testChatSlackFaults(t *testing.T, sp pathSpelling) {
	// run starts a chat stack on fake Slack with the attempt and retry settings of the case, runs it,
	// stops everything and checks for leaks.
	run := func(t *testing.T, mutate func(*stack.Config), body func(t *testing.T, f *slacktest.Server, s *testStack)) {
		leaked := leakCheck(t)
		f := slacktest.StartWorkspace(t)
		s := startChat(t, f, chatTeams+chatACL, func(c *stack.Config) {
			c.Gateway.UpstreamTimeout = 50 * time.Second
			c.Chat.SlackAttemptTimeout = 300 * time.Millisecond
			c.Chat.SlackRetries = 2
			c.Chat.SlackMaxRetryAfter = 2 * time.Second
			if mutate != nil {
				mutate(c)
			}
		})
		body(t, f, s)
		s.stop()
		f.Close()
		leaked()
	}
	recovered := func(t *testing.T, s *testStack) {
		t.Helper()
		if r := s.chatFault(t, "POST", sp(chatAction), chatAuthTest); r.code != 200 || !strings.Contains(string(r.body), `"ok":true`) {
			t.Fatalf("action after the fault cleared: %d %s", r.code, r.body)
		}
		s.chatFault(t, "GET", sp(chatLookup), "").must(t, 200)
		s.chatFault(t, "GET", sp(chatChannelID), "").must(t, 200)
	}

	t.Run("rate limited with a long Retry-After", func(t *testing.T) {
		run(t, nil, func(t *testing.T, f *slacktest.Server, s *testStack) {
			// 3 s is over -chat-slack-max-retry-after (2 s): not waited out.
			for _, m := range []string{"auth.test", "users.lookupByEmail", "conversations.info"} {
				f.Inject(m, slacktest.Fault{Status: 429, RetryAfter: 3})
			}
			limited := time.Now()
			r := s.chatFault(t, "POST", sp(chatAction), chatAuthTest)
			if msg := jsonError(t, "action", r, 429); msg != "ratelimited" || r.header.Get("Retry-After") != "3" {
				t.Errorf("action: error %q Retry-After %q, want Slack's ratelimited and 3", msg, r.header.Get("Retry-After"))
			}
			for _, p := range []string{sp(chatLookup), sp(chatChannelID)} {
				r := s.chatFault(t, "GET", p, "")
				jsonError(t, p, r, 429)
				if r.header.Get("Retry-After") != "3" {
					t.Errorf("%s: Retry-After %q, want 3 passed on", p, r.header.Get("Retry-After"))
				}
			}
			// Within Slack's window the same requests answer 429 with the time left, without calling
			// Slack: the window is shared by every request of the bot's token and method.
			calls := len(f.Requests(""))
			for _, tc := range []struct{ method, path, body string }{{"POST", chatAction, chatAuthTest}, {"GET", chatLookup, ""}, {"GET", chatChannelID, ""}} {
				r := s.chatFault(t, tc.method, tc.path, tc.body)
				jsonError(t, tc.path, r, 429)
				if ra := r.header.Get("Retry-After"); ra != "1" && ra != "2" && ra != "3" {
					t.Errorf("%s within the window: Retry-After %q, want the seconds left", tc.path, ra)
				}
			}
			if n := len(f.Requests("")); n != calls {
				t.Errorf("requests within the window made %d Slack calls, want none", n-calls)
			}
			// A Retry-After over the limit is not waited out, so it is not retried either.
			if n := len(f.Requests("auth.test")); n != 1 {
				t.Errorf("a long rate limit made %d calls to Slack, want 1", n)
			}
			f.ClearFaults()
			time.Sleep(time.Until(limited.Add(3100 * time.Millisecond))) // the window ends
			recovered(t, s)
		})
	})

	t.Run("5xx on every call", func(t *testing.T) {
		run(t, nil, func(t *testing.T, f *slacktest.Server, s *testStack) {
			for _, m := range []string{"auth.test", "users.lookupByEmail", "conversations.info"} {
				f.Inject(m, slacktest.Fault{Status: 503})
			}
			for _, tc := range []struct{ method, path, body string }{{"POST", sp(chatAction), chatAuthTest}, {"GET", sp(chatLookup), ""}, {"GET", sp(chatChannelID), ""}} {
				r := s.chatFault(t, tc.method, tc.path, tc.body)
				if msg := jsonError(t, tc.path, r, 502); msg != "slack unavailable, try again later" {
					t.Errorf("%s: %q", tc.path, msg)
				}
				if tc.method == "POST" {
					saysNotOK(t, tc.path, r) // the action route's 502 is Slack-shaped (before: no "ok")
				}
			}
			// Retries are bounded: the first call and -chat-slack-retries more, per request.
			if n := len(f.Requests("auth.test")); n != 3 {
				t.Errorf("a failing Slack was called %d times for one action, want 1 + 2 retries", n)
			}
			f.ClearFaults()
			recovered(t, s)
		})
	})

	t.Run("answers slower than the attempt timeout", func(t *testing.T) {
		run(t, nil, func(t *testing.T, f *slacktest.Server, s *testStack) {
			for _, m := range []string{"auth.test", "users.lookupByEmail", "conversations.info"} {
				f.Inject(m, slacktest.Fault{Delay: time.Hour})
			}
			// Each attempt gives up after 300 ms and is retried; with the retries spent the answer is a
			// 502, long before the gateway's 50 s deadline.
			for _, tc := range []struct{ method, path, body string }{{"POST", sp(chatAction), chatAuthTest}, {"GET", sp(chatLookup), ""}, {"GET", sp(chatChannelID), ""}} {
				jsonError(t, tc.path, s.chatFault(t, tc.method, tc.path, tc.body), 502)
			}
			f.ClearFaults()
			recovered(t, s)
		})
	})

	t.Run("no answer within the request deadline", func(t *testing.T) {
		run(t, func(c *stack.Config) {
			c.Gateway.UpstreamTimeout = time.Second
			c.Chat.SlackAttemptTimeout = time.Hour
		}, func(t *testing.T, f *slacktest.Server, s *testStack) {
			for _, m := range []string{"auth.test", "users.lookupByEmail", "conversations.info"} {
				f.Inject(m, slacktest.Fault{Delay: time.Hour})
			}
			for _, tc := range []struct{ method, path, body string }{{"POST", sp(chatAction), chatAuthTest}, {"GET", sp(chatLookup), ""}, {"GET", sp(chatChannelID), ""}} {
				r := s.chatFault(t, tc.method, tc.path, tc.body)
				jsonError(t, tc.path, r, 504)
				if tc.method == "POST" {
					saysNotOK(t, tc.path, r) // the action route's 504 too
				} else if strings.Contains(string(r.body), `"ok"`) {
					t.Errorf("%s: %s; a lookup's error has no \"ok\"", tc.path, r.body)
				}
			}
			f.ClearFaults()
			recovered(t, s)
		})
	})

	t.Run("unreachable", func(t *testing.T) {
		// Slack's address refuses connections until a front to the fake starts listening on it.
		addr := freeAddr(t)
		run(t, func(c *stack.Config) { c.Chat.SlackAPIURL = "http://" + addr + "/" }, func(t *testing.T, f *slacktest.Server, s *testStack) {
			for _, tc := range []struct{ method, path, body string }{{"POST", sp(chatAction), chatAuthTest}, {"GET", sp(chatLookup), ""}, {"GET", sp(chatChannelID), ""}} {
				msg := jsonError(t, tc.path, s.chatFault(t, tc.method, tc.path, tc.body), 502)
				if msg != "slack unavailable, try again later" || strings.Contains(msg, addr) {
					t.Errorf("%s: %q should be clear and not name Slack's address", tc.path, msg)
				}
			}
			lis, err := net.Listen("tcp", addr)
			if err != nil {
				t.Skipf("the freed port was taken meanwhile: %v", err)
			}
			u, _ := url.Parse(f.URL)
			proxy := httputil.NewSingleHostReverseProxy(u)
			transport := &http.Transport{}
			proxy.Transport = transport
			front := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
			go func() { _ = front.Serve(lis) }()
			recovered(t, s)
			s.stop()
			_ = front.Close()
			transport.CloseIdleConnections()
		})
	})
}

// slackChatHost starts a chat-only host on fake Slack f with the suite's chat configuration.
func slackChatHost(t *testing.T, f *slacktest.Server) (addr string, stop func()) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "chat.yaml")
	if err := os.WriteFile(file, []byte(chatTeams+chatACL), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := stacktest.Config(t)
	cfg.Target = stack.RoleChat
	cfg.Chat.ConfigFile = file
	cfg.Chat.SlackAPIURL = f.APIURL()
	cfg.Chat.Credentials = chatCreds
	cfg.Chat.RefreshInterval = -1
	cfg.Chat.SlackAttemptTimeout = 300 * time.Millisecond
	cfg.Chat.SlackRetries = 1
	cfg.InternalTLS.Dir = testTLSDir(t)
	st := stacktest.Start(t, cfg, stacktest.Logger(logtest.New(t).Named("chat")))
	stop = func() {
		if err := st.Stop(); err != nil {
			t.Errorf("chat host did not stop cleanly: %v", err)
		}
	}
	return st.ChatAddr, stop
}

// TestChatSlowReplica runs two chat hosts behind one gateway, each on its own fake Slack, and makes
// one host's Slack hang. The slow host answers 502 once its attempts time out; outlier detection
// ejects it after consecutive failures, so the errors are bounded by the ejections (the host keeps
// passing health checks: its gRPC server is fine) while the other host serves. When the fault clears,
// the slow host serves again. Nothing leaks.
func TestChatSlowReplica(t *testing.T) { forEachSpelling(t, testChatSlowReplica) }

func testChatSlowReplica(t *testing.T, sp pathSpelling) {
	leaked := leakCheck(t)
	fastSlack, slowSlack := slacktest.StartWorkspace(t), slacktest.StartWorkspace(t)
	fastAddr, stopFast := slackChatHost(t, fastSlack)
	slowAddr, stopSlow := slackChatHost(t, slowSlack)
	const consecutive = 2
	s := startStack(t, func(c *stack.Config) {
		c.Target = "secrets,gateway"
		c.Gateway.ChatUpstream = fastAddr + "," + slowAddr
		c.Gateway.UpstreamTimeout = 50 * time.Second
		c.Gateway.HealthCheck.Interval = 100 * time.Millisecond
		c.Gateway.HealthCheck.Timeout = time.Second
		// Short ejections so the slow host is tried again during the test (each return costs at most
		// `consecutive` more errors) and comes back quickly once healthy; 50% lets one of two go.
		c.Gateway.Outlier = upstream.OutlierConfig{ConsecutiveFailures: consecutive, Interval: 100 * time.Millisecond,
			BaseEjectionTime: time.Second, MaxEjectionTime: time.Second, MaxEjectionPercent: 50}
	})
	for _, addr := range []string{fastAddr, slowAddr} {
		testwait.Until(t, addr+" healthy", func() bool { return s.hostLines("chat", addr)["health_flags"] == "healthy" })
	}

	slowSlack.Inject("auth.test", slacktest.Fault{Delay: time.Hour})
	const requests = 30
	var ok, failed int
	for range requests {
		r := s.chatFault(t, "POST", sp(chatAction), chatAuthTest)
		switch r.code {
		case 200:
			ok++
		case 502, 504:
			jsonError(t, "slow host", r, r.code)
			failed++
		default:
			t.Fatalf("with one slow host: %d %s", r.code, r.body)
		}
	}
	ejections := s.stat("cluster.chat.outlier_detection.ejections_enforced_total")
	if failed == 0 || ejections == 0 {
		t.Fatalf("%d failures and %d ejections: the slow host was never tried or never ejected", failed, ejections)
	}
	// Every ejection was earned by `consecutive` failures, and each return from an ejection may cost
	// up to that many again before the next one.
	if bound := consecutive * (int(ejections) + 1); failed > bound {
		t.Errorf("%d of %d requests failed with %d ejections, want at most %d", failed, requests, ejections, bound)
	}
	if n := len(fastSlack.Requests("auth.test")); n != ok {
		t.Errorf("%d requests succeeded but the healthy host's Slack saw %d calls", ok, n)
	}
	t.Logf("one slow host: %d of %d requests succeeded, %d failed, %d ejections", ok, requests, failed, ejections)

	// The fault clears: the slow host serves again once its ejection ends.
	slowSlack.ClearFaults()
	slowSlack.Reset()
	testwait.Until(t, "the slow host serving again", func() bool {
		if r := s.chatFault(t, "POST", sp(chatAction), chatAuthTest); r.code != 200 {
			return false
		}
		return len(slowSlack.Requests("auth.test")) > 0
	})
	for range 10 {
		s.chatFault(t, "POST", sp(chatAction), chatAuthTest).must(t, 200)
	}

	s.stop()
	stopFast()
	stopSlow()
	fastSlack.Close()
	slowSlack.Close()
	leaked()
}
