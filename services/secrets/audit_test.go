package secrets

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/audit"
	"github.com/gantry-dev/gantry/pkg/audit/audittest"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// auditLines is an audit sink's output, read back as records: every line must be one JSON object.
type auditLines = audittest.Buffer

// deniedEntries returns the records with outcome "denied".
func deniedEntries(recs []map[string]any) []map[string]any {
	var out []map[string]any
	for _, r := range recs {
		if r["outcome"] == "denied" {
			out = append(out, r)
		}
	}
	return out
}

func wantFields(t *testing.T, got map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("audit record %s = %v, want %v (record %v)", k, got[k], v, got)
		}
	}
}

// auditedService is keyringTestService with its audit trail in lines.
func auditedService(t *testing.T, cfg Config, lines *auditLines) *Service {
	t.Helper()
	logger := logtest.New(t)
	dir := t.TempDir()
	keyring, err := kms.OpenKeyring(filepath.Join(dir, "keyring.json"), logger)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := NewService(context.Background(), cfg, Deps{Store: newTestStoreIn(t, dir, logger), KMS: keyring, Logger: logger, Audit: audit.NewWriter(lines)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return svc
}

// TestAccessDenialsAreAudited: every refusal by the ACL is on the audit log once, with who asked for
// what, and without any value.
func TestAccessDenialsAreAudited(t *testing.T) {
	lines := &auditLines{}
	cfg := DefaultConfig()
	cfg.Auth.UseAuth = false
	svc := auditedService(t, cfg, lines)
	admin := WithPrincipal(context.Background(), AnonymousPrincipal)
	name, doc := "db", "d"
	created, err := svc.CreateCredential(admin, CredentialInput{Name: &name, Documentation: &doc, Pairs: map[string]any{"password": "s3cret-value"}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.Record.ID

	api := WithPrincipal(context.Background(), Principal{Name: "api", Type: "service", AuthType: "kms"})
	for _, tc := range []struct {
		call func() error
		want map[string]any
	}{
		{func() error { _, err := svc.GetCredential(api, id, false); return err },
			map[string]any{"action": ActionMetadata, "resource": ResourceCredential, "resource_id": id}},
		{func() error {
			_, err := svc.UpdateCredential(api, id, CredentialInput{Pairs: map[string]any{"password": "x"}})
			return err
		},
			map[string]any{"action": ActionUpdate, "resource": ResourceCredential, "resource_id": id}},
		{func() error { _, _, err := svc.ListCredentials(api, nil, "", ""); return err },
			map[string]any{"action": ActionList, "resource": ResourceCredential, "resource_id": ""}},
		{func() error { _, err := svc.GetService(api, "billing", false); return err },
			map[string]any{"action": ActionGet, "resource": ResourceService, "resource_id": "billing"}},
	} {
		lines.Take(t)
		if err := tc.call(); status.Code(toStatus(zap.NewNop(), err)) != codes.PermissionDenied {
			t.Fatalf("%v: error %v, want a denial", tc.want, err)
		}
		all := lines.Take(t)
		entries := deniedEntries(all)
		if len(entries) != 1 {
			t.Fatalf("%v: %d denied audit records, want 1 (trail: %v)", tc.want, len(entries), all)
		}
		wantFields(t, entries[0], map[string]any{"principal": "api", "principal_type": "service", "auth_type": "kms", "code": "PermissionDenied"})
		wantFields(t, entries[0], tc.want)
		for _, e := range all {
			for k, v := range e {
				if s, ok := v.(string); ok && (s == "s3cret-value" || s == "x") {
					t.Errorf("a value is on the trail: %s=%q", k, s)
				}
			}
		}
	}
}

// TestRefusedAuthenticationIsAuditedWithinALimit: calls refused before there is a principal (no or
// bad credentials) are on the audit log with the method and the reason, but a flood of them cannot
// flood the log: past a burst per second they are counted, and the count is reported later.
func TestRefusedAuthenticationIsAuditedWithinALimit(t *testing.T) {
	lines := &auditLines{}
	cfg := DefaultConfig()
	cfg.Auth.UseAuth = true
	cfg.Auth.UserAuthModule = "header"
	cfg.Auth.HeaderUsername, cfg.Auth.HeaderEmail = "X-Forwarded-User", "X-Forwarded-Email"
	cfg.Auth.UserEmailSuffix = "@example.com"
	cfg.Auth.SessionSecret = "audit-test-session-secret-0123456789abcdef"
	svc := auditedService(t, cfg, lines)
	server := NewServer(svc, logtest.New(t))
	clock := time.Unix(1_800_000_000, 0)
	server.refusalAudit.Now = func() time.Time { return clock }
	intercept := server.AuthInterceptor()
	handler := func(context.Context, any) (any, error) { t.Fatal("handler called"); return nil, nil }
	info := &grpc.UnaryServerInfo{FullMethod: secretsv1.SecretsService_GetCredential_FullMethodName}
	call := func(ctx context.Context) error {
		_, err := intercept(ctx, &secretsv1.GetCredentialRequest{Id: "c0ffee"}, info, handler)
		return err
	}

	outsider := metadata.NewIncomingContext(context.Background(),
		metadata.Pairs("x-forwarded-user", "mallory", "x-forwarded-email", "mallory@evil.example"))
	if err := call(outsider); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("user outside the suffix: %v", err)
	}
	entries := deniedEntries(lines.Take(t))
	if len(entries) != 1 {
		t.Fatalf("%d denied audit records, want 1: %v", len(entries), entries)
	}
	wantFields(t, entries[0], map[string]any{"principal": "", "method": info.FullMethod, "action": "GetCredential", "resource_id": "c0ffee",
		"reason": "mallory@evil.example is not allowed to use this service", "code": "PermissionDenied"})

	clock = clock.Add(time.Second) // a fresh second: the whole burst is available to the flood
	for range 1000 {
		if err := call(context.Background()); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("no credentials: %v", err)
		}
	}
	entries = deniedEntries(lines.Take(t))
	if len(entries) == 0 || len(entries) > audit.DefaultRefusalBurst {
		t.Fatalf("1000 refusals in one second: %d audit records, want 1..%d", len(entries), audit.DefaultRefusalBurst)
	}
	wantFields(t, entries[0], map[string]any{"principal": "", "code": "Unauthenticated",
		"reason": "not authenticated: the authenticating proxy sent no user headers"})

	clock = clock.Add(time.Second)
	if err := call(context.Background()); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no credentials: %v", err)
	}
	entries = deniedEntries(lines.Take(t))
	if len(entries) != 1 {
		t.Fatalf("a refusal a second later: %d audit records, want 1", len(entries))
	}
	wantFields(t, entries[0], map[string]any{"suppressed": float64(1000 - audit.DefaultRefusalBurst)})
}

// TestCheckCallCredentials: the gateway's question before a large body is answered as the named
// method's interceptor answers it: the refusal of a call without the user headers (audited once, as
// a refused call of the named method, not of the check), OK for an allowed user, a public method OK
// without credentials, and a method the service does not know (or the check itself) a bad request.
// The check never runs the method, nor sets cookies.
func TestCheckCallCredentials(t *testing.T) {
	lines := &auditLines{}
	cfg := DefaultConfig()
	cfg.Auth.UseAuth = true
	cfg.Auth.UserAuthModule = "header"
	cfg.Auth.HeaderUsername, cfg.Auth.HeaderEmail = "X-Forwarded-User", "X-Forwarded-Email"
	cfg.Auth.UserEmailSuffix = "@example.com"
	cfg.Auth.SessionSecret = "audit-test-session-secret-0123456789abcdef"
	svc := auditedService(t, cfg, lines)
	server := NewServer(svc, logtest.New(t))
	intercept := server.AuthInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: secretsv1.SecretsService_CheckCallCredentials_FullMethodName}
	check := func(ctx context.Context, method string) error {
		_, err := intercept(ctx, &secretsv1.CheckCallCredentialsRequest{FullMethod: method}, info, func(ctx context.Context, req any) (any, error) {
			return server.CheckCallCredentials(ctx, req.(*secretsv1.CheckCallCredentialsRequest))
		})
		return err
	}
	create := secretsv1.SecretsService_CreateCredential_FullMethodName

	lines.Take(t)
	if err := check(context.Background(), create); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no user headers: %v, want Unauthenticated", err)
	}
	entries := deniedEntries(lines.Take(t))
	if len(entries) != 1 {
		t.Fatalf("%d denied audit records, want 1: %v", len(entries), entries)
	}
	wantFields(t, entries[0], map[string]any{"method": create, "action": "CreateCredential", "code": "Unauthenticated"})

	outsider := metadata.NewIncomingContext(context.Background(),
		metadata.Pairs("x-forwarded-user", "mallory", "x-forwarded-email", "mallory@evil.example"))
	if err := check(outsider, create); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("user outside the suffix: %v, want PermissionDenied", err)
	}
	// The header login's writes need the XSRF proof, as CreateCredential itself does; a read does not.
	member := metadata.NewIncomingContext(context.Background(),
		metadata.Pairs("x-forwarded-user", "alice", "x-forwarded-email", "alice@example.com"))
	if err := check(member, create); status.Code(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), "XSRF") {
		t.Fatalf("a write without the XSRF token: %v, want Unauthenticated naming XSRF", err)
	}
	if err := check(member, secretsv1.SecretsService_ListCredentials_FullMethodName); err != nil {
		t.Fatalf("a read by an allowed user: %v", err)
	}
	if err := check(context.Background(), secretsv1.SecretsService_Login_FullMethodName); err != nil {
		t.Fatalf("a public method: %v", err)
	}
	for _, method := range []string{"", "/secrets.v1.SecretsService/NotARealMethod", info.FullMethod, "/chat.v1.ChatService/SendIM"} {
		if err := check(member, method); status.Code(err) != codes.InvalidArgument {
			t.Errorf("full_method %q: %v, want InvalidArgument", method, err)
		}
	}
	for _, r := range lines.Take(t) {
		if r["method"] == info.FullMethod {
			t.Errorf("the check itself is on the trail: %v", r)
		}
	}
}
