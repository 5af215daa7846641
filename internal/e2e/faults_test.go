package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/freeport"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kms/kmstest"
	"github.com/gantry-dev/gantry/pkg/kmsauth"
	"github.com/gantry-dev/gantry/pkg/testwait"
)

// leakCheck records the goroutine count; the returned function, called once everything the test
// started has stopped, polls until the count is back (idle HTTP connections closed) and fails with
// every goroutine's stack when it stays above.
func leakCheck(t *testing.T) func() {
	t.Helper()
	client.CloseIdleConnections()
	before := runtime.NumGoroutine()
	return func() {
		t.Helper()
		client.CloseIdleConnections()
		deadline := time.Now().Add(15 * time.Second)
		for {
			now := runtime.NumGoroutine()
			if now <= before+2 { // slack for runtime and testing goroutines that come and go
				return
			}
			if time.Now().After(deadline) {
				var buf bytes.Buffer
				_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
				t.Fatalf("goroutine leak: %d before, %d after everything stopped\n%s", before, now, buf.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// freeAddr returns a loopback address nothing listens on (yet).
func freeAddr(t *testing.T) string {
	t.Helper()
	return freeport.Addr(t)
}

// TestSecretsReplicaDown runs the gateway and the secrets service as separate stacks: while the only
// secrets host is down the gateway answers a JSON 503 at once (not after its upstream timeout); when a
// replica comes up it serves again, and when it goes away it is 503 again. Nothing leaks.
func TestSecretsReplicaDown(t *testing.T) {
	leaked := leakCheck(t)
	secretsAddr := freeAddr(t)
	gw := startStack(t, func(c *stack.Config) {
		c.Target = "gateway"
		c.Gateway.SecretsUpstream = secretsAddr
		c.Gateway.ChatUpstream = freeAddr(t)
		c.Gateway.HealthCheck.Interval = 50 * time.Millisecond
		c.Gateway.HealthCheck.Timeout = 50 * time.Millisecond
		// An upstream timeout longer than the client's: an answer at all means it did not wait for it.
		c.Gateway.UpstreamTimeout = 50 * time.Second
		// The harness mints its default token from the data folder's keyring, which a gateway-only
		// process never creates.
		if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
			t.Fatal(err)
		}
	})
	quickClient := &http.Client{Timeout: 10 * time.Second}
	down := func(what string) {
		t.Helper()
		req, _ := http.NewRequest("GET", gw.rest+"/v1/value_generator", nil)
		req.Header.Set("Authorization", gw.asUser)
		resp, err := quickClient.Do(req)
		if err != nil {
			t.Fatalf("%s: the gateway did not answer while the replica was down: %v", what, err)
		}
		defer resp.Body.Close()
		var body bytes.Buffer
		_, _ = body.ReadFrom(resp.Body)
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body.String(), `"error"`) ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("%s: %d %s, want a JSON 503", what, resp.StatusCode, body.String())
		}
	}
	down("before any replica started")

	replica := startStack(t, func(c *stack.Config) {
		c.Target = "secrets"
		c.Secrets.Listen = secretsAddr
	})
	gw.asUser = replica.asUser // tokens of the replica's keyring: the secrets service authenticates
	testwait.Until(t, "the gateway to use the replica", func() bool { return gw.get("/v1/value_generator").code == 200 })

	replica.stop()
	testwait.Until(t, "the gateway to notice the replica is gone", func() bool { return gw.get("/v1/value_generator").code == 503 })
	down("after the replica stopped")
	gw.stop()
	leaked()
}

// kmsFront stands between gantry and the AWS KMS fake and can make the KMS misbehave: answer
// normally, reset every connection (unreachable), or hang until the client gives up.
type kmsFront struct {
	srv   *httptest.Server
	mode  atomic.Value // "up", "reset", "hang"
	close func()
}

func newKMSFront(t *testing.T, target string) *kmsFront {
	t.Helper()
	u, _ := url.Parse(target)
	proxy := httputil.NewSingleHostReverseProxy(u)
	f := &kmsFront{}
	f.mode.Store("up")
	closing := make(chan struct{})
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch f.mode.Load() {
		case "reset":
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				if tcp, ok := conn.(*net.TCPConn); ok {
					_ = tcp.SetLinger(0)
				}
				_ = conn.Close()
			}
		case "hang":
			select {
			case <-r.Context().Done():
			case <-closing:
			}
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	var once sync.Once
	f.close = func() { once.Do(func() { f.mode.Store("up"); close(closing); f.srv.Close() }) }
	t.Cleanup(f.close)
	return f
}

// TestKMSUnreachableOrHanging: with the AWS KMS unreachable or hanging, writes and the value
// generator answer a clear JSON 503 within the KMS timeouts, reads that need no KMS call keep working,
// and everything heals when the KMS is back. Nothing leaks.
func TestKMSUnreachableOrHanging(t *testing.T) {
	fake := kmstest.NewServer()
	defer fake.Close()
	fake.CreateKey("alias/gantry-master")
	fake.CreateKey("alias/gantry-auth")
	userKey := fake.CreateKey("alias/gantry-user-auth")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "example-secret")
	t.Setenv("AWS_SESSION_TOKEN", "")
	front := newKMSFront(t, fake.URL())

	leaked := leakCheck(t)
	s := startStack(t, func(c *stack.Config) {
		c.Secrets.KMS = "aws"
		c.Secrets.KMSURL = front.srv.URL
		c.Secrets.AWSRegion = kmstest.Region
		// Short KMS timeouts keep the hanging phase short; the SDK still retries.
		c.Secrets.KMSConnectionTimeout = 300 * time.Millisecond
		c.Secrets.KMSReadTimeout = 300 * time.Millisecond
	})
	provider, err := kms.NewAWS(context.Background(), kms.AWSConfig{Region: kmstest.Region, Endpoint: fake.URL()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := kmsauth.Generate(context.Background(), provider, userKey, kmsauth.Username{Version: 2, UserType: "user", From: "alice"}, "gantry", 10*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s.asUser = "Basic " + base64.StdEncoding.EncodeToString([]byte("2/user/alice:"+tok))
	id := s.createCredential("db", map[string]any{"password": "before"})

	revision := 1.0
	for _, mode := range []string{"reset", "hang"} {
		front.mode.Store(mode)
		answers := []response{s.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"password": "during-" + mode}})}
		if mode == "reset" { // each call waits out the SDK's retries: one route per mode is enough when hanging
			answers = append(answers, s.get("/v1/value_generator"))
		}
		for _, r := range answers {
			if r.code != http.StatusServiceUnavailable {
				t.Fatalf("KMS %s: %d %s, want 503", mode, r.code, r.body)
			}
			if msg, _ := r.json(t)["error"].(string); msg == "" || strings.Contains(msg, front.srv.URL) {
				t.Errorf("KMS %s: error %q should be clear and not name the endpoint", mode, msg)
			}
		}
		// The token and the credential's data key were cached: metadata and values stay readable.
		if got := s.get("/v1/credentials/"+id).must(t, 200)["revision"]; got != revision {
			t.Errorf("KMS %s: revision %v, want %v (no write got through)", mode, got, revision)
		}
		front.mode.Store("up")
		s.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"password": "after-" + mode}}).must(t, 200)
		revision++
		s.get("/v1/value_generator").must(t, 200)
	}
	s.stop()
	// The fake KMS and the front are the test's own servers: closed, their connections go too.
	front.close()
	fake.Close()
	leaked()
}

// TestHangingWebhookReceiverSlowsNoWrite: a receiver that never answers neither slows nor fails
// writes, the bounded queue drops what it cannot hold, and nothing leaks once the stack stops.
func TestHangingWebhookReceiverSlowsNoWrite(t *testing.T) {
	release := make(chan struct{})
	var received atomic.Int32
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer receiver.Close()
	leaked := leakCheck(t)
	s := startStack(t, func(c *stack.Config) { c.Secrets.WebhookURL = receiver.URL })
	id := s.createCredential("db", map[string]any{"password": "x"})
	s.call("PUT", "/v1/services/api", map[string]any{"credentials": []string{id}}).must(t, 200)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 25 {
				r := s.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"password": string(rune('a'+w)) + string(rune('a'+i))}})
				if r.code != 200 && r.code != 409 {
					t.Errorf("write with a hanging webhook receiver: %d %s", r.code, r.body)
				}
			}
		})
	}
	wg.Wait()
	if received.Load() == 0 {
		t.Error("the webhook receiver was never called")
	}
	s.stop()
	close(release)
	receiver.CloseClientConnections()
	leaked()
}
