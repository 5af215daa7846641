package gateway

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/peer"
	grpcstats "google.golang.org/grpc/stats"

	"github.com/gantry-dev/gantry/gateway/upstream"
	"github.com/gantry-dev/gantry/pkg/freeport"
	"github.com/gantry-dev/gantry/pkg/grpcserver"
	"github.com/gantry-dev/gantry/pkg/inprocgrpc"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/memconn"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
)

// harness is a running gateway in front of an echoChat upstream (secrets points nowhere).
type harness struct {
	gw          *Gateway
	rest, admin string
	done        chan error
	chatAddr    string
	chatSrv     *grpcserver.Server
	// chatDials counts the direct connections opened to the chat host (startHarnessInMemory).
	chatDials atomic.Int64
}

func startHarness(t *testing.T, mutate func(*Config)) *harness {
	t.Helper()
	return startHarnessWith(t, false, mutate)
}

// startHarnessInMemory is startHarness with the chat host reached as a service of the gateway's own
// process: the gateway calls its server directly (grpcserver.Server.Direct) for its address.
func startHarnessInMemory(t *testing.T, mutate func(*Config)) *harness {
	t.Helper()
	return startHarnessWith(t, true, mutate)
}

func startHarnessWith(t *testing.T, inMemory bool, mutate func(*Config)) *harness {
	t.Helper()
	logger := logtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	chatLis := listen(t)
	chatSrv := grpcserver.NewService(logger, grpcserver.Service{})
	chatv1.RegisterChatServiceServer(chatSrv, echoChat{})
	h := &harness{chatSrv: chatSrv}
	var direct map[string]upstream.InProcessService
	if inMemory {
		direct = map[string]upstream.InProcessService{chatLis.Addr().String(): func(sh grpcstats.Handler) upstream.InProcessConn {
			h.chatDials.Add(1)
			return chatSrv.Direct(inprocgrpc.ConnOptions{Peer: &peer.Peer{Addr: memconn.Addr("chat")}, Authority: chatLis.Addr().String(), StatsHandler: sh})
		}}
	}
	chatDone := make(chan error, 1)
	go func() { chatDone <- chatSrv.Serve(ctx, chatLis, time.Second) }()
	deadAddr := freeport.Refused(t)

	cfg := DefaultConfig()
	cfg.ChatUpstream = chatLis.Addr().String()
	cfg.SecretsUpstream = deadAddr
	cfg.ProfilePath = filepath.Join(t.TempDir(), "gantry.prof")
	cfg.InProcessServices = direct
	if mutate != nil {
		mutate(&cfg)
	}
	gw, err := New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	lis := Listeners{Main: listen(t), Admin: listen(t), AdminGRPC: listen(t)}
	h.gw, h.done, h.chatAddr = gw, make(chan error, 1), chatLis.Addr().String()
	h.rest, h.admin = "http://"+lis.Main.Addr().String(), "http://"+lis.Admin.Addr().String()
	if cfg.TLSCertFile != "" {
		h.rest = "https://" + lis.Main.Addr().String()
	}
	go func() { h.done <- gw.Serve(ctx, lis, time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-h.done; err != nil {
			t.Errorf("gateway Serve: %v", err)
		}
		<-chatDone
	})
	return h
}

func TestAdminMainHealthcheckAndDraining(t *testing.T) {
	h := startHarness(t, nil)
	expect := func(method, url string, wantCode int, wantBody string) http.Header {
		t.Helper()
		code, header, body := do(t, method, url, nil, nil)
		if code != wantCode || (wantBody != "" && string(body) != wantBody) {
			t.Fatalf("%s %s = %d %q, want %d %q", method, url, code, body, wantCode, wantBody)
		}
		return header
	}
	expect("GET", h.rest+"/healthcheck", 200, "OK\n")
	expect("GET", h.admin+"/ready", 200, "LIVE\n")
	expect("POST", h.admin+"/healthcheck/fail", 200, "OK\n")
	header := expect("GET", h.rest+"/healthcheck", 503, `{"error":"draining"}`+"\n")
	if header.Get("X-Envoy-Immediate-Health-Check-Fail") != "true" {
		t.Error("draining responses lack x-envoy-immediate-health-check-fail")
	}
	// Draining fails health checks only; requests are still served.
	expect("GET", h.rest+"/api/v1/chat/get_team/echo", 200, "")
	expect("GET", h.admin+"/ready", 503, "DRAINING\n")
	_, _, info := do(t, "GET", h.admin+"/server_info", nil, nil)
	if !regexp.MustCompile(`^gantry \w{6}/\w+ draining \d+ \d+ 0\n$`).Match(info) {
		t.Errorf("server_info = %q, want state draining", info)
	}
	expect("POST", h.admin+"/healthcheck/ok", 200, "OK\n")
	expect("GET", h.rest+"/healthcheck", 200, "OK\n")
	expect("GET", h.admin+"/server_info?format=json", 200, "")
}

