package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/internal/stack"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// hostileStack runs the stack with listener limits short enough for the slow clients below to be
// cut off quickly; everything else keeps its default.
func hostileStack(t *testing.T) *testStack {
	return startStack(t, func(c *stack.Config) {
		c.Limits.ReadHeaderTimeout = 300 * time.Millisecond
		c.Limits.ReadTimeout = 2 * time.Second
		c.Limits.MaxHeaderBytes = 16 << 10
		c.Limits.GRPCMaxRecvMsgBytes = 64 << 10
	})
}

// stillServes fails the test unless an ordinary authenticated read through the gateway works.
func (s *testStack) stillServes(t *testing.T) {
	t.Helper()
	if r := s.get("/v1/value_generator"); r.code != http.StatusOK {
		t.Fatalf("the gateway stopped serving ordinary requests: %d %s", r.code, r.body)
	}
}

// TestHostileInputThroughTheGateway sends what attackers send: every answer is a 4xx JSON error, never
// a 5xx, and the gateway keeps serving ordinary requests after each.
func TestHostileInputThroughTheGateway(t *testing.T) {
	s := hostileStack(t)
	id := s.createCredential("hostile-target", map[string]any{"k": "v"})
	json := http.Header{"Content-Type": {"application/json"}}
	tests := []struct {
		name, method, path, body string
		header                   http.Header
		wantCode                 int
	}{
		{"huge body", "POST", "/v1/credentials", `{"name":"` + strings.Repeat("a", 8<<20) + `"}`, json, 413},
		{"deeply nested array", "POST", "/v1/credentials", strings.Repeat("[", 100_000), json, 400},
		{"deeply nested value", "POST", "/v1/credentials", `{"name":"x","credential_pairs":{"k":` + strings.Repeat("[", 100_000) + `}}`, json, 400},
		{"deeply nested metadata", "PUT", "/v1/credentials/" + id, `{"metadata":` + strings.Repeat(`{"a":`, 50_000) + `1` + strings.Repeat("}", 50_000) + `}`, json, 400},
		{"deeply nested service body", "PUT", "/v1/services/svc", `{"credentials":` + strings.Repeat("[", 100_000), json, 400},
		{"invalid UTF-8 value", "POST", "/v1/credentials", "{\"name\":\"n\",\"documentation\":\"d\",\"credential_pairs\":{\"k\":\"\xc3\x28\"}}", json, 400},
		{"invalid UTF-8 key", "PUT", "/v1/credentials/" + id, "{\"credential_pairs\":{\"\xff\":\"v\"}}", json, 400},
		{"invalid UTF-8 in a path id", "GET", "/v1/credentials/%ff%fe", "", nil, 400},
		{"invalid UTF-8 in a service id", "PUT", "/v1/services/%c3%28", `{"credentials":[]}`, json, 400},
		{"invalid UTF-8 in a query value", "GET", "/v1/credentials?next_page=%ff", "", nil, 400},
		{"traversal with dots", "GET", "/v1/credentials/..%2f..%2fetc%2fpasswd", "", nil, 404},
		{"traversal with encoded dots", "GET", "/v1/credentials/%2e%2e", "", nil, 404},
		{"traversal to the archive", "GET", "/v1/archive/credentials/%2e%2e%2f" + id, "", nil, 404},
		{"traversal in a service id", "GET", "/v1/services/..%2F..%2Fv1%2Fcredentials", "", nil, 404},
		{"NUL in an id", "GET", "/v1/credentials/" + id + "%00", "", nil, 400},
		{"NUL in a service id", "PUT", "/v1/services/svc%00x", `{"credentials":[]}`, json, 400},
		{"control characters in an id", "GET", "/v1/credentials/%0d%0aSet-Cookie:%20x=1", "", nil, 400},
		{"thousands of query parameters", "GET", "/v1/credentials?" + strings.Repeat("a=1&", 5000) + "limit=1", "", nil, 400},
		{"bad paging token", "GET", "/v1/credentials?next_page=%25%25%25", "", nil, 400},
		{"huge paging token", "GET", "/v1/credentials?page=" + strings.Repeat("QUFB", 2000), "", nil, 400},
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.do(tt.method, s.rest+tt.path, tt.body, tt.header)
			if r.code != tt.wantCode {
				t.Errorf("status %d, want %d (body %.300s)", r.code, tt.wantCode, r.body)
			}
			if r.code >= 500 {
				t.Errorf("hostile input reached a 5xx")
			}
			if msg, _ := r.json(t)["error"].(string); msg == "" {
				t.Errorf("no error message in %.300s", r.body)
			}
			s.stillServes(t)
		})
	}
	// Nothing the hostile requests sent stays in memory: the heap is back near where it was (a
	// generous bound; the bodies alone were tens of MiB).
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapInuse) - int64(before.HeapInuse); grown > 32<<20 {
		t.Errorf("heap grew by %d MiB over the hostile requests", grown>>20)
	}
	// The credential the traversal attempts aimed around is untouched.
	if got := s.get("/v1/credentials/"+id).must(t, 200)["revision"]; got != float64(1) {
		t.Errorf("target credential at revision %v after the hostile requests", got)
	}
}

