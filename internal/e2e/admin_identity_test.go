package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/internaltls"
	proxyadminv1 "github.com/gantry-dev/gantry/proto/proxyadmin/v1"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// identityCreds are the credentials of a client presenting certFile/keyFile, verifying the server
// against the CA of dir under the dialled address (every generated server certificate is valid for
// 127.0.0.1), so a refusal can only come from what the server thinks of the client's certificate.
func identityCreds(t *testing.T, dir, certFile, keyFile string) credentials.TransportCredentials {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.crt holds no certificate")
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS13})
}

// adminMethods are the full names of every RPC of the admin gRPC service, from its descriptor: a
// method added later is in the table without touching this test.
func adminMethods() []string {
	var out []string
	for _, m := range proxyadminv1.ProxyAdminService_ServiceDesc.Methods {
		out = append(out, "/"+proxyadminv1.ProxyAdminService_ServiceDesc.ServiceName+"/"+m.MethodName)
	}
	return out
}

// TestAdminGRPCAnswersOnlyTheGateway: every internal identity but the gateway's (a service's
// certificate, the direct callers' client.crt, any other leaf of the internal CA) gets
// PermissionDenied from every admin gRPC method, and from the listener's health and reflection
// services; nothing they send drains or stops the gateway. client.crt still reaches the service
// APIs. The gateway's own certificate is answered by every method, QuitQuitQuit last.
func TestAdminGRPCAnswersOnlyTheGateway(t *testing.T) {
	s := startStack(t, nil)
	dir := s.cfg.InternalTLS.Dir
	otherDir := filepath.Join(t.TempDir(), "other")
	if err := internaltls.Init(dir, []internaltls.LeafSpec{{Name: "gantry-other", Server: true, Dir: otherDir}}, nil); err != nil {
		t.Fatal(err)
	}
	denied := map[string]credentials.TransportCredentials{
		"service.crt":             identityCreds(t, dir, filepath.Join(dir, "service.crt"), filepath.Join(dir, "service.key")),
		"client.crt":              identityCreds(t, dir, filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")),
		"another leaf of the CA":  identityCreds(t, dir, filepath.Join(otherDir, "tls.crt"), filepath.Join(otherDir, "tls.key")),
		"a client leaf from Init": initClientCreds(t, dir),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for identity, creds := range denied {
		conn, err := grpc.NewClient(s.AdminGRPCAddr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		for _, method := range adminMethods() {
			err := conn.Invoke(ctx, method, &emptypb.Empty{}, &httpbody.HttpBody{})
			if status.Code(err) != codes.PermissionDenied {
				t.Errorf("%s → %s: %v, want PermissionDenied", identity, method, err)
			}
		}
		if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s → admin health: %v, want PermissionDenied", identity, err)
		}
		if stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx); err == nil {
			if _, err = stream.Recv(); status.Code(err) != codes.PermissionDenied {
				t.Errorf("%s → admin reflection: %v, want PermissionDenied", identity, err)
			}
		} else if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s → admin reflection: %v", identity, err)
		}
	}
	// Nothing they sent took effect: the gateway is not draining and still serves.
	if r := s.get("/healthcheck"); r.code != http.StatusOK {
		t.Fatalf("/healthcheck after the refused admin calls: %d %s", r.code, r.body)
	}

	// client.crt is the direct callers' certificate: the service APIs answer it.
	if _, err := secretsv1.NewSecretsServiceClient(s.dial(s.SecretsAddr)).GenerateValue(
		metadata.AppendToOutgoingContext(ctx, "authorization", s.asUser), &secretsv1.GenerateValueRequest{}); err != nil {
		t.Errorf("client.crt → secrets API: %v", err)
	}

	// The gateway's certificate: every method answers (the admin HTTP listener's own path).
	gw := identityCreds(t, dir, filepath.Join(dir, "gateway.crt"), filepath.Join(dir, "gateway.key"))
	conn, err := grpc.NewClient(s.AdminGRPCAddr, grpc.WithTransportCredentials(gw))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	quit := "/" + proxyadminv1.ProxyAdminService_ServiceDesc.ServiceName + "/QuitQuitQuit"
	for _, method := range adminMethods() {
		if method == quit {
			continue // last, below
		}
		if err := conn.Invoke(ctx, method, &emptypb.Empty{}, &httpbody.HttpBody{}); err != nil {
			t.Errorf("gateway.crt → %s: %v", method, err)
		}
	}
	if err := conn.Invoke(ctx, "/"+proxyadminv1.ProxyAdminService_ServiceDesc.ServiceName+"/PassHealthcheck", &emptypb.Empty{}, &httpbody.HttpBody{}); err != nil {
		t.Fatal(err)
	}
	if err := conn.Invoke(ctx, quit, &emptypb.Empty{}, &httpbody.HttpBody{}); err != nil {
		t.Fatalf("gateway.crt → QuitQuitQuit: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("stack stopped with %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the stack still runs after the gateway's QuitQuitQuit")
	}
}

// initClientCreds issues a client-only leaf named like the direct callers' certificate with
// internaltls.Init (as `gantry tls init --leaf client:DIR` does) and returns its credentials.
func initClientCreds(t *testing.T, caDir string) credentials.TransportCredentials {
	t.Helper()
	out := filepath.Join(t.TempDir(), "client")
	spec := internaltls.ClientLeaf
	spec.Dir = out
	if err := internaltls.Init(caDir, []internaltls.LeafSpec{spec}, nil); err != nil {
		t.Fatal(err)
	}
	return identityCreds(t, caDir, filepath.Join(out, internaltls.LeafCertFile), filepath.Join(out, internaltls.LeafKeyFile))
}

// TestSplitTargetsWithTheirOwnLeaves is the compose layout: a one-shot init (gantry tls init) holds
// the CA key and issues every process a leaf of its own; secrets+chat and the gateway then run with
// only their own folder (ca.crt, tls.crt, tls.key) and no CA key. They trust each other, the gateway's
// identity is still the only one the admin gRPC listener answers, and the services' leaf is refused
// there.
func TestSplitTargetsWithTheirOwnLeaves(t *testing.T) {
	root := t.TempDir()
	caDir, svcDir, gwDir := filepath.Join(root, "ca"), filepath.Join(root, "services"), filepath.Join(root, "gateway")
	svcSpec, gwSpec := internaltls.ServiceLeaf, internaltls.GatewayLeaf
	svcSpec.Dir, gwSpec.Dir = svcDir, gwDir
	if err := internaltls.Init(caDir, []internaltls.LeafSpec{svcSpec, gwSpec}, nil); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{svcDir, gwDir} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Name() != internaltls.LeafCAFile && e.Name() != internaltls.LeafCertFile && e.Name() != internaltls.LeafKeyFile {
				t.Errorf("%s holds %s; a leaf's folder holds only ca.crt, tls.crt and tls.key", dir, e.Name())
			}
		}
	}
	own := func(dir string) func(*stack.Config) {
		return func(c *stack.Config) {
			c.InternalTLS.Dir = ""
			c.InternalTLS.CAFile = filepath.Join(dir, internaltls.LeafCAFile)
			c.InternalTLS.CertFile = filepath.Join(dir, internaltls.LeafCertFile)
			c.InternalTLS.KeyFile = filepath.Join(dir, internaltls.LeafKeyFile)
		}
	}
	services := startStack(t, func(c *stack.Config) {
		c.Target = "secrets,chat"
		own(svcDir)(c)
	})
	gw := splitGateway(t, services, func(c *stack.Config) {
		c.DataDir = t.TempDir()
		own(gwDir)(c)
	})
	gw.do("GET", gw.rest+"/v1/value_generator", "", nil).must(t, http.StatusOK)
	gw.do("GET", gw.rest+"/api/v1/chat/get_team/gantry-team", "", nil).must(t, http.StatusOK)
	if r := gw.admin("/server_info"); r.code != http.StatusOK {
		t.Errorf("admin HTTP → admin gRPC with the gateway's own leaf: %d %s", r.code, r.body)
	}
	conn, err := grpc.NewClient(gw.AdminGRPCAddr, grpc.WithTransportCredentials(
		identityCreds(t, caDir, filepath.Join(svcDir, internaltls.LeafCertFile), filepath.Join(svcDir, internaltls.LeafKeyFile))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, method := range adminMethods() {
		if err := conn.Invoke(ctx, method, &emptypb.Empty{}, &httpbody.HttpBody{}); status.Code(err) != codes.PermissionDenied {
			t.Errorf("the services' leaf → %s: %v, want PermissionDenied", method, err)
		}
	}
}