func TestAdminTextPages(t *testing.T) {
	// GET reaches every page, mutations included, once -admin-mutations-post-only=false.
	h := startHarness(t, func(c *Config) { c.AdminPostOnly = false })
	tests := []struct {
		path     string
		wantCode int
		wantBody *regexp.Regexp
	}{
		{"/", 200, regexp.MustCompile(`^gantry admin commands:\n(  /\S+: .+\n)+$`)},
		{"/nope", 404, regexp.MustCompile(`^gantry admin commands:\n`)},
		{"/hot_restart_version", 200, regexp.MustCompile(`^disabled$`)},
		{"/certs", 200, regexp.MustCompile(`^$`)},
		{"/clusters", 200, regexp.MustCompile(`^(\S+::\S*\n)+$`)},
		{"/cpuprofiler", 400, regexp.MustCompile(`^\?enable=<y\|n>\n$`)},
		{"/cpuprofiler?enable=yes", 400, regexp.MustCompile(`^\?enable=<y\|n>\n$`)},
		{"/logging", 200, regexp.MustCompile(`^active loggers:\n(  \S+: \w+\n)+\n$`)},
		{"/logging?gateway.upstream=debug", 200, regexp.MustCompile(`\n  gateway.upstream: debug\n`)},
		{"/logging?nope=debug", 400, regexp.MustCompile(`^error: unknown logger name\n\nusage: /logging`)},
		{"/stats?filter=%28", 400, regexp.MustCompile(`^Invalid re2 regex\n$`)},
		{"/stats?filter=%5Eserver%5C.live", 200, regexp.MustCompile(`^server\.live: 1\n$`)},
		{"/stats?format=json&filter=server.live", 200, regexp.MustCompile(`"name": "server.live",\s+"value": 1`)},
		{"/reset_counters", 200, regexp.MustCompile(`^OK\n$`)},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			code, header, body := do(t, "GET", h.admin+tt.path, nil, nil)
			if code != tt.wantCode || !tt.wantBody.Match(body) {
				t.Errorf("got %d %q, want %d matching %s", code, body, tt.wantCode, tt.wantBody)
			}
			if ct := header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") && !strings.HasPrefix(ct, "application/json") {
				t.Errorf("Content-Type = %q", ct)
			}
		})
	}
}

func TestAdminLoggingChangesLevels(t *testing.T) {
	h := startHarness(t, nil)
	if code, _, body := do(t, "POST", h.admin+"/logging", strings.NewReader("level=error"), http.Header{"Content-Type": {formContentType}}); code != 200 ||
		!strings.Contains(string(body), "  gateway.upstream: error\n") {
		t.Fatalf("POST form /logging = %d %q", code, body)
	}
	if got := h.gw.levels.List()["gateway"]; got != "error" {
		t.Errorf("gateway level = %q, want error", got)
	}
	if h.gw.logger.Named("upstream").Core().Enabled(zapcore.WarnLevel) && h.gw.logger.Check(zapcore.WarnLevel, "x") != nil {
		t.Error("a warning still passes at level error")
	}
}

func TestAdminPostOnly(t *testing.T) {
	h := startHarness(t, nil) // POST-only is the default
	for _, p := range []string{"/healthcheck/fail", "/healthcheck/ok", "/reset_counters", "/cpuprofiler?enable=n", "/logging?level=info", "/quitquitquit"} {
		code, header, body := do(t, "GET", h.admin+p, nil, nil)
		if code != 405 || string(body) != "Method GET not allowed, POST required." || header.Get("Allow") != "POST" {
			t.Errorf("GET %s = %d %q, want 405", p, code, body)
		}
	}
	if h.gw.Draining() {
		t.Fatal("a refused GET changed the server")
	}
	for _, p := range []string{"/stats", "/clusters", "/server_info", "/logging", "/ready"} {
		if code, _, body := do(t, "GET", h.admin+p, nil, nil); code != 200 {
			t.Errorf("GET %s = %d %q, want 200 (read-only)", p, code, body)
		}
	}
	if code, _, _ := do(t, "POST", h.admin+"/healthcheck/fail", nil, nil); code != 200 || !h.gw.Draining() {
		t.Errorf("POST /healthcheck/fail = %d, draining %v", code, h.gw.Draining())
	}
}