// TestHugeHeadersAnswer431 sends headers over the limit to the REST and the admin listener.
func TestHugeHeadersAnswer431(t *testing.T) {
	s := hostileStack(t)
	for _, base := range []string{s.rest, s.adm} {
		req, _ := http.NewRequest("GET", base+"/server_info", nil)
		req.Header.Set("X-Big", strings.Repeat("b", 64<<10))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", base, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("%s: huge header answered %d, want 431", base, resp.StatusCode)
		}
		// Many small headers count too.
		req, _ = http.NewRequest("GET", base+"/server_info", nil)
		for i := range 2000 {
			req.Header.Set(fmt.Sprintf("X-H%d", i), "v")
		}
		if resp, err := client.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("%s: 2000 headers answered %d, want 431", base, resp.StatusCode)
			}
		}
	}
	s.stillServes(t)
	if r := s.admin("/server_info"); r.code != 200 {
		t.Errorf("admin stopped serving: %d", r.code)
	}
}

// slowLoris opens a connection to addr and sends the start of a request one byte at a time. It returns
// once the server has closed the connection (or answered 408), and fails the test when the server
// still holds it after a long safety bound: the server's ReadHeaderTimeout must cut it off.
func slowLoris(t *testing.T, addr string, done chan<- error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		done <- err
		return
	}
	defer conn.Close()
	closed := make(chan struct{})
	go func() {
		// The server closes the connection (possibly after a 408): reading ends.
		_, _ = io.Copy(io.Discard, conn)
		close(closed)
	}()
	header := "GET /v1/value_generator HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("s", 10_000)
	safety := time.After(60 * time.Second)
	for i := 0; ; i++ {
		select {
		case <-closed:
			done <- nil
			return
		case <-safety:
			done <- errors.New("a slow-loris client still holds its connection after 60 s")
			return
		case <-time.After(20 * time.Millisecond):
		}
		if _, err := conn.Write([]byte{header[i%len(header)]}); err != nil {
			done <- nil // the server closed it
			return
		}
	}
}

// TestSlowLorisIsCutOffWhileOthersAreServed trickles headers on many connections to the REST and admin
// listeners; each is cut off by the header timeout while ordinary clients keep being served.
func TestSlowLorisIsCutOffWhileOthersAreServed(t *testing.T) {
	s := hostileStack(t)
	const slow = 20
	done := make(chan error, 2*slow)
	for range slow {
		go slowLoris(t, s.GatewayAddr, done)
		go slowLoris(t, s.AdminAddr, done)
	}
	// Ordinary clients are served while the slow ones hold their connections.
	for range 5 {
		s.stillServes(t)
	}
	for range 2 * slow {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	s.stillServes(t)
}

// TestSlowBodyIsCutOff sends headers promptly, then the body one byte at a time: ReadTimeout ends it.
func TestSlowBodyIsCutOff(t *testing.T) {
	s := hostileStack(t)
	conn, err := net.Dial("tcp", s.GatewayAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/credentials HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n", s.asUser)
	answered := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(conn).ReadString('\n')
		answered <- line
	}()
	safety := time.After(60 * time.Second)
	for {
		select {
		case line := <-answered:
			if strings.Contains(line, " 200 ") {
				t.Fatalf("a slow body was accepted: %q", line)
			}
			s.stillServes(t)
			return
		case <-safety:
			t.Fatal("a slow body still holds its connection after 60 s")
		case <-time.After(20 * time.Millisecond):
		}
		if _, err := conn.Write([]byte("{")); err != nil {
			s.stillServes(t)
			return
		}
	}
}

// TestOversizedGRPCMessageIsRefused sends the secrets gRPC port a message over its limit: the call
// fails with ResourceExhausted and the server keeps serving.
func TestOversizedGRPCMessageIsRefused(t *testing.T) {
	s := hostileStack(t)
	client := secretsv1.NewSecretsServiceClient(s.dial(s.SecretsAddr))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := client.CreateCredential(ctx, &secretsv1.CreateCredentialRequest{Name: strings.Repeat("n", 128<<10)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversized message: %v, want ResourceExhausted", err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { s.stillServes(t) })
	}
	wg.Wait()
}
