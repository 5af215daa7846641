package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/internaltls"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// healthOver calls the health service of addr with creds.
func healthOver(addr string, creds credentials.TransportCredentials) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// TestInternalTLSByDefault: with no configuration the stack creates its internal CA in the data
// folder, every gRPC port requires a client certificate from it, and a direct caller with the
// generated client certificate authenticates exactly as before.
func TestInternalTLSByDefault(t *testing.T) {
	s := startStack(t, func(c *stack.Config) {
		c.InternalTLS.Dir = "" // the default: <data-dir>/tls
		c.Secrets.Auth.UserAuthModule = "header"
		c.Secrets.Auth.HeaderUsername = "X-Forwarded-User"
		c.Secrets.Auth.HeaderEmail = "X-Forwarded-Email"
	})
	dir := filepath.Join(s.cfg.DataDir, "tls")
	for _, f := range []string{"ca.crt", "ca.key", "gateway.crt", "gateway.key", "service.crt", "service.key", "client.crt", "client.key"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("internal PKI: %v", err)
		}
	}
	// The REST API works through the gateway, which reaches the services over mutual TLS.
	s.do("GET", s.rest+"/v1/value_generator", "", nil).must(t, http.StatusOK)
	s.do("GET", s.rest+"/api/v1/chat/get_team/gantry-team", "", nil).must(t, http.StatusOK)

	foreign, err := internaltls.Load(internaltls.Config{Dir: filepath.Join(t.TempDir(), "other"), ServerName: internaltls.DefaultServerName,
		GatewayName: internaltls.DefaultGatewayName}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, addr := range map[string]string{"secrets": s.SecretsAddr, "chat": s.ChatAddr, "admin gRPC": s.AdminGRPCAddr} {
		if err := healthOver(addr, insecure.NewCredentials()); err == nil {
			t.Errorf("%s: a plaintext client was served", name)
		}
		if err := healthOver(addr, foreign.ClientCredentials(internaltls.RoleGateway)); err == nil {
			t.Errorf("%s: a gateway certificate of another CA was accepted", name)
		}
	}

	// The generated client certificate: kmsauth as before; the header-login headers are the
	// gateway's to assert, so sent directly they log nobody in.
	client := secretsv1.NewSecretsServiceClient(s.dial(s.SecretsAddr))
	authed := metadata.AppendToOutgoingContext(context.Background(), "authorization", s.asUser)
	if _, err := client.GenerateValue(authed, &secretsv1.GenerateValueRequest{}); err != nil {
		t.Fatalf("kmsauth over gRPC with client.crt: %v", err)
	}
	forged := metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-user", "admin", "x-forwarded-email", "admin@example.com")
	if _, err := client.ListCredentials(forged, &secretsv1.ListCredentialsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("header login sent by a direct caller: %v, want Unauthenticated", err)
	}
	// Through the gateway's own certificate they count (the gateway only forwards them from the
	// authenticating proxy, via -forward-headers).
	asGateway := secretsv1.NewSecretsServiceClient(s.dialAsGateway(s.SecretsAddr))
	if _, err := asGateway.ListCredentials(forged, &secretsv1.ListCredentialsRequest{}); err != nil {
		t.Errorf("header login from the gateway: %v", err)
	}
}

// TestSplitTargetsShareTheDataFolderCA runs secrets and chat in one process and the gateway in
// another on one data folder: the first creates the CA, the second loads it, and they trust each
// other.
func TestSplitTargetsShareTheDataFolderCA(t *testing.T) {
	services := startStack(t, func(c *stack.Config) {
		c.Target = "secrets,chat"
		c.InternalTLS.Dir = ""
	})
	gw := splitGateway(t, services, nil)
	gw.do("GET", gw.rest+"/v1/value_generator", "", nil).must(t, http.StatusOK)
	gw.do("GET", gw.rest+"/api/v1/chat/get_team/gantry-team", "", nil).must(t, http.StatusOK)
	// A gateway with a CA of its own cannot reach them.
	other := splitGateway(t, services, func(c *stack.Config) { c.DataDir = t.TempDir() })
	if r := other.do("GET", other.rest+"/v1/value_generator", "", nil); r.code != http.StatusServiceUnavailable {
		t.Errorf("a gateway of another CA: %d %s, want 503", r.code, r.body)
	}
}

// TestPlaintextOptOut runs the stack with -grpc-plaintext: everything works without certificates.
func TestPlaintextOptOut(t *testing.T) {
	s := startStack(t, func(c *stack.Config) { c.InternalTLS.Plaintext = true })
	s.do("GET", s.rest+"/v1/value_generator", "", nil).must(t, http.StatusOK)
	if err := healthOver(s.SecretsAddr, insecure.NewCredentials()); err != nil {
		t.Errorf("plaintext client with -grpc-plaintext: %v", err)
	}
}
