package chat

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

func TestCredentials(t *testing.T) {
	env := Credentials(func(name string) string {
		return map[string]string{"CREDENTIALS_SLACK_OAUTH_BOT_TOKEN_A1B2": "xoxb-env", "CREDENTIALS_SLACK_OAUTH_TOKEN_A1B2": "xoxp-env"}[name]
	})
	// App ids are upper-cased, as Omnibot does.
	if tok := env.tokensFor("a1b2"); tok.Bot != "xoxb-env" || tok.User != "xoxp-env" || tok.primary() != "xoxb-env" {
		t.Errorf("tokens %+v", tok)
	}
	over := env.overlay(map[string]string{"CREDENTIALS_SLACK_OAUTH_BOT_TOKEN_A1B2": "xoxb-secrets"})
	if tok := over.tokensFor("A1B2"); tok.Bot != "xoxb-secrets" || tok.User != "xoxp-env" {
		t.Errorf("overlay %+v", tok)
	}
	if tok := env.tokensFor("OTHER"); tok.usable() {
		t.Errorf("unknown app has tokens %+v", tok)
	}
	// A user token alone is enough: calls start with it.
	if tok := (BotTokens{User: "xoxp"}); !tok.usable() || tok.primary() != "xoxp" {
		t.Errorf("user-only %+v", tok)
	}
}

func TestSecretsSourceErrors(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Secrets = SecretsTokenConfig{Service: "chat", UserType: "service"}
	if _, _, err := loadCredentials(context.Background(), cfg, EnvCredentials(), nil); err == nil || !strings.HasPrefix(err.Error(), "-chat-secrets-addr") {
		t.Errorf("incomplete settings: %v", err)
	}
	cfg.Secrets = SecretsTokenConfig{Service: "chat", Addr: "127.0.0.1:1", Keyring: filepath.Join(t.TempDir(), "none.json"), AuthKey: "alias/gantry-auth", To: "gantry"}
	_, _, err := loadCredentials(context.Background(), cfg, EnvCredentials(), nil)
	if err == nil || !strings.HasPrefix(err.Error(), "-chat-secrets-service") || !strings.Contains(err.Error(), "keyring") {
		t.Errorf("missing keyring: %v", err)
	}
}
