package chat

import (
	"context"
	"encoding/base64"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kmsauth"
	"github.com/gantry-dev/gantry/pkg/wirekeys"
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

// TestServiceTokenIsReusedThenMintedAgain: the per-call credential of the secrets connection reuses
// its token for five minutes, then mints a fresh one, so every call carries a token the secrets
// service accepts (kmsauth backdates a token by three minutes: a ten-minute one is valid for seven
// after it is minted).
func TestServiceTokenIsReusedThenMintedAgain(t *testing.T) {
	ring, err := kms.OpenKeyring(filepath.Join(t.TempDir(), "keyring.json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok := &serviceToken{ring: ring, authKey: kms.AliasAuth, to: "gantry", user: kmsauth.Username{Version: 2, UserType: "service", From: "gantry-chat"},
		now: func() time.Time { return now }}
	v, err := kmsauth.NewValidator(context.Background(), ring, kmsauth.Config{To: "gantry", AuthKey: kms.AliasAuth, MinVersion: 1, MaxVersion: 2,
		UserTypes: []string{"service"}, MaxLifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	header := func() string {
		t.Helper()
		md, err := tok.GetRequestMetadata(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		h := md[wirekeys.Authorization]
		raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(h, "Basic "))
		user, token, _ := strings.Cut(string(raw), ":")
		if err != nil || user != "2/service/gantry-chat" {
			t.Fatalf("header %q: user %q, %v", h, user, err)
		}
		return token
	}
	first := header()
	if _, err := v.Validate(context.Background(), "2/service/gantry-chat", first); err != nil {
		t.Errorf("the token is refused: %v", err)
	}
	now = now.Add(serviceTokenReuse - time.Second)
	if header() != first {
		t.Error("a token was minted again before serviceTokenReuse")
	}
	now = now.Add(time.Second)
	second := header()
	if second == first {
		t.Error("the token was reused after serviceTokenReuse")
	}
	if tok.RequireTransportSecurity() {
		t.Error("RequireTransportSecurity: a plaintext process (-grpc-plaintext) could not call the secrets service")
	}
}