func TestAdminQuitQuitQuit(t *testing.T) {
	h := startHarness(t, nil)
	if code, _, body := do(t, "POST", h.admin+"/quitquitquit", nil, nil); code != 200 || string(body) != "OK\n" {
		t.Fatalf("quitquitquit = %d %q", code, body)
	}
	select {
	case err := <-h.done:
		h.done <- err // for the cleanup
		if err != nil {
			t.Errorf("Serve after quitquitquit: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return after /quitquitquit")
	}
	if _, err := http.Get(h.rest + "/healthcheck"); err == nil {
		t.Error("the REST listener still accepts after /quitquitquit")
	}
}

func TestAdminStatsCountRequests(t *testing.T) {
	h := startHarness(t, nil)
	for i := 0; i < 3; i++ {
		do(t, "GET", h.rest+"/api/v1/chat/get_team/echo", nil, nil)
	}
	do(t, "GET", h.rest+"/api/v1/chat/get_team/detail", nil, nil) // 403 from the upstream
	do(t, "GET", h.rest+"/api/v1/chat/get_team/stale", nil, nil)  // 412: counted as the client saw it
	stat := func(name string) string {
		_, _, body := do(t, "GET", h.admin+"/stats?filter="+url.QueryEscape("^"+regexp.QuoteMeta(name)+"$"), nil, nil)
		return strings.TrimSpace(string(body))
	}
	for name, want := range map[string]string{
		"cluster.chat.upstream_rq_total":   "5",
		"cluster.chat.upstream_rq_200":     "3",
		"cluster.chat.upstream_rq_2xx":     "3",
		"cluster.chat.upstream_rq_403":     "1",
		"cluster.chat.upstream_rq_412":     "1",
		"cluster.chat.upstream_rq_4xx":     "2",
		"cluster.chat.upstream_cx_total":   "1",
		"http.ingress.downstream_rq_total": "5",
		"http.ingress.downstream_rq_2xx":   "3",
		"http.ingress.downstream_rq_4xx":   "2",
	} {
		if got := stat(name); got != name+": "+want {
			t.Errorf("%q, want %s: %s", got, name, want)
		}
	}
	lines := clusterLines(t, h.admin, "chat", h.chatAddr)
	if lines["rq_total"] != "5" || lines["rq_success"] != "5" || lines["rq_error"] != "0" || lines["cx_total"] != "1" || lines["cx_active"] != "1" {
		t.Errorf("host lines %v", lines)
	}
	do(t, "POST", h.admin+"/reset_counters", nil, nil)
	if got := stat("cluster.chat.upstream_rq_total"); got != "cluster.chat.upstream_rq_total: 0" {
		t.Errorf("after reset: %q", got)
	}
	_, _, prom := do(t, "GET", h.admin+"/stats/prometheus", nil, nil)
	if !strings.Contains(string(prom), `envoy_cluster_upstream_rq_total{envoy_cluster_name="chat"} 5`+"\n") {
		t.Errorf("prometheus lost the total after reset:\n%s", prom)
	}
}

func clusterLines(t *testing.T, admin, cluster, addr string) map[string]string {
	t.Helper()
	_, _, body := do(t, "GET", admin+"/clusters", nil, nil)
	out := map[string]string{}
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, cluster+"::"+addr+"::"); ok {
			k, v, _ := strings.Cut(rest, "::")
			out[k] = v
		}
	}
	return out
}

