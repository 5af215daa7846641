package chat

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kmsauth"
	"github.com/gantry-dev/gantry/pkg/settings"
	"github.com/gantry-dev/gantry/pkg/wirekeys"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// Omnibot's credential variables; the app id is appended upper-cased.
const (
	envBotToken          = "CREDENTIALS_SLACK_OAUTH_BOT_TOKEN_"
	envUserToken         = "CREDENTIALS_SLACK_OAUTH_TOKEN_"
	envVerificationToken = "CREDENTIALS_SLACK_VERIFICATION_TOKEN_"
	// envSigningSecret is gantry's addition beside Omnibot's: the app's request signing secret.
	envSigningSecret = "CREDENTIALS_SLACK_SIGNING_SECRET_"
)

// BotTokens are the Slack credentials of one app. They are never logged.
type BotTokens struct {
	// Bot is the bot token (xoxb-...), used for every call.
	Bot string
	// User is the user token (xoxp-...), used once more when the bot token lacks a scope or the bot
	// is not in the channel.
	User string
	// Verification is the legacy verification token of Slack's requests; read for compatibility.
	Verification string
	// SigningSecret verifies the signature of Slack's requests to the receivers.
	SigningSecret string
}

// usable reports whether the bot can call Slack at all.
func (t BotTokens) usable() bool { return t.Bot != "" || t.User != "" }

// primary is the token calls start with: the bot token, else the user token.
func (t BotTokens) primary() string {
	if t.Bot != "" {
		return t.Bot
	}
	return t.User
}

// Credentials maps variable names (CREDENTIALS_SLACK_..._<APPID>) to values.
type Credentials func(name string) string

// EnvCredentials reads credentials from the process environment, as Omnibot does (the families of
// Config.Settings).
func EnvCredentials() Credentials { return settings.Getenv }

// tokensFor returns the tokens of an app id.
func (c Credentials) tokensFor(appID string) BotTokens {
	id := strings.ToUpper(appID)
	return BotTokens{Bot: c(envBotToken + id), User: c(envUserToken + id), Verification: c(envVerificationToken + id), SigningSecret: c(envSigningSecret + id)}
}

// overlay returns credentials that prefer over's values and fall back to c.
func (c Credentials) overlay(over map[string]string) Credentials {
	return func(name string) string {
		if v, ok := over[name]; ok && v != "" {
			return v
		}
		return c(name)
	}
}

// SecretsTokenConfig makes the chat service read its bot tokens from gantry's secrets service, as a
// service principal: it mints a kmsauth service token with the shared keyring (the same key the
// secrets service validates service tokens with), calls GetService for its own service id, and reads
// every credential pair mapped to that service. A pair named like Omnibot's variable without its
// CREDENTIALS_ prefix (slack_oauth_bot_token_a0123, slack_oauth_token_a0123) supplies that token;
// values from the secrets service win over the environment.
type SecretsTokenConfig struct {
	// Service is the chat service's service id in the secrets service; empty disables the source.
	Service string
	// Addr is the gRPC address of the secrets service.
	Addr string
	// Keyring is the local keyring file shared with the secrets service (data folder keyring.json).
	Keyring string
	// AuthKey is the key service tokens are encrypted with (the secrets service's AUTH_KEY).
	AuthKey string
	// To is the secrets service's AUTH_CONTEXT.
	To string
	// UserType is the kmsauth user type of the token, normally service.
	UserType string
	// Credentials secure the connection to the secrets service (the process's internal TLS; not a
	// flag). nil is plaintext, for tests of the chat service alone.
	Credentials credentials.TransportCredentials
}

// Validate checks the source when it is enabled. Empty settings are filled by the process that runs
// the service (see stack), and checked again when the tokens are read.
func (c SecretsTokenConfig) Validate() error {
	if c.Service == "" || c.Addr == "" {
		return nil
	}
	return settings.CheckHostPort("chat-secrets-addr", c.Addr)
}

func (c SecretsTokenConfig) complete() error {
	switch {
	case c.Addr == "":
		return settings.Invalid("chat-secrets-addr", "must be set with -chat-secrets-service when the secrets service runs elsewhere")
	case c.Keyring == "":
		return settings.Invalid("chat-secrets-keyring", "must be set with -chat-secrets-service")
	case c.AuthKey == "":
		return settings.Invalid("chat-secrets-auth-key", "must be set with -chat-secrets-service")
	case c.To == "":
		return settings.Invalid("chat-secrets-auth-context", "must be set with -chat-secrets-service")
	}
	return nil
}

// fetchSecretsCredentials reads the credential pairs of the configured service and returns them as
// Omnibot variable names (CREDENTIALS_<KEY upper-cased>).
func fetchSecretsCredentials(ctx context.Context, c SecretsTokenConfig, logger *zap.Logger) (map[string]string, error) {
	if _, err := os.Stat(c.Keyring); err != nil {
		// OpenKeyring would create a fresh keyring, whose keys the secrets service does not know.
		return nil, fmt.Errorf("keyring: %w", err)
	}
	ring, err := kms.OpenKeyring(c.Keyring, logger)
	if err != nil {
		return nil, err
	}
	user := kmsauth.Username{Version: 2, UserType: c.UserType, From: c.Service}
	if user.UserType == "" {
		user.UserType = "service"
	}
	tok, err := kmsauth.Generate(ctx, ring, c.AuthKey, user, c.To, 10*time.Minute, time.Now())
	if err != nil {
		return nil, err
	}
	creds := c.Credentials
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(c.Addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	basic := base64.StdEncoding.EncodeToString([]byte(user.String() + ":" + tok))
	ctx = metadata.AppendToOutgoingContext(ctx, wirekeys.Authorization, "Basic "+basic)
	resp, err := secretsv1.NewSecretsServiceClient(conn).GetService(ctx, &secretsv1.GetServiceRequest{Id: c.Service})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, cred := range resp.GetService().GetCredentials() {
		for k, v := range cred.GetCredentialPairs() {
			out["CREDENTIALS_"+strings.ToUpper(k)] = v
		}
	}
	return out, nil
}

// loadCredentials returns the credentials of the configuration: the environment, overlaid with the
// secrets service's pairs when that source is enabled.
func loadCredentials(ctx context.Context, cfg Config, env Credentials, logger *zap.Logger) (Credentials, error) {
	if cfg.Secrets.Service == "" {
		return env, nil
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	if err := cfg.Secrets.complete(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	pairs, err := fetchSecretsCredentials(ctx, cfg.Secrets, logger)
	if err != nil {
		return nil, &settings.SettingError{Flag: "chat-secrets-service", Err: fmt.Errorf("reading bot tokens of service %q: %w", cfg.Secrets.Service, err)}
	}
	logger.Info("read bot credentials from the secrets service", zap.String("service", cfg.Secrets.Service), zap.Int("pairs", len(pairs)))
	return env.overlay(pairs), nil
}
