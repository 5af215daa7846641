package chaos

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/internal/stacktest"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// envSoakDuration selects the soak's length (make soak sets it; the default is the short form).
const envSoakDuration = "GANTRY_SOAK_DURATION"

// sample is one reading of the process during the soak.
type sample struct {
	at         time.Duration
	heapInuse  uint64
	goroutines int
	requests   int64
	chat       int64
	errors     int64
}

// soakChatConfig configures one team and bot on the fake Slack and lets the internal caller soak
// through every chat route.
const soakChatConfig = `
teams: {acme: T0FAKE001}
bots: {acme: {pingbot: A0PING001}}
primary_bot: {acme: pingbot}
authorization:
  checks:
    - module: "omnibot.authnz.envoy_checks:envoy_internal_check"
    - module: "omnibot.authnz.envoy_checks:envoy_permissions_check"
  permissions:
    all: {methods: [GET, POST], paths: ["/api/v1/chat/", "/api/v2/chat/"]}
  bindings:
    "soak$": [all]
`

// TestSoak runs mixed load (credential reads with values, listings, updates, service reads by the
// service itself, admin scrapes of /stats, /clusters and /stats/prometheus, chat actions and lookups
// on a fake Slack whose cache the chat service refreshes every second) against an in-process stack,
// sampling heap in use and goroutines every few seconds. It fails on any unexpected answer or an
// obvious growth trend (the last third's average more than twice the first third's, by a margin that
// rules out noise), never on a latency. GANTRY_SOAK_DURATION sets its length (make soak: 10m).
func TestSoak(t *testing.T) {
	duration := 4 * time.Second
	if testing.Short() {
		duration = 2 * time.Second
	}
	if v := os.Getenv(envSoakDuration); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q is not a positive duration", envSoakDuration, v)
		}
		duration = d
	}
	every := min(max(duration/30, 500*time.Millisecond), 10*time.Second)

	dataDir := filepath.Join(t.TempDir(), "data")
	slack := slacktest.StartWorkspace(t)
	chatFile := filepath.Join(t.TempDir(), "chat.yaml")
	if err := os.WriteFile(chatFile, []byte(soakChatConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := loopbackConfig(t, dataDir)
	cfg.Chat.ConfigFile = chatFile
	cfg.Chat.SlackAPIURL = slack.APIURL()
	cfg.Chat.Credentials = func(name string) string {
		return map[string]string{"CREDENTIALS_SLACK_OAUTH_BOT_TOKEN_A0PING001": "xoxb-soak"}[name]
	}
	// The background refresh runs all through the soak, beside the read-through lookups.
	cfg.Chat.RefreshInterval = time.Second
	st := stacktest.Start(t, cfg, stacktest.Logger(zap.NewNop()))
	rest, adm := "http://"+st.GatewayAddr, "http://"+st.AdminAddr
	user := userAuth(t, dataDir)
	chatCaller := http.Header{"X-Proxy-Downstream-Service-Cluster": {"soak"}}

	const credentials = 8
	ids := make([]string, credentials)
	for i := range ids {
		r := request(t, rest, user, "POST", "/v1/credentials", map[string]any{"name": fmt.Sprintf("soak-%d", i),
			"documentation": "soak", "credential_pairs": map[string]any{fmt.Sprintf("password_%d", i): "initial"}})
		if r.code != 200 {
			t.Fatalf("create: %d %s", r.code, r.body)
		}
		ids[i] = r.json["id"].(string)
	}
	if r := request(t, rest, user, "PUT", "/v1/services/soak-svc", map[string]any{"credentials": ids[:4]}); r.code != 200 {
		t.Fatalf("service: %d %s", r.code, r.body)
	}
	service := "Basic " + base64.StdEncoding.EncodeToString([]byte("2/service/soak-svc:"+mintToken(t, dataDir, "soak-svc", "service")))

	var requests, chatRequests, errorCount atomic.Int64
	var firstErr sync.Once
	fail := func(format string, args ...any) {
		errorCount.Add(1)
		firstErr.Do(func() { t.Errorf(format, args...) })
	}
	// call is request for the workers: a transport error counts as an error (Fatal is for the test goroutine).
	call := func(base, auth, method, path string, body any) reply {
		x, err := tryRequest(base, auth, method, path, body)
		if err != nil {
			fail("%s %s: %v", method, path, err)
			return reply{code: -1}
		}
		return x
	}
	// Each worker repeats one kind of operation; together they mix reads, writes and scrapes.
	ops := []func(r *rand.Rand){
		func(r *rand.Rand) { // read with values
			if x := call(rest, user, "GET", "/v1/credentials/"+ids[r.IntN(credentials)], nil); x.code != 200 && x.code != -1 {
				fail("read: %d %s", x.code, x.body)
			}
		},
		func(r *rand.Rand) { // list
			if x := call(rest, user, "GET", "/v1/credentials?limit=5", nil); x.code != 200 && x.code != -1 {
				fail("list: %d %s", x.code, x.body)
			}
		},
		func(r *rand.Rand) { // update
			i := r.IntN(credentials)
			x := call(rest, user, "PUT", "/v1/credentials/"+ids[i],
				map[string]any{"credential_pairs": map[string]any{fmt.Sprintf("password_%d", i): fmt.Sprintf("v%d", r.Int())}})
			if x.code != 200 && x.code != -1 { // concurrent writers of one credential queue: no 409
				fail("update: %d %s", x.code, x.body)
			}
		},
		func(r *rand.Rand) { // the service reads its credentials
			if x := call(rest, service, "GET", "/v1/services/soak-svc", nil); x.code != 200 && x.code != -1 {
				fail("service read: %d %s", x.code, x.body)
			}
		},
		func(r *rand.Rand) { // chat actions, passed through to Slack
			body := map[string]any{"action": "chat.postMessage", "kwargs": map[string]any{"channel": "C0GENERAL", "text": fmt.Sprintf("@alice #general %d", r.Int()),
				"omnibot_parse": map[string]any{"text": []string{"users", "channels"}}}}
			x, err := tryRequestHeader(rest, chatCaller, "POST", "/api/v2/chat/action/acme/pingbot", body)
			chatRequests.Add(1)
			// The mention is resolved from the cache, which the refresher replaces meanwhile: a
			// refresh must never leave a moment in which alice is unknown.
			if err != nil || x.code != 200 || !strings.Contains(string(x.body), `@U0ALICE01|`) {
				fail("chat action: %v %d %s", err, x.code, x.body)
			}
		},
		func(r *rand.Rand) { // chat lookups
			path := []string{"/api/v1/chat/get_user/acme/pingbot/alice@example.com", "/api/v1/chat/get_channel/acme/pingbot/general",
				"/api/v1/chat/get_ims/acme/pingbot", "/api/v1/chat/get_team/acme"}[r.IntN(4)]
			x, err := tryRequestHeader(rest, chatCaller, "GET", path, nil)
			chatRequests.Add(1)
			if err != nil || x.code != 200 {
				fail("chat %s: %v %d %s", path, err, x.code, x.body)
			}
		},
		func(r *rand.Rand) { // admin scrapes
			for _, p := range []string{"/stats", "/clusters", "/stats/prometheus"} {
				if x := call(adm, "", "GET", p, nil); x.code != 200 && x.code != -1 {
					fail("admin %s: %d", p, x.code)
				}
			}
		},
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, op := range ops {
		for w := range 2 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(i), uint64(w)))
				for {
					select {
					case <-stop:
						return
					default:
					}
					op(r)
					requests.Add(1)
				}
			})
		}
	}

	start := time.Now()
	var samples []sample
	read := func() {
		slack.Reset() // the fake records every call; the soak measures gantry, not the fake's log
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		samples = append(samples, sample{time.Since(start), ms.HeapInuse, runtime.NumGoroutine(), requests.Load(), chatRequests.Load(), errorCount.Load()})
	}
	for time.Since(start) < duration {
		time.Sleep(every)
		read()
	}
	close(stop)
	wg.Wait()

	var table strings.Builder
	fmt.Fprintf(&table, "soak: %v of mixed load, sampled every %v\n%10s %14s %11s %10s %8s %7s\n", duration, every, "elapsed", "heap_inuse_MiB", "goroutines", "requests", "chat", "errors")
	for _, s := range samples {
		fmt.Fprintf(&table, "%10s %14.1f %11d %10d %8d %7d\n", s.at.Round(100*time.Millisecond), float64(s.heapInuse)/(1<<20), s.goroutines, s.requests, s.chat, s.errors)
	}
	last := samples[len(samples)-1]
	fmt.Fprintf(&table, "soak: %d requests (%.0f/s), %d of them chat, %d errors\n", last.requests, float64(last.requests)/time.Since(start).Seconds(), last.chat, last.errors)
	if os.Getenv(envSoakDuration) != "" {
		fmt.Print(table.String())
	} else {
		t.Log(table.String())
	}

	if len(samples) >= 6 {
		third := len(samples) / 3
		avg := func(ss []sample, f func(sample) float64) float64 {
			sum := 0.0
			for _, s := range ss {
				sum += f(s)
			}
			return sum / float64(len(ss))
		}
		heap := func(s sample) float64 { return float64(s.heapInuse) }
		gr := func(s sample) float64 { return float64(s.goroutines) }
		first, end := samples[:third], samples[len(samples)-third:]
		if a, b := avg(first, heap), avg(end, heap); b > 2*a && b-a > 32<<20 {
			t.Errorf("heap in use grew from %.1f MiB (first third) to %.1f MiB (last third)", a/(1<<20), b/(1<<20))
		}
		if a, b := avg(first, gr), avg(end, gr); b > 2*a && b-a > 50 {
			t.Errorf("goroutines grew from %.0f (first third) to %.0f (last third)", a, b)
		}
	}
}
