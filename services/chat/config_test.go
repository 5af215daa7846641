package chat

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	} {
		err := cfg.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), "-chat-") {
			t.Errorf("Validate(%+v) = %v, want an error naming the chat- setting", cfg, err)
		}
	}
}
