package internaltls

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/gantry-dev/gantry/pkg/grpcserver"
	"github.com/gantry-dev/gantry/pkg/inprocgrpc"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/memconn"
)

func load(t *testing.T, dir string) *Internal {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Dir = dir
	in, err := Load(cfg, "", logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func TestGeneratedPKIIsCreatedOnceAndReloaded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	first := load(t, dir)
	for _, f := range []string{"ca.crt", "ca.key", "gateway.crt", "gateway.key", "service.crt", "service.key", "client.crt", "client.key"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, st.Mode().Perm())
		}
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Errorf("folder mode %v, want 0700", st.Mode().Perm())
	}
	second := load(t, dir)
	if !bytes.Equal(first.gateway.Certificate[0], second.gateway.Certificate[0]) || !first.pool.Equal(second.pool) {
		t.Error("a second start issued new certificates instead of loading them")
	}
	if !hasName(first.gateway.Leaf, DefaultGatewayName) || !hasName(first.service.Leaf, DefaultServerName) || hasName(first.service.Leaf, DefaultGatewayName) {
		t.Error("certificate names are wrong")
	}
}

func TestConcurrentStartsShareOneCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	const n = 8
	got := make([]*Internal, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { got[i] = load(t, dir) })
	}
	wg.Wait()
	for i := 1; i < n; i++ {
		if !got[0].pool.Equal(got[i].pool) || !bytes.Equal(got[0].service.Certificate[0], got[i].service.Certificate[0]) {
			t.Fatalf("start %d saw another CA or certificate", i)
		}
	}
}

