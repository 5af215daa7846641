package chat

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kmsauth"
	"github.com/gantry-dev/gantry/pkg/settings"
	"github.com/gantry-dev/gantry/pkg/wirekeys"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
	"github.com/gantry-dev/gantry/services/chat/approvals"
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

// loadCredentials returns the credentials of the configuration: the environment, overlaid with the
// secrets service's pairs when that source is enabled. Then it also returns the connection to the
// secrets service it read them over, which the approval relay goes on using; the caller closes it.
func loadCredentials(ctx context.Context, cfg Config, env Credentials, logger *zap.Logger) (Credentials, *secretsConn, error) {
	if cfg.Secrets.Service == "" {
		return env, nil, nil
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	if err := cfg.Secrets.complete(); err != nil {
		return nil, nil, err
	}
	wrap := func(err error) error {
		return &settings.SettingError{Flag: "chat-secrets-service", Err: fmt.Errorf("reading bot tokens of service %q: %w", cfg.Secrets.Service, err)}
	}
	conn, err := dialSecrets(cfg.Secrets, logger)
	if err != nil {
		return nil, nil, wrap(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	pairs, err := conn.servicePairs(ctx, cfg.Secrets.Service)
	if err != nil {
		_ = conn.Close()
		return nil, nil, wrap(err)
	}
	logger.Info("read bot credentials from the secrets service", zap.String("service", cfg.Secrets.Service), zap.Int("pairs", len(pairs)))
	return env.overlay(pairs), conn, nil
}

// secretsConn is the chat service's connection to the secrets service, as its own service principal:
// the one place that dials it and authenticates its calls, for the bot tokens read at startup and
// the approval relay after.
type secretsConn struct {
	conn   *grpc.ClientConn
	client secretsv1.SecretsServiceClient
}

// dialSecrets opens the connection (lazily: nothing is sent before the first call). Every call carries
// a kmsauth service token of c.Service (serviceToken).
func dialSecrets(c SecretsTokenConfig, logger *zap.Logger) (*secretsConn, error) {
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
	creds := c.Credentials
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	tok := &serviceToken{ring: ring, authKey: c.AuthKey, to: c.To, user: user, now: time.Now}
	conn, err := grpc.NewClient(c.Addr, grpc.WithTransportCredentials(creds), grpc.WithPerRPCCredentials(tok))
	if err != nil {
		return nil, err
	}
	return &secretsConn{conn: conn, client: secretsv1.NewSecretsServiceClient(conn)}, nil
}

// Close closes the connection.
func (s *secretsConn) Close() error { return s.conn.Close() }

// servicePairs reads the credential pairs of a service and returns them as Omnibot variable names
// (CREDENTIALS_<KEY upper-cased>).
func (s *secretsConn) servicePairs(ctx context.Context, service string) (map[string]string, error) {
	resp, err := s.client.GetService(ctx, &secretsv1.GetServiceRequest{Id: service})
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

// Service tokens are minted for serviceTokenLifetime and reused for serviceTokenReuse: kmsauth
// backdates a token by three minutes, so one is valid for seven minutes after it is minted, and a
// reused one still has two left when it is replaced, which absorbs clock skew and a slow call.
const (
	serviceTokenLifetime = 10 * time.Minute
	serviceTokenReuse    = 5 * time.Minute
)

// serviceToken is the per-call credential of secretsConn: HTTP Basic with the kmsauth username and a
// token minted with the shared keyring, as a Confidant client sends it. It is never logged.
type serviceToken struct {
	ring        kms.Provider
	authKey, to string
	user        kmsauth.Username
	now         func() time.Time

	mu     sync.Mutex
	header string
	minted time.Time
}

// GetRequestMetadata implements credentials.PerRPCCredentials: the Authorization header, with a token
// minted again once the last one is serviceTokenReuse old.
func (t *serviceToken) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if t.header == "" || now.Sub(t.minted) >= serviceTokenReuse || now.Before(t.minted) {
		tok, err := kmsauth.Generate(ctx, t.ring, t.authKey, t.user, t.to, serviceTokenLifetime, now)
		if err != nil {
			return nil, err
		}
		t.header = "Basic " + base64.StdEncoding.EncodeToString([]byte(t.user.String()+":"+tok))
		t.minted = now
	}
	return map[string]string{wirekeys.Authorization: t.header}, nil
}

// RequireTransportSecurity is false: the connection is the process's internal TLS, except where the
// operator chose plaintext for the whole process (-grpc-plaintext) or a test dials without
// credentials, and the token was sent that way before it was a per-call credential too.
func (t *serviceToken) RequireTransportSecurity() bool { return false }

// approvalSecrets adapts the secrets client to the approval relay (approvals.Secrets): the gRPC codes
// that mean "not this relay" (a secrets service without change requests, a policy naming another
// relay service or no Slack, a token it does not take) become approvals.ErrRefused, and those of a
// secrets service that did not answer approvals.ErrUnavailable.
type approvalSecrets struct {
	client secretsv1.SecretsServiceClient
}

func (a approvalSecrets) ListChangeNotices(ctx context.Context) ([]*secretsv1.ChangeNotice, error) {
	resp, err := a.client.ListChangeNotices(ctx, &secretsv1.ListChangeNoticesRequest{})
	return resp.GetNotices(), relayError(err)
}

func (a approvalSecrets) RecordChangeNotice(ctx context.Context, r *secretsv1.RecordChangeNoticeRequest) error {
	_, err := a.client.RecordChangeNotice(ctx, r)
	return relayError(err)
}

func (a approvalSecrets) ListRotationReminders(ctx context.Context) ([]*secretsv1.RotationReminder, error) {
	resp, err := a.client.ListRotationReminders(ctx, &secretsv1.ListRotationRemindersRequest{})
	return resp.GetReminders(), relayError(err)
}

func (a approvalSecrets) ClaimRotationReminder(ctx context.Context, key string) (bool, error) {
	resp, err := a.client.ClaimRotationReminder(ctx, &secretsv1.ClaimRotationReminderRequest{Key: key})
	return resp.GetClaimed(), relayError(err)
}

func (a approvalSecrets) DecideChangeFromSlack(ctx context.Context, r *secretsv1.DecideChangeFromSlackRequest) (*secretsv1.DecideChangeFromSlackResponse, error) {
	resp, err := a.client.DecideChangeFromSlack(ctx, r)
	return resp, relayError(err)
}

// relayError classifies an error of the secrets service for the relay (see approvalSecrets).
func relayError(err error) error {
	switch status.Code(err) {
	case codes.OK:
		return nil
	case codes.PermissionDenied, codes.FailedPrecondition, codes.Unimplemented, codes.Unauthenticated:
		return fmt.Errorf("%w: %v", approvals.ErrRefused, err)
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted:
		return fmt.Errorf("%w: %v", approvals.ErrUnavailable, err)
	}
	return err
}