func TestOutlierDetectionEjects(t *testing.T) {
	h := startHarness(t, func(c *Config) {
		c.Outlier.ConsecutiveFailures = 3
		c.HealthCheck.Interval = time.Hour // only the first check runs: the ejection must stand on its own
	})
	// Answers about the request never eject: a denial (403), nor an internal error any caller can
	// provoke with a bad request (500), however many.
	for i := 0; i < 5; i++ {
		do(t, "GET", h.rest+"/api/v1/chat/get_team/detail", nil, nil)
		if code, _, _ := do(t, "GET", h.rest+"/api/v1/chat/get_team/boom", nil, nil); code != 500 {
			t.Fatalf("boom %d: status %d", i, code)
		}
	}
	if got := clusterLines(t, h.admin, "chat", h.chatAddr)["health_flags"]; got != "healthy" {
		t.Fatalf("after 403s and 500s: %q", got)
	}
	// Nor does a host reporting that a dependency every host shares failed (a full disk, etcd
	// without a leader): its health check takes it out when only it lost the dependency, and ejecting
	// it would also stop the reads that still work.
	for i := 0; i < 5; i++ {
		if code, _, body := do(t, "GET", h.rest+"/api/v1/chat/get_team/dependency", nil, nil); code != 503 || !strings.Contains(string(body), "storage unavailable") {
			t.Fatalf("dependency %d: %d %s", i, code, body)
		}
	}
	if got := clusterLines(t, h.admin, "chat", h.chatAddr)["health_flags"]; got != "healthy" {
		t.Fatalf("after 5 dependency failures: %q", got)
	}
	// A host that says it is unavailable is ejected.
	for i := 0; i < 3; i++ {
		if code, _, _ := do(t, "GET", h.rest+"/api/v1/chat/get_team/unavailable", nil, nil); code != 503 {
			t.Fatalf("unavailable %d: status %d", i, code)
		}
	}
	if got := clusterLines(t, h.admin, "chat", h.chatAddr)["health_flags"]; got != "/failed_outlier_check" {
		t.Fatalf("after 3 Unavailable answers: health_flags %q", got)
	}
	// It is the cluster's only host: below the panic threshold every host takes requests, so outlier
	// detection alone never leaves the cluster without one.
	if code, _, body := do(t, "GET", h.rest+"/api/v1/chat/get_team/echo", nil, nil); code != 200 {
		t.Errorf("ejected only host in panic mode: %d %s", code, body)
	}
	_, _, stats := do(t, "GET", h.admin+"/stats?filter=outlier_detection.ejections_(active|total)|none_healthy|lb_healthy_panic", nil, nil)
	for _, want := range []string{"cluster.chat.outlier_detection.ejections_active: 1\n", "cluster.chat.outlier_detection.ejections_total: 1\n",
		"cluster.chat.upstream_cx_none_healthy: 0\n"} {
		if !strings.Contains(string(stats), want) {
			t.Errorf("stats:\n%s\nwant %s", stats, want)
		}
	}
	if !regexp.MustCompile(`cluster\.chat\.lb_healthy_panic: [1-9]`).Match(stats) {
		t.Errorf("lb_healthy_panic not counted:\n%s", stats)
	}
}

func TestNoHealthyUpstreamWithoutPanicMode(t *testing.T) {
	h := startHarness(t, func(c *Config) {
		c.Outlier.ConsecutiveFailures = 3
		c.HealthCheck.Interval = time.Hour
		c.HealthyPanicThreshold = 0
	})
	for i := 0; i < 3; i++ {
		do(t, "GET", h.rest+"/api/v1/chat/get_team/unavailable", nil, nil)
	}
	code, _, body := do(t, "GET", h.rest+"/api/v1/chat/get_team/echo", nil, nil)
	if code != 503 || string(body) != `{"error":"no healthy upstream"}`+"\n" {
		t.Errorf("ejected only host with the panic threshold at 0: %d %s", code, body)
	}
}

// writeCert writes a self-signed certificate and key, returning their paths.
func writeCert(t *testing.T, serial int64, validFor time.Duration) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "gateway.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(validFor),
		DNSNames: []string{"localhost"}, IPAddresses: nil,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.pem"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestTLSAndCerts(t *testing.T) {
	certFile, keyFile := writeCert(t, 0x3c4d, 300*24*time.Hour+time.Hour)
	h := startHarness(t, func(c *Config) { c.TLSCertFile, c.TLSKeyFile = certFile, keyFile })
	_, _, body := do(t, "GET", h.admin+"/certs", nil, nil)
	want := fmt.Sprintf("{\n\t\"ca_cert\": \"\",\n\t\"cert_chain\": \"Certificate Path: %s, Serial Number: 3c4d, Days until Expiration: 300\"\n}\n", certFile)
	if string(body) != want {
		t.Errorf("/certs = %q, want %q", body, want)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed test cert
	resp, err := client.Get(h.rest + "/healthcheck")
	if err != nil {
		t.Fatalf("HTTPS: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil || resp.TLS.PeerCertificates[0].SerialNumber.Int64() != 0x3c4d {
		t.Errorf("HTTPS healthcheck: %d %v", resp.StatusCode, resp.TLS)
	}
	_, _, stats := do(t, "GET", h.admin+"/stats?filter=days_until", nil, nil)
	if string(stats) != "server.days_until_first_cert_expiring: 300\n" {
		t.Errorf("stats = %q", stats)
	}
}

func TestTLSBadFilesRejected(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TLSCertFile, cfg.TLSKeyFile = "/nonexistent/cert.pem", "/nonexistent/key.pem"
	if _, err := New(cfg, nil); err == nil || !strings.Contains(err.Error(), "-tls-cert-file") {
		t.Errorf("New = %v, want an error naming -tls-cert-file", err)
	}
	cfg.TLSKeyFile = ""
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "-tls-cert-file") {
		t.Errorf("Validate = %v", err)
	}
}