func TestBadFilesAreRefused(t *testing.T) {
	fresh := func(t *testing.T) string {
		dir := filepath.Join(t.TempDir(), "tls")
		load(t, dir)
		return dir
	}
	cfgFor := func(dir string) Config { c := DefaultConfig(); c.Dir = dir; return c }
	t.Run("key readable by others", func(t *testing.T) {
		dir := fresh(t)
		if err := os.Chmod(filepath.Join(dir, "service.key"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(cfgFor(dir), "", nil); err == nil || !strings.Contains(err.Error(), "lets group or others read") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("key of another certificate", func(t *testing.T) {
		dir := fresh(t)
		data, _ := os.ReadFile(filepath.Join(dir, "client.key"))
		if err := os.WriteFile(filepath.Join(dir, "gateway.key"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(cfgFor(dir), "", nil); err == nil || !strings.Contains(err.Error(), "gateway") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("certificate of another CA", func(t *testing.T) {
		dir, other := fresh(t), fresh(t)
		for _, f := range []string{"service.crt", "service.key"} {
			data, _ := os.ReadFile(filepath.Join(other, f))
			if err := os.WriteFile(filepath.Join(dir, f), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := Load(cfgFor(dir), "", nil); err == nil || !strings.Contains(err.Error(), "not signed by the internal CA") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("lost CA key with its certificate kept", func(t *testing.T) {
		dir := fresh(t)
		if err := os.Remove(filepath.Join(dir, "ca.key")); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(cfgFor(dir), "", nil); err == nil {
			t.Fatal("started with half a CA")
		}
	})
	t.Run("operator files incomplete", func(t *testing.T) {
		c := DefaultConfig()
		c.CAFile = "ca.pem"
		if err := c.Validate(); err == nil {
			t.Fatal("accepted -grpc-tls-ca-file alone")
		}
	})
}

// echoServer serves the health service and reports the metadata a call arrived with.
func serve(t *testing.T, in *Internal) (addr string, seen func() metadata.MD) {
	t.Helper()
	var mu sync.Mutex
	var last metadata.MD
	record := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		mu.Lock()
		last = md
		mu.Unlock()
		return h(ctx, req)
	})
	srv := grpcserver.New(logtest.New(t), append(in.ServerOptions(RoleService), record)...)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	return lis.Addr().String(), func() metadata.MD { mu.Lock(); defer mu.Unlock(); return last }
}

func check(addr string, creds credentials.TransportCredentials, md ...string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), md...), 5*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func TestOnlyTheGatewayMaySetGatewayMetadata(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	in := load(t, dir)
	addr, seen := serve(t, in)
	gatewayMD := []string{"x-proxy-internal", "true", "x-nginx-internal", "true", "x-forwarded-email", "admin@example.com",
		"authorization", "Basic x", "x-request-id", "r1"}

	if err := check(addr, in.ClientCredentials(RoleGateway), gatewayMD...); err != nil {
		t.Fatal(err)
	}
	if md := seen(); md.Get("x-proxy-internal")[0] != "true" || len(md.Get("x-forwarded-email")) != 1 {
		t.Errorf("the gateway's metadata was dropped: %v", md)
	}
	direct, err := DirectClientCredentials(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	for name, creds := range map[string]credentials.TransportCredentials{"client.crt": direct, "service.crt": in.ClientCredentials(RoleService)} {
		if err := check(addr, creds, gatewayMD...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		md := seen()
		for _, k := range []string{"x-proxy-internal", "x-nginx-internal", "x-forwarded-email"} {
			if len(md.Get(k)) != 0 {
				t.Errorf("%s: %s reached the service from a non-gateway peer", name, k)
			}
		}
		if md.Get("authorization")[0] != "Basic x" || md.Get("x-request-id")[0] != "r1" {
			t.Errorf("%s: a direct caller's credentials were dropped: %v", name, md)
		}
	}
}

func TestServicePortsRefusePlaintextAndForeignCertificates(t *testing.T) {
	in := load(t, filepath.Join(t.TempDir(), "tls"))
	addr, _ := serve(t, in)
	if err := check(addr, insecure.NewCredentials()); err == nil {
		t.Error("a plaintext client was served")
	}
	other := load(t, filepath.Join(t.TempDir(), "tls"))
	if err := check(addr, other.ClientCredentials(RoleGateway)); err == nil {
		t.Error("a client with another CA's gateway certificate was served")
	}
	// TLS without a client certificate.
	noCert := credentials.NewTLS(&tls.Config{RootCAs: in.pool, ServerName: DefaultServerName, MinVersion: tls.VersionTLS13})
	if err := check(addr, noCert); err == nil {
		t.Error("a client without a certificate was served")
	}
}

func TestPlaintextTrustsEveryPeer(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Plaintext = true
	core, logs := observer.New(zapcore.WarnLevel)
	in, err := Load(cfg, "", zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	if logs.FilterMessageSnippet("NOT ENCRYPTED").Len() != 1 {
		t.Errorf("plaintext started without its warning: %v", logs.All())
	}
	addr, seen := serve(t, in)
	if err := check(addr, insecure.NewCredentials(), "x-proxy-internal", "true"); err != nil {
		t.Fatal(err)
	}
	if len(seen().Get("x-proxy-internal")) != 1 {
		t.Error("plaintext mode dropped the gateway's metadata")
	}
}

// TestInProcessPeerIsTheGatewayAndCannotBeForged: a call the gateway of the process makes in process
// (grpcserver.Server.Direct with InProcessPeer) is the gateway's, with its metadata kept; the marker
// is the peer the transport sets, so no remote caller can claim it, whatever it sends: with the
// direct callers' or a service's certificate, the gateway's metadata, the in-process peer's address
// as metadata or an in-process user agent, it is not the gateway. A direct connection
// without the gateway's identity is not the gateway either: the path alone proves nothing.
func TestInProcessPeerIsTheGatewayAndCannotBeForged(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	in := load(t, dir)
	var mu sync.Mutex
	var last metadata.MD
	var fromGateway bool
	record := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		mu.Lock()
		last, fromGateway = md, in.FromGateway(ctx)
		mu.Unlock()
		return h(ctx, req)
	}
	srv := grpcserver.NewService(logtest.New(t), grpcserver.Service{Credentials: in.ServerCredentials(RoleService),
		Unary: []grpc.UnaryServerInterceptor{in.UnaryInterceptor(), record}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	seen := func() (metadata.MD, bool) { mu.Lock(); defer mu.Unlock(); return last, fromGateway }
	gatewayMD := []string{"x-proxy-internal", "true", "x-forwarded-email", "admin@example.com", "peer", "memory:secrets",
		"x-forwarded-for", "10.0.0.1", "authorization", "Basic x"}
	health := func(conn grpc.ClientConnInterface, opts ...grpc.CallOption) error {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), gatewayMD...), 5*time.Second)
		defer cancel()
		_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, opts...)
		return err
	}

	gw, err := in.InProcessPeer(memconn.Addr("secrets"))
	if err != nil {
		t.Fatal(err)
	}
	if err := health(srv.Direct(inprocgrpc.ConnOptions{Peer: gw, Authority: lis.Addr().String()})); err != nil {
		t.Fatal(err)
	}
	if md, ok := seen(); !ok || len(md.Get("x-proxy-internal")) != 1 || len(md.Get("x-forwarded-email")) != 1 {
		t.Fatalf("the in-process gateway: FromGateway %v, metadata %v", ok, md)
	}

	clientCrt, err := DirectClientCredentials(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	for name, creds := range map[string]credentials.TransportCredentials{"client.crt": clientCrt, "service.crt": in.ClientCredentials(RoleService)} {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(creds), grpc.WithUserAgent("inprocess"))
		if err != nil {
			t.Fatal(err)
		}
		if err := health(conn); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_ = conn.Close()
		if md, ok := seen(); ok || len(md.Get("x-proxy-internal")) != 0 || len(md.Get("x-forwarded-email")) != 0 || len(md.Get("x-forwarded-for")) != 0 {
			t.Errorf("%s over TCP: FromGateway %v, metadata %v", name, ok, md)
		}
	}
	// In process, but as nobody in particular: the address of the in-memory peer without the
	// gateway's certificate.
	if err := health(srv.Direct(inprocgrpc.ConnOptions{Peer: &peer.Peer{Addr: memconn.Addr("secrets")}})); err != nil {
		t.Fatal(err)
	}
	if md, ok := seen(); ok || len(md.Get("x-proxy-internal")) != 0 {
		t.Errorf("a direct connection without the gateway's identity: FromGateway %v, metadata %v", ok, md)
	}
}
