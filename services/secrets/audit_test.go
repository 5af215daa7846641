package secrets

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// deniedEntries returns the audit log entries with result "denied".
func deniedEntries(logs *observer.ObservedLogs) []observer.LoggedEntry {
	return logs.FilterLoggerName("audit").FilterFieldKey("result").Filter(func(e observer.LoggedEntry) bool {
		return e.ContextMap()["result"] == "denied"
	}).All()
}

func wantFields(t *testing.T, e observer.LoggedEntry, want map[string]any) {
	t.Helper()
	got := e.ContextMap()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("audit entry %s = %v, want %v (entry %v)", k, got[k], v, got)
		}
	}
}

// TestAccessDenialsAreAudited: every refusal by the ACL is on the audit log once, with who asked for
// what, and without any value.
func TestAccessDenialsAreAudited(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	cfg := DefaultConfig()
	cfg.Auth.UseAuth = false
	svc, _ := keyringTestService(t, cfg, zap.New(core))
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
			map[string]any{"action": ActionMetadata, "resource": ResourceCredential, "id": id}},
		{func() error {
			_, err := svc.UpdateCredential(api, id, CredentialInput{Pairs: map[string]any{"password": "x"}})
			return err
		},
			map[string]any{"action": ActionUpdate, "resource": ResourceCredential, "id": id}},
		{func() error { _, _, err := svc.ListCredentials(api, nil, "", ""); return err },
			map[string]any{"action": ActionList, "resource": ResourceCredential, "id": ""}},
		{func() error { _, err := svc.GetService(api, "billing", false); return err },
			map[string]any{"action": ActionGet, "resource": ResourceService, "id": "billing"}},
	} {
		logs.TakeAll()
		if err := tc.call(); status.Code(toStatus(zap.NewNop(), err)) != codes.PermissionDenied {
			t.Fatalf("%v: error %v, want a denial", tc.want, err)
		}
		entries := deniedEntries(logs)
		if len(entries) != 1 {
			t.Fatalf("%v: %d denied audit entries, want 1 (log: %v)", tc.want, len(entries), logs.All())
		}
		wantFields(t, entries[0], map[string]any{"principal": "api", "principal_type": "service"})
		wantFields(t, entries[0], tc.want)
		for _, e := range logs.All() {
			for k, v := range e.ContextMap() {
				if s, ok := v.(string); ok && (s == "s3cret-value" || s == "x") {
					t.Errorf("a value is on the log: %s=%q", k, s)
				}
			}
		}
	}
}

// TestRefusedAuthenticationIsAuditedWithinALimit: calls refused before there is a principal (no or
// bad credentials) are on the audit log with the method and the reason, but a flood of them cannot
// flood the log: past a burst per second they are counted, and the count is reported later.
func TestRefusedAuthenticationIsAuditedWithinALimit(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	cfg := DefaultConfig()
	cfg.Auth.UseAuth = true
	cfg.Auth.UserAuthModule = "header"
	cfg.Auth.HeaderUsername, cfg.Auth.HeaderEmail = "X-Forwarded-User", "X-Forwarded-Email"
	cfg.Auth.UserEmailSuffix = "@example.com"
	cfg.Auth.SessionSecret = "audit-test-session-secret-0123456789abcdef"
	svc, _ := keyringTestService(t, cfg, zap.New(core))
	server := NewServer(svc, zap.New(core))
	clock := time.Unix(1_800_000_000, 0)
	server.refusalAudit.now = func() time.Time { return clock }
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
	entries := deniedEntries(logs)
	if len(entries) != 1 {
		t.Fatalf("%d denied audit entries, want 1: %v", len(entries), logs.All())
	}
	wantFields(t, entries[0], map[string]any{"principal": "", "action": info.FullMethod, "id": "c0ffee",
		"reason": "mallory@evil.example is not allowed to use this service", "code": "PermissionDenied"})

	logs.TakeAll()
	clock = clock.Add(time.Second) // a fresh second: the whole burst is available to the flood
	for range 1000 {
		if err := call(context.Background()); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("no credentials: %v", err)
		}
	}
	entries = deniedEntries(logs)
	if len(entries) == 0 || len(entries) > refusalAuditBurst {
		t.Fatalf("1000 refusals in one second: %d audit entries, want 1..%d", len(entries), refusalAuditBurst)
	}
	wantFields(t, entries[0], map[string]any{"principal": "", "code": "Unauthenticated",
		"reason": "not authenticated: the authenticating proxy sent no user headers"})

	logs.TakeAll()
	clock = clock.Add(time.Second)
	if err := call(context.Background()); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no credentials: %v", err)
	}
	entries = deniedEntries(logs)
	if len(entries) != 1 {
		t.Fatalf("a refusal a second later: %d audit entries, want 1", len(entries))
	}
	wantFields(t, entries[0], map[string]any{"suppressed": int64(1000 - refusalAuditBurst)})
}
