package gateway

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gantry-dev/gantry/pkg/rpcpolicy"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
	optionsv1 "github.com/gantry-dev/gantry/proto/gantry/options/v1"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// refuseWithoutAuthorization is a RefuseBeforeBody that refuses every call without an Authorization
// header, as a service would refuse a call without credentials.
func refuseWithoutAuthorization(call PreBodyCall) error {
	if v, _ := call.Header("authorization"); len(v) > 0 {
		return nil
	}
	return status.Error(codes.Unauthenticated, "authentication required")
}

// heldBody is a request body the test sends part of and holds open until it calls release.
type heldBody struct {
	w *io.PipeWriter
	r *io.PipeReader
}

func newHeldBody(t *testing.T, first []byte) *heldBody {
	t.Helper()
	r, w := io.Pipe()
	go func() { _, _ = w.Write(first) }()
	h := &heldBody{w: w, r: r}
	t.Cleanup(h.release)
	return h
}

func (h *heldBody) release() { _ = h.w.Close() }

type httpAnswer struct {
	code   int
	header http.Header
	body   []byte
	err    error
}

// send starts a request and returns the channel its answer arrives on.
func send(req *http.Request) <-chan httpAnswer {
	out := make(chan httpAnswer, 1)
	go func() {
		resp, err := (&http.Transport{}).RoundTrip(req)
		if err != nil {
			out <- httpAnswer{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		out <- httpAnswer{code: resp.StatusCode, header: resp.Header, body: body, err: err}
	}()
	return out
}

// waitAnswer waits for an answer that must come while the test still holds a request body open; the
// bound only ends a test whose gateway waits for that body (it fails then), it is no timing claim.
func waitAnswer(t *testing.T, answers <-chan httpAnswer, what string) httpAnswer {
	t.Helper()
	select {
	case a := <-answers:
		if a.err != nil {
			t.Fatalf("%s: %v", what, a.err)
		}
		return a
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no answer while the body is held open: the gateway waits for the body", what)
		return httpAnswer{}
	}
}

// TestRefusedBeforeBodyIsNotRead: a call RefuseBeforeBody refuses is answered, as a JSON error through
// the same renderer as the service's refusals, while its body is still being sent; a call it lets
// through reaches the upstream with its whole body.
func TestRefusedBeforeBodyIsNotRead(t *testing.T) {
	h := startHarness(t, func(c *Config) { c.RefuseBeforeBody = refuseWithoutAuthorization })
	body := newHeldBody(t, bytes.Repeat([]byte(" "), 4096))
	req, _ := http.NewRequest(http.MethodPost, h.rest+"/api/v2/chat/action/t/b", body.r)
	req.ContentLength = 900 << 10
	a := waitAnswer(t, send(req), "POST without credentials")
	if a.code != http.StatusUnauthorized || strings.TrimSpace(string(a.body)) != `{"error":"authentication required"}` ||
		a.header.Get("Content-Type") != "application/json" {
		t.Errorf("got %d %q %s", a.code, a.header.Get("Content-Type"), a.body)
	}
	_, _, stats := do(t, http.MethodGet, h.admin+"/stats?filter=refused_before_body", nil, nil)
	if !strings.Contains(string(stats), "http.ingress.downstream_rq_refused_before_body: 1") {
		t.Errorf("stats:\n%s", stats)
	}

	// With credentials the call goes on: the echo upstream does not implement PerformAction (501).
	code, _, got := do(t, http.MethodPost, h.rest+"/api/v2/chat/action/t/b", strings.NewReader(`{}`), http.Header{"Authorization": {"Basic eDp5"}})
	if code != http.StatusNotImplemented {
		t.Errorf("with credentials: %d %s", code, got)
	}
	// Public routes and requests without a body are not asked about.
	if code, _, got := do(t, http.MethodGet, h.rest+"/api/v1/chat/get_team/echo", nil, nil); code != http.StatusOK {
		t.Errorf("GET without a body: %d %s", code, got)
	}
}

// TestLargeBodiesInFlightAreBounded: while -large-bodies-in-flight requests with a body over
// -large-body-threshold run, another such request gets 503 with Retry-After before its body is read;
// small bodies still pass; once a slot is free large bodies pass again.
func TestLargeBodiesInFlightAreBounded(t *testing.T) {
	const threshold = 1024
	h := startHarness(t, func(c *Config) { c.LargeBodyThreshold, c.LargeBodiesInFlight = threshold, 1 })
	const path = "/api/v2/chat/action/t/b"
	const active = "http.ingress.downstream_rq_large_body_active"

	// The first large body is sent chunked (no length) and held open: it holds the only slot.
	first := newHeldBody(t, append([]byte(`{"x":"`), bytes.Repeat([]byte("x"), 2*threshold)...))
	req, _ := http.NewRequest(http.MethodPost, h.rest+path, first.r)
	firstAnswer := send(req)
	for statValue(t, h.admin, active) != 1 {
		select {
		case a := <-firstAnswer:
			t.Fatalf("the held request ended: %+v", a)
		case <-time.After(5 * time.Millisecond):
		}
	}

	second := newHeldBody(t, bytes.Repeat([]byte("y"), 10))
	req, _ = http.NewRequest(http.MethodPost, h.rest+path, second.r)
	req.ContentLength = 2 * threshold
	a := waitAnswer(t, send(req), "second large body")
	if a.code != http.StatusServiceUnavailable || a.header.Get("Retry-After") != "1" ||
		!strings.Contains(string(a.body), `"error":"too many requests with a body over 1024 bytes in flight; retry later"`) {
		t.Errorf("second large body: %d Retry-After %q %s", a.code, a.header.Get("Retry-After"), a.body)
	}
	if code, _, body := do(t, http.MethodPost, h.rest+path, strings.NewReader(`{"small":true}`), nil); code != http.StatusNotImplemented {
		t.Errorf("small body while the slot is taken: %d %s", code, body)
	}

	_, _ = first.w.Write([]byte(`"}`))
	first.release()
	if a := waitAnswer(t, firstAnswer, "first large body"); a.code != http.StatusNotImplemented {
		t.Errorf("first large body: %d %s", a.code, a.body)
	}
	big := `{"x":"` + strings.Repeat("z", 2*threshold) + `"}`
	if code, _, body := do(t, http.MethodPost, h.rest+path, strings.NewReader(big), nil); code != http.StatusNotImplemented {
		t.Errorf("large body once the slot is free: %d %s", code, body)
	}
	if n := statValue(t, h.admin, "http.ingress.downstream_rq_large_body_overflow"); n != 1 {
		t.Errorf("overflow count %d, want 1", n)
	}
}

// TestSecurityHeadersOnEveryAnswer: every answer of the REST listener carries the security headers,
// and every answer under /v1/ is not cached: success, /healthcheck (serving and draining), routing
// errors, the limits' 400 and 413, refusals before the body, 503 of the large-body bound and 5xx.
func TestSecurityHeadersOnEveryAnswer(t *testing.T) {
	h := startHarness(t, func(c *Config) {
		c.MaxBodyBytes = 4096
		c.RefuseBeforeBody = refuseWithoutAuthorization
	})
	tooBig := strings.Repeat("x", 5000)
	tests := []struct {
		name, method, path string
		body               io.Reader
		header             http.Header
		wantCode           int
	}{
		{name: "success", method: "GET", path: "/api/v1/chat/get_team/echo", wantCode: 200},
		{name: "healthcheck", method: "GET", path: "/healthcheck", wantCode: 200},
		{name: "unknown route", method: "GET", path: "/nowhere", wantCode: 404},
		{name: "unknown secrets route", method: "GET", path: "/v1/nowhere", wantCode: 404},
		{name: "method not allowed", method: "DELETE", path: "/api/v1/chat/get_team/echo", wantCode: 405},
		{name: "too many query parameters", method: "GET", path: "/v1/credentials?" + strings.Repeat("a=1&", 200), wantCode: 400},
		{name: "413 by length", method: "POST", path: "/v1/credentials", body: strings.NewReader(tooBig), wantCode: 413},
		{name: "413 chunked", method: "POST", path: "/api/v2/chat/action/t/b", body: io.MultiReader(strings.NewReader(tooBig)),
			header: http.Header{"Authorization": {"Basic eDp5"}}, wantCode: 413},
		{name: "refused before the body", method: "POST", path: "/v1/credentials", body: strings.NewReader(`{}`), wantCode: 401},
		{name: "upstream 500", method: "GET", path: "/api/v1/chat/get_team/boom", wantCode: 500},
		{name: "upstream 503", method: "GET", path: "/api/v1/chat/get_team/unavailable", wantCode: 503},
		{name: "no secrets host", method: "GET", path: "/v1/credentials", wantCode: 503},
		{name: "not implemented", method: "POST", path: "/api/v2/chat/action/t/b", body: strings.NewReader(`{}`),
			header: http.Header{"Authorization": {"Basic eDp5"}}, wantCode: 501},
	}
	check := func(t *testing.T, path string, header http.Header) {
		t.Helper()
		for name, want := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"} {
			if got := header.Get(name); got != want {
				t.Errorf("%s = %q, want %q", name, got, want)
			}
		}
		// HSTS only over HTTPS (internal/e2e TestTourOverHTTPSWithAPrivateCA): this listener is HTTP.
		if got := header.Get("Strict-Transport-Security"); got != "" {
			t.Errorf("Strict-Transport-Security %q over plain HTTP", got)
		}
		if strings.HasPrefix(path, "/v1/") && header.Get("Cache-Control") != "no-store" {
			t.Errorf("Cache-Control = %q, want no-store", header.Get("Cache-Control"))
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, header, body := do(t, tt.method, h.rest+tt.path, tt.body, tt.header)
			if code != tt.wantCode {
				t.Fatalf("status %d, want %d (body %s)", code, tt.wantCode, body)
			}
			check(t, tt.path, header)
		})
	}
	t.Run("healthcheck while draining", func(t *testing.T) {
		if code, _, body := do(t, "POST", h.admin+"/healthcheck/fail", nil, nil); code != 200 {
			t.Fatalf("/healthcheck/fail: %d %s", code, body)
		}
		code, header, _ := do(t, "GET", h.rest+"/healthcheck", nil, nil)
		if code != 503 {
			t.Fatalf("status %d", code)
		}
		check(t, "/healthcheck", header)
	})
}

