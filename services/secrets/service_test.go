package secrets

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

func TestNextRotation(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	rotated := now.AddDate(0, 0, -10)
	decryptedLater := now.AddDate(0, 0, -2)
	decryptedEarlier := now.AddDate(0, 0, -20)
	day := func(d int) *time.Time { t := rotated.AddDate(0, 0, d); return &t }
	tests := []struct {
		name string
		cfg  Config
		rec  store.CredentialRecord
		want *time.Time
	}{
		{name: "feature off by default", rec: store.CredentialRecord{LastRotationDate: &rotated}, want: nil},
		{name: "maximum days", cfg: Config{MaximumRotationDays: 30}, rec: store.CredentialRecord{LastRotationDate: &rotated}, want: day(30)},
		{name: "smaller tag days win", cfg: Config{MaximumRotationDays: 30, RotationDaysConfig: map[string]int{"pci": 7, "slow": 90}},
			rec: store.CredentialRecord{LastRotationDate: &rotated, Tags: []string{"slow", "pci"}}, want: day(7)},
		{name: "tag days alone turn it on", cfg: Config{RotationDaysConfig: map[string]int{"pci": 7}},
			rec: store.CredentialRecord{LastRotationDate: &rotated, Tags: []string{"pci"}}, want: day(7)},
		{name: "excluded tag", cfg: Config{MaximumRotationDays: 30, TagsExcludingRotation: []string{"static"}},
			rec: store.CredentialRecord{LastRotationDate: &rotated, Tags: []string{"static"}}, want: nil},
		{name: "seen after rotation means now-ish", cfg: Config{MaximumRotationDays: 30},
			rec: store.CredentialRecord{LastRotationDate: &rotated, LastDecryptedDate: &decryptedLater}, want: &decryptedLater},
		{name: "seen before rotation does not count", cfg: Config{MaximumRotationDays: 30},
			rec: store.CredentialRecord{LastRotationDate: &rotated, LastDecryptedDate: &decryptedEarlier}, want: day(30)},
		{name: "legacy record without rotation date is due now", cfg: Config{MaximumRotationDays: 30}, rec: store.CredentialRecord{}, want: &now},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Service{cfg: tt.cfg, now: func() time.Time { return now }}
			got := s.nextRotation(&tt.rec)
			if (got == nil) != (tt.want == nil) || (got != nil && !got.Equal(*tt.want)) {
				t.Errorf("nextRotation = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestConfidantVariables(t *testing.T) {
	env := map[string]string{
		"MAINTENANCE_MODE": "no", // Confidant: any other non-empty string is true
		"IGNORE_CONFLICTS": "False", "HISTORY_PAGE_LIMIT": "25", "KMS_READ_TIMEOUT": "2.5",
		"ROTATION_DAYS_CONFIG": `{"pci": 7}`, "TAGS_EXCLUDING_ROTATION": `["static"]`, "CLIENT_CONFIG": `{"a": 1}`,
		"SCOPED_AUTH_KEYS": `{"alias/a": "prod"}`, "KMS_MASTER_KEY": "alias/confidant",
	}
	cfg := DefaultConfig()
	if err := loadEnv(&cfg, env); err != nil {
		t.Fatal(err)
	}
	if !cfg.MaintenanceMode || cfg.IgnoreConflicts || cfg.HistoryPageLimit != 25 || cfg.KMSReadTimeout != 2500*time.Millisecond ||
		cfg.RotationDaysConfig["pci"] != 7 || cfg.TagsExcludingRotation[0] != "static" || cfg.ScopedAuthKeys["alias/a"] != "prod" ||
		cfg.KMSMasterKey != "alias/confidant" || cfg.ClientConfig["a"] != 1.0 {
		t.Errorf("parsed %+v", cfg)
	}
	for name, value := range map[string]string{
		"HISTORY_PAGE_LIMIT": "ten", "ROTATION_DAYS_CONFIG": "{", "KMS_READ_TIMEOUT": "-1",
		"SCOPED_AUTH_KEYS": `{"alias/a": "prod", "alias/b": "prod"}`,
	} {
		cfg := DefaultConfig()
		err := loadEnv(&cfg, map[string]string{name: value})
		if err == nil || !strings.HasPrefix(err.Error(), name+" (env):") {
			t.Errorf("%s=%q: err %v, want one naming the variable", name, value, err)
		}
	}
}

func TestWebhookRetriesThenGivesUp(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	failures := 2
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		user, pass, _ := r.BasicAuth()
		mu.Lock()
		defer mu.Unlock()
		bodies = append(bodies, user+":"+pass+" "+string(b))
		if failures > 0 {
			failures--
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer receiver.Close()

	hooks := newWebhooks(webhookConfig{URL: receiver.URL, Username: "hook", Password: "pw", Backoff: time.Millisecond}, logtest.New(t))
	hooks.send(webhookEvent{EventType: eventServiceUpdate, Services: []string{"api"}, Credentials: []string{"c1"}})
	hooks.close()
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 3 {
		t.Fatalf("%d deliveries, want 2 failures then 1 success: %v", len(bodies), bodies)
	}
	var ev webhookEvent
	if err := json.Unmarshal([]byte(strings.SplitN(bodies[2], " ", 2)[1]), &ev); err != nil || ev.EventType != eventServiceUpdate ||
		!strings.HasPrefix(bodies[2], "hook:pw ") {
		t.Errorf("delivered %q (%v)", bodies[2], err)
	}
}

func TestWebhookQueueFullDropsInsteadOfBlocking(t *testing.T) {
	block := make(chan struct{})
	receiver := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-block }))
	defer receiver.Close()
	hooks := newWebhooks(webhookConfig{URL: receiver.URL, QueueSize: 1, Attempts: 1, Timeout: 5 * time.Second}, logtest.New(t))
	for range 50 {
		hooks.send(webhookEvent{EventType: eventCredentialUpdate}) // must never block the caller
	}
	close(block)
	hooks.close()
}

func TestFormatTime(t *testing.T) {
	for in, want := range map[time.Time]string{
		time.Date(2026, 11, 21, 13, 8, 0, 123456789, time.UTC):            "2026-11-21T13:08:00.123456+00:00",
		time.Date(2026, 11, 21, 13, 8, 0, 0, time.UTC):                    "2026-11-21T13:08:00+00:00",
		time.Date(2026, 11, 21, 14, 8, 0, 0, time.FixedZone("CET", 3600)): "2026-11-21T13:08:00+00:00",
	} {
		if got := FormatTime(in); got != want {
			t.Errorf("FormatTime(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestDefaultACL(t *testing.T) {
	user := Principal{Name: "alice@example.com", Type: "user"}
	svc := Principal{Name: "api", Type: "service", AuthType: "kms"}
	acl := DefaultACL{CertificateAllowed: func(p Principal, ca, cn string, _ []string) bool { return ca == "prod" && cn == p.Name+".example.com" }}
	tests := []struct {
		p                    Principal
		resource, action, id string
		extra                map[string]any
		want                 bool
	}{
		{user, ResourceCredential, ActionGet, "c1", nil, true},
		{user, ResourceService, ActionUpdate, "api", nil, true},
		{user, ResourceJWT, ActionGet, "anyone", nil, true},
		{user, ResourceCA, ActionList, "", nil, false},
		{user, ResourceCertificate, ActionGet, "x", nil, false},
		{svc, ResourceService, ActionGet, "api", nil, true},
		{svc, ResourceService, ActionMetadata, "api", nil, true},
		{svc, ResourceService, ActionGet, "other", nil, false},
		{svc, ResourceService, ActionUpdate, "api", nil, false},
		{svc, ResourceCredential, ActionGet, "c1", nil, false},
		{svc, ResourceCredential, ActionList, "", nil, false},
		{svc, ResourceCA, ActionGet, "prod", nil, true},
		{svc, ResourceCertificate, ActionGet, "api.example.com", map[string]any{"ca": "prod"}, true},
		{svc, ResourceCertificate, ActionGet, "evil.example.com", map[string]any{"ca": "prod"}, false},
		{svc, ResourceJWT, ActionGet, "api", nil, false},
	}
	for _, tt := range tests {
		if got := acl.Allowed(context.Background(), tt.p, tt.resource, tt.action, tt.id, tt.extra); got != tt.want {
			t.Errorf("%s %s %s/%s(%s) = %v, want %v", tt.p.Type, tt.p.Name, tt.resource, tt.action, tt.id, got, tt.want)
		}
	}
}