func TestAdminOffLoopbackWarns(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	gw, err := New(DefaultConfig(), zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	adminLis, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Skipf("cannot bind 0.0.0.0: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- gw.Serve(ctx, Listeners{Main: listen(t), Admin: adminLis, AdminGRPC: listen(t)}, time.Second)
	}()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if logs.FilterMessageSnippet("ADMIN INTERFACE IS REACHABLE FROM OTHER HOSTS").Len() != 1 {
		t.Errorf("no loud warning for an admin listener on %s: %v", adminLis.Addr(), logs.All())
	}
}

func TestUpstreamTimeoutCounted(t *testing.T) {
	h := startHarness(t, func(c *Config) { c.UpstreamTimeout = 100 * time.Millisecond })
	code, _, body := do(t, "GET", h.rest+"/api/v1/chat/get_team/slow", nil, nil)
	if code != http.StatusGatewayTimeout {
		t.Fatalf("slow upstream: %d %s, want 504", code, body)
	}
	_, _, stats := do(t, "GET", h.admin+"/stats?filter=chat.upstream_rq_(timeout|504|5xx)", nil, nil)
	want := "cluster.chat.upstream_rq_504: 1\ncluster.chat.upstream_rq_5xx: 1\ncluster.chat.upstream_rq_timeout: 1\n"
	if string(stats) != want {
		t.Errorf("stats = %q, want %q", stats, want)
	}
	lines := clusterLines(t, h.admin, "chat", h.chatAddr)
	if lines["rq_timeout"] != "1" || lines["rq_error"] != "1" {
		t.Errorf("host lines = %v, want rq_timeout 1 and rq_error 1", lines)
	}
}

// TestAdminStatsType: the admin port's /stats and /stats/prometheus keep only the kind type= names
// (Envoy's Counters|Gauges|Histograms|TextReadouts|All), and refuse any other value with Envoy's 400;
// on main type= was ignored and every kind was listed.
func TestAdminStatsType(t *testing.T) {
	h := startHarness(t, nil)
	do(t, "GET", h.rest+"/api/v1/chat/get_team/echo", nil, nil)
	lines := func(query string) []string {
		t.Helper()
		code, _, body := do(t, "GET", h.admin+"/stats?"+query, nil, nil)
		if code != http.StatusOK {
			t.Fatalf("/stats?%s: %d %s", query, code, body)
		}
		return strings.Split(strings.TrimSpace(string(body)), "\n")
	}
	filter := "&filter=" + url.QueryEscape(`^cluster\.chat\.upstream_(rq_total|rq_active|rq_time)$`)
	for query, want := range map[string][]string{
		"type=Counters" + filter: {"cluster.chat.upstream_rq_total: 1"},
		"type=Gauges" + filter:   {"cluster.chat.upstream_rq_active: 0"},
		"type=All" + filter:      {"cluster.chat.upstream_rq_active: 0", "cluster.chat.upstream_rq_total: 1", "cluster.chat.upstream_rq_time: P0"},
	} {
		got := lines(query)
		if len(got) != len(want) {
			t.Errorf("/stats?%s:\n%s\nwant %d lines %q", query, strings.Join(got, "\n"), len(want), want)
			continue
		}
		for i := range want {
			if !strings.HasPrefix(got[i], want[i]) {
				t.Errorf("/stats?%s line %d = %q, want %q...", query, i, got[i], want[i])
			}
		}
	}
	if got := lines("type=Histograms" + filter); len(got) != 1 || !strings.HasPrefix(got[0], "cluster.chat.upstream_rq_time: P0(") {
		t.Errorf("/stats?type=Histograms: %q, want the one histogram", got)
	}
	_, _, prom := do(t, "GET", h.admin+"/stats/prometheus?type=Gauges", nil, nil)
	if !strings.Contains(string(prom), "# TYPE envoy_cluster_upstream_rq_active gauge") || strings.Contains(string(prom), " counter\n") || strings.Contains(string(prom), " histogram\n") {
		t.Errorf("/stats/prometheus?type=Gauges lists other kinds:\n%s", prom)
	}
	for _, path := range []string{"/stats?type=counters", "/stats/prometheus?type=Bogus"} {
		if code, _, body := do(t, "GET", h.admin+path, nil, nil); code != http.StatusBadRequest || string(body) != "invalid &type= param\n" {
			t.Errorf("%s: %d %q, want 400 \"invalid &type= param\"", path, code, body)
		}
	}
}
