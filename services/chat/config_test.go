package chat

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/settings"
)

func TestParseFileConfig(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr string
	}{
		{name: "omnibot file with extra keys", yaml: "teams: {example-team: T12345678}\nbots: {example-team: {example-bot: A87654321}}\nhandlers: {message_handlers: []}\nauthorization:\n  checks:\n    - module: \"omnibot.authnz:allowed_paths\"\n      kwargs: {paths: [\"/api/v1/chat/get_team/.*\"]}\n"},
		{name: "teams missing", yaml: "bots: {}\n", wantErr: "teams: required"},
		{name: "bot of unknown team", yaml: "teams: {a: T1}\nbots: {b: {bot: A1}}\n", wantErr: `team "b" is not listed`},
		{name: "empty team id", yaml: "teams: {a: \"\"}\n", wantErr: "empty name or id"},
		{name: "not yaml", yaml: "teams: [", wantErr: "invalid YAML"},
		{name: "primary bot not a bot", yaml: "teams: {a: T1}\nbots: {a: {b: A1}}\nprimary_bot: {a: c}\n", wantErr: "primary_bot"},
		{name: "bad authorization", yaml: "teams: {a: T1}\nauthorization: {checks: [{module: nope}]}\n", wantErr: "authorization: checks[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseFileConfig([]byte(tt.yaml))
			if tt.wantErr == "" && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestConfigValidateNamesTheSetting(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("bots: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	with := func(mutate func(*Config)) Config {
		c := DefaultConfig()
		c.Listen = "127.0.0.1:0"
		mutate(&c)
		return c
	}
	for _, cfg := range []Config{
		with(func(c *Config) { c.Listen = "nonsense" }),
		with(func(c *Config) { c.ConfigFile = missing }),
		with(func(c *Config) { c.ConfigFile = bad }),
		with(func(c *Config) { c.SlackAPIURL = "slack.com/api" }),
		with(func(c *Config) { c.SlackAttemptTimeout = 0 }),
		with(func(c *Config) { c.SlackRetries = -1 }),
		with(func(c *Config) { c.SlackMaxRetryAfter = -time.Second }),
		with(func(c *Config) { c.CacheTTL = 0 }),
		with(func(c *Config) { c.NegativeCacheTTL = -time.Second }),
		with(func(c *Config) { c.NegativeCacheTTL = time.Hour }),
		with(func(c *Config) { c.Secrets.Service = "chat"; c.Secrets.Addr = "bad" }),
		with(func(c *Config) { c.ApprovalsPollInterval = -time.Second }),
		with(func(c *Config) { c.ApprovalsPollInterval = time.Millisecond }),
	} {
		err := cfg.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), "-chat-") {
			t.Errorf("Validate(%+v) = %v, want an error naming the chat- setting", cfg, err)
		}
	}
}

// TestShortCacheTTLDerivesTheNegativeTTL: -chat-cache-ttl under 30 s starts, the negative TTL left
// unset following it down (it stopped the start: "-chat-negative-cache-ttl must be between 0 and
// -chat-cache-ttl"); a negative TTL given longer than the cache TTL is still refused.
func TestShortCacheTTLDerivesTheNegativeTTL(t *testing.T) {
	parse := func(args ...string) (Config, error) {
		c := DefaultConfig()
		if err := settings.New(c.Settings()).Parse(args, settings.MapLookup(nil)); err != nil {
			t.Fatal(err)
		}
		return c, c.Validate()
	}
	c, err := parse("-chat-cache-ttl=10s")
	if err != nil {
		t.Fatalf("-chat-cache-ttl=10s: %v", err)
	}
	if got := c.negativeCacheTTL(); got != 10*time.Second {
		t.Errorf("negative TTL %v, want the cache TTL 10s", got)
	}
	if c, err = parse(); err != nil || c.negativeCacheTTL() != 30*time.Second {
		t.Errorf("defaults: negative TTL %v, %v; want 30s", c.negativeCacheTTL(), err)
	}
	if c, err = parse("-chat-cache-ttl=10s", "-chat-negative-cache-ttl=5s"); err != nil || c.negativeCacheTTL() != 5*time.Second {
		t.Errorf("given 5s: %v, %v", c.negativeCacheTTL(), err)
	}
	for _, given := range []string{"20s", "30s"} {
		if _, err := parse("-chat-cache-ttl=10s", "-chat-negative-cache-ttl="+given); err == nil || !strings.HasPrefix(err.Error(), "-chat-negative-cache-ttl") {
			t.Errorf("negative TTL %s beside a 10s cache TTL: %v, want refused", given, err)
		}
	}
	// The environment counts as given, as the flag does.
	c = DefaultConfig()
	tab := settings.New(c.Settings())
	if err := tab.Parse(nil, settings.MapLookup(map[string]string{"GANTRY_CHAT_CACHE_TTL": "10s", "GANTRY_CHAT_NEGATIVE_CACHE_TTL": "30s"})); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err == nil {
		t.Error("GANTRY_CHAT_NEGATIVE_CACHE_TTL=30s beside a 10s cache TTL was accepted")
	}
}

// TestApprovalsPollIntervalSetting: -chat-approvals-poll-interval is 2s by default, 0 turns the
// polling off, and a poll faster than 100ms (which would only load the secrets service) is refused.
func TestApprovalsPollIntervalSetting(t *testing.T) {
	parse := func(args ...string) (Config, error) {
		c := DefaultConfig()
		if err := settings.New(c.Settings()).Parse(args, settings.MapLookup(nil)); err != nil {
			t.Fatal(err)
		}
		return c, c.Validate()
	}
	if c, err := parse(); err != nil || c.ApprovalsPollInterval != 2*time.Second {
		t.Errorf("default: %v, %v; want 2s", c.ApprovalsPollInterval, err)
	}
	for _, ok := range []string{"0", "100ms", "1m"} {
		if _, err := parse("-chat-approvals-poll-interval=" + ok); err != nil {
			t.Errorf("-chat-approvals-poll-interval=%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"-1s", "10ms"} {
		if _, err := parse("-chat-approvals-poll-interval=" + bad); err == nil || !strings.HasPrefix(err.Error(), "-chat-approvals-poll-interval") {
			t.Errorf("-chat-approvals-poll-interval=%s: %v, want refused", bad, err)
		}
	}
}