// TestRouteFinderFindsEveryDeclaredRoute: every REST route the protos declare is found before the body,
// under the method that declares it, with its access; the Slack receivers are public.
func TestRouteFinderFindsEveryDeclaredRoute(t *testing.T) {
	finder, err := newRouteFinder()
	if err != nil {
		t.Fatal(err)
	}
	fill := regexp.MustCompile(`\{[^}]*\}`)
	for _, sd := range []protoreflect.ServiceDescriptor{
		secretsv1.File_secrets_v1_secrets_proto.Services().ByName("SecretsService"),
		chatv1.File_chat_v1_chat_proto.Services().ByName("ChatService"),
	} {
		for method, policy := range rpcpolicy.MustFor(sd) {
			for _, r := range policy.Routes {
				path := fill.ReplaceAllString(r.Template, "x")
				req := httptest.NewRequest(r.Method, path, strings.NewReader("{}"))
				route, _, _ := finder.find(req)
				if route == nil || route.fullMethod != method {
					t.Errorf("%s %s: found %+v, want %s", r.Method, path, route, method)
					continue
				}
				if public := policy.Access == optionsv1.Access_ACCESS_PUBLIC; route.public != public {
					t.Errorf("%s %s: public %v, want %v", r.Method, path, route.public, public)
				}
			}
		}
	}
	for path := range slackReceivers {
		if route, _, _ := finder.find(httptest.NewRequest(http.MethodPost, path, strings.NewReader("x"))); route == nil || !route.public {
			t.Errorf("POST %s: found %+v, want a public route", path, route)
		}
	}
	if route, _, _ := finder.find(httptest.NewRequest(http.MethodPost, "/v1/nowhere", strings.NewReader("x"))); route != nil {
		t.Errorf("POST /v1/nowhere: found %+v", route)
	}
}
