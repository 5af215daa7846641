package chat

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gantry-dev/gantry/pkg/settings"
	"github.com/gantry-dev/gantry/pkg/stats"
	"github.com/gantry-dev/gantry/services/chat/events"
)

// Config configures the chat service.
type Config struct {
	// Listen is the gRPC listen address.
	Listen string
	// ConfigFile is the path of an Omnibot-shaped YAML file (teams, bots, authorization). Empty means
	// no teams are configured.
	ConfigFile string
	// SlackAPIURL is the base URL of the Slack Web API; method names are appended to it, so it ends
	// with a slash (one is added when missing). Tests point it at a fake.
	SlackAPIURL string
	// SlackAttemptTimeout bounds one HTTP call to Slack; a slower answer counts as a network error:
	// retried for an idempotent method, answered 504 for any other (Slack may have performed it).
	SlackAttemptTimeout time.Duration
	// SlackRetries is how many times a call is retried: an idempotent method (idempotentMethods)
	// after a network error, a timeout, a 5xx or a 429; any other method only after a failed connect
	// or a 429, when Slack certainly did not perform it.
	SlackRetries int
	// SlackMaxRetryAfter is the longest Retry-After a request waits out; a longer one is answered
	// with 429 at once. Slack's Retry-After holds every request for the same bot token and method.
	SlackMaxRetryAfter time.Duration
	// CacheTTL is how long a cached user, channel or IM is trusted; older entries are looked up again.
	CacheTTL time.Duration
	// NegativeCacheTTL is how long Slack's "no such user" (users.lookupByEmail) or "no such
	// conversation" (conversations.info) is remembered, so repeated lookups of unknown emails or ids
	// do not each call Slack. Short: someone who just joined is found after it. Zero turns it off.
	// Left at its default (30 s) it is at most CacheTTL (see negativeCacheTTL).
	NegativeCacheTTL time.Duration
	// negativeTTLGiven records that -chat-negative-cache-ttl was set (flag or environment), so a
	// value given explicitly is checked against CacheTTL rather than derived from it.
	negativeTTLGiven bool
	// RefreshInterval is the period of the background refresh of users and conversations. Zero takes
	// the file's list_provider_update_frequency (Omnibot's setting, 120 s by default); negative
	// disables the refresher (lookups then only read through).
	RefreshInterval time.Duration
	// RequireTokens makes a configured bot without a token a startup error instead of a logged one.
	RequireTokens bool
	// Demo serves a built-in Slack workspace in memory (a few users, channels and IMs) and talks to
	// it when no configured bot has a real token, so chat can be tried on a laptop. Off by default: a
	// production server must never silently talk to a fake; make run turns it on.
	Demo bool
	// Secrets optionally reads bot tokens from gantry's own secrets service.
	Secrets SecretsTokenConfig
	// ApprovalsPollInterval is how often the approval relay asks the secrets service (over the
	// connection of Secrets, so only with -chat-secrets-service) for change requests and rotation
	// reminders to post in Slack. Zero turns the polling off; presses of the messages' buttons are
	// still relayed.
	ApprovalsPollInterval time.Duration
	// Credentials looks up the CREDENTIALS_SLACK_* variables; nil reads the process environment.
	// Tests set it instead of the environment.
	Credentials Credentials
	// Inbound configures the receivers of Slack's requests and their queue (-chat-inbound-*).
	Inbound events.Config
	// Stats receives the inbound counters (the gateway's store when both run in one process, so
	// they show in /stats); nil keeps them private. Not a flag.
	Stats *stats.Store
}

// minApprovalsPoll is the shortest -chat-approvals-poll-interval: each poll is two calls to the
// secrets service, and a faster one would only load it.
const minApprovalsPoll = 100 * time.Millisecond

// defaultNegativeCacheTTL is the default of -chat-negative-cache-ttl; a -chat-cache-ttl shorter
// than it shortens it too.
const defaultNegativeCacheTTL = 30 * time.Second

// DefaultConfig listens on loopback port 9091 with no configuration file, against the real Slack.
func DefaultConfig() Config {
	return Config{
		Listen:                "127.0.0.1:9091",
		SlackAPIURL:           "https://slack.com/api/",
		SlackAttemptTimeout:   10 * time.Second,
		SlackRetries:          2,
		SlackMaxRetryAfter:    10 * time.Second,
		CacheTTL:              15 * time.Minute,
		NegativeCacheTTL:      defaultNegativeCacheTTL,
		Secrets:               SecretsTokenConfig{UserType: "service"},
		ApprovalsPollInterval: 2 * time.Second,
		Inbound:               events.DefaultConfig(),
	}
}

// Settings declares the chat service's settings for the settings table (group "chat"), with
// Omnibot's per-app Slack credentials as families: their app ids come from the configuration file,
// so the service reads them on demand (Credentials).
func (c *Config) Settings() settings.Part {
	const group = "chat"
	part := settings.Part{Settings: []settings.Setting{
		{Name: "chat-listen", Group: group, Value: settings.String(&c.Listen), Usage: "gRPC listen address of the chat service"},
		{Name: "chat-config", Group: group, Value: settings.String(&c.ConfigFile), Usage: "Omnibot-shaped YAML configuration file of the chat service"},
		{Name: "chat-slack-api-url", Group: group, Value: settings.String(&c.SlackAPIURL), Usage: "base URL of the Slack Web API"},
		{Name: "chat-slack-attempt-timeout", Group: group, Value: settings.Duration(&c.SlackAttemptTimeout), Usage: "timeout of one HTTP call to Slack (a write that times out is not retried: 504)"},
		{Name: "chat-slack-retries", Group: group, Value: settings.Int(&c.SlackRetries), Usage: "retries of a Slack call: reads after a network error, timeout, 5xx or 429; writes only after a failed connect or 429"},
		{Name: "chat-slack-max-retry-after", Group: group, Value: settings.Duration(&c.SlackMaxRetryAfter), Usage: "longest Slack Retry-After a request waits out (shared by the requests of a bot token and method, and channel for chat.postMessage)"},
		{Name: "chat-cache-ttl", Group: group, Value: settings.Duration(&c.CacheTTL), Usage: "how long cached users, channels and IMs are trusted"},
		{Name: "chat-negative-cache-ttl", Group: group, Value: c.negativeTTLValue(), Default: "30s, or -chat-cache-ttl when shorter", Usage: "how long Slack's answer that an email or conversation id is unknown is remembered (0: off; at most -chat-cache-ttl)"},
		{Name: "chat-refresh-interval", Group: group, Value: settings.Duration(&c.RefreshInterval), Usage: "period of the background cache refresh (0: the file's list_provider_update_frequency, negative: off)"},
		{Name: "chat-require-tokens", Group: group, Value: settings.Bool(&c.RequireTokens), Usage: "fail startup when a configured bot has no Slack token"},
		{Name: "chat-demo", Group: group, Value: settings.Bool(&c.Demo), Usage: "when no bot has a Slack token, talk to a built-in demo workspace held in memory (for trying chat locally; never in production)"},
		{Name: "chat-secrets-service", Group: group, Value: settings.String(&c.Secrets.Service), Usage: "read bot tokens from this service's credentials in the secrets service (empty: environment only)"},
		{Name: "chat-secrets-addr", Group: group, Value: settings.String(&c.Secrets.Addr), Default: "this process's secrets service", Usage: "gRPC address of the secrets service the bot tokens are read from"},
		{Name: "chat-secrets-keyring", Group: group, Value: settings.String(&c.Secrets.Keyring), Default: "<data-dir>/keyring.json", Usage: "keyring file to mint the service token with (default: <data-dir>/keyring.json)"},
		{Name: "chat-secrets-auth-key", Group: group, Value: settings.String(&c.Secrets.AuthKey), Default: "the secrets service's -auth-key", Usage: "kmsauth key of service tokens (default: the secrets service's AUTH_KEY)"},
		{Name: "chat-secrets-auth-context", Group: group, Value: settings.String(&c.Secrets.To), Default: "the secrets service's -auth-context", Usage: "AUTH_CONTEXT of the secrets service (default: its own setting)"},
		{Name: "chat-approvals-poll-interval", Group: group, Value: settings.Duration(&c.ApprovalsPollInterval), Usage: "how often the Slack approval relay asks the secrets service (of -chat-secrets-service) for change requests and rotation reminders to post (0: off; at least " + minApprovalsPoll.String() + ")"},
	}, Families: []settings.Family{
		{Pattern: envBotToken + "<APP>", Group: group, Kind: "string", Secret: true, Usage: "Omnibot's bot token (xoxb-...) of the Slack app whose id is <APP>, upper-cased; a credential of -chat-secrets-service wins"},
		{Pattern: envUserToken + "<APP>", Group: group, Kind: "string", Secret: true, Usage: "Omnibot's user token (xoxp-...) of that app, tried when the bot token lacks a scope or the bot is not in the channel"},
		{Pattern: envVerificationToken + "<APP>", Group: group, Kind: "string", Secret: true, Usage: "Omnibot's legacy verification token of that app (read for compatibility; inbound requests only with -chat-inbound-allow-verification-token)"},
		{Pattern: envSigningSecret + "<APP>", Group: group, Kind: "string", Secret: true, Usage: "signing secret of that app: verifies the Slack events, commands and interactions it sends (without one they are refused)"},
	}}
	inbound := c.Inbound.Settings()
	part.Settings = append(part.Settings, inbound.Settings...)
	return part
}

// negativeTTLValue is the setting of NegativeCacheTTL: a duration that records it was given.
func (c *Config) negativeTTLValue() settings.Value {
	d := settings.Duration(&c.NegativeCacheTTL)
	return settings.Func(d.Kind(), d.String, func(s string) error {
		if err := d.Set(s); err != nil {
			return err
		}
		c.negativeTTLGiven = strings.TrimSpace(s) != ""
		return nil
	})
}

// negativeCacheTTL is the negative cache's TTL in effect: NegativeCacheTTL, except that its default,
// not given as a setting, never outlives CacheTTL (a -chat-cache-ttl of 10s remembers "no such user"
// for 10s too, instead of stopping the start).
func (c Config) negativeCacheTTL() time.Duration {
	if !c.negativeTTLGiven && c.NegativeCacheTTL == defaultNegativeCacheTTL {
		return min(c.NegativeCacheTTL, c.CacheTTL)
	}
	return c.NegativeCacheTTL
}

// Validate reports the first bad setting, by flag name. It also loads the configuration file, so a
// broken file stops startup.
func (c Config) Validate() error {
	if err := settings.CheckHostPort("chat-listen", c.Listen); err != nil {
		return err
	}
	if u, err := url.Parse(c.SlackAPIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return settings.Invalid("chat-slack-api-url", "%q is not an http(s) URL", c.SlackAPIURL)
	}
	if c.SlackAttemptTimeout <= 0 {
		return settings.Invalid("chat-slack-attempt-timeout", "must be positive, got %v", c.SlackAttemptTimeout)
	}
	if c.SlackRetries < 0 || c.SlackRetries > 10 {
		return settings.Invalid("chat-slack-retries", "must be between 0 and 10, got %d", c.SlackRetries)
	}
	if c.SlackMaxRetryAfter < 0 {
		return settings.Invalid("chat-slack-max-retry-after", "must not be negative, got %v", c.SlackMaxRetryAfter)
	}
	if c.CacheTTL <= 0 {
		return settings.Invalid("chat-cache-ttl", "must be positive, got %v", c.CacheTTL)
	}
	if neg := c.negativeCacheTTL(); neg < 0 || neg > c.CacheTTL {
		return settings.Invalid("chat-negative-cache-ttl", "must be between 0 and -chat-cache-ttl (%v), got %v", c.CacheTTL, neg)
	}
	if err := c.Secrets.Validate(); err != nil {
		return err
	}
	if p := c.ApprovalsPollInterval; p != 0 && p < minApprovalsPoll {
		return settings.Invalid("chat-approvals-poll-interval", "must be 0 (off) or at least %v, got %v", minApprovalsPoll, p)
	}
	if err := c.Inbound.Validate(); err != nil {
		return err
	}
	if _, err := c.Load(); err != nil {
		return err
	}
	return nil
}

// apiURL is SlackAPIURL with the trailing slash slack-go's plain string concatenation needs.
func (c Config) apiURL() string {
	if strings.HasSuffix(c.SlackAPIURL, "/") {
		return c.SlackAPIURL
	}
	return c.SlackAPIURL + "/"
}

// refreshInterval resolves RefreshInterval against the file's Omnibot setting.
func (c Config) refreshInterval(fc *FileConfig) time.Duration {
	switch {
	case c.RefreshInterval != 0:
		return c.RefreshInterval
	case fc.ListProviderUpdateFrequency > 0:
		return time.Duration(fc.ListProviderUpdateFrequency) * time.Second
	default:
		return 120 * time.Second
	}
}

// Load reads the configuration file, or returns an empty configuration when none is set.
func (c Config) Load() (*FileConfig, error) {
	if c.ConfigFile == "" {
		return &FileConfig{Teams: map[string]string{}}, nil
	}
	data, err := os.ReadFile(c.ConfigFile)
	if err != nil {
		return nil, &settings.SettingError{Flag: "chat-config", Err: err}
	}
	fc, err := ParseFileConfig(data)
	if err != nil {
		return nil, settings.Invalid("chat-config", "%s: %w", c.ConfigFile, err)
	}
	return fc, nil
}

// FileConfig is Omnibot's configuration file shape. Keys gantry does not use (watcher settings)
// are accepted and ignored, so an Omnibot file works unchanged.
type FileConfig struct {
	// Teams maps a team name to its Slack team id.
	Teams map[string]string `yaml:"teams"`
	// Bots maps a team name to bot names and their Slack app ids.
	Bots map[string]map[string]string `yaml:"bots"`
	// PrimaryBot names, per team, the bot whose token reads the workspace.
	PrimaryBot map[string]string `yaml:"primary_bot"`
	// Authorization holds the access-control checks, permissions and bindings.
	Authorization Authorization `yaml:"authorization"`
	// ListProviderUpdateFrequency is Omnibot's refresh period of the user and channel lists, in
	// seconds.
	ListProviderUpdateFrequency int `yaml:"list_provider_update_frequency"`
	// Handlers route Slack's events, slash commands and interactive components to backends.
	Handlers events.Handlers `yaml:"handlers"`
	// HelpCallback answers a message directed at a bot that no handler matched ({callback: {module,
	// kwargs}}); DefaultToHelp (default true) answers it otherwise with Omnibot's built-in help.
	HelpCallback  *events.HelpCallback `yaml:"help_callback"`
	DefaultToHelp *bool                `yaml:"default_to_help"`
}

// Authorization is Omnibot's access-control section.
type Authorization struct {
	Checks      []Check               `yaml:"checks"`
	Permissions map[string]Permission `yaml:"permissions"`
	Bindings    map[string][]string   `yaml:"bindings"`
}

// Check is one access-control check: a module name and its arguments.
type Check struct {
	Module string         `yaml:"module"`
	Kwargs map[string]any `yaml:"kwargs"`
}

// Permission allows methods on path patterns.
type Permission struct {
	Methods      []string `yaml:"methods"`
	Paths        []string `yaml:"paths"`
	InternalOnly *bool    `yaml:"internal_only"`
}

// ParseFileConfig parses and checks an Omnibot-shaped YAML document.
func ParseFileConfig(data []byte) (*FileConfig, error) {
	var fc FileConfig
	if err := yaml.Unmarshal(data, &fc); err != nil {
		return nil, fmt.Errorf("invalid YAML: %w", err)
	}
	if fc.Teams == nil {
		return nil, errors.New("teams: required (a map of team name to Slack team id)")
	}
	for name, id := range fc.Teams {
		if name == "" || id == "" {
			return nil, fmt.Errorf("teams: team %q has an empty name or id", name)
		}
	}
	for team, bots := range fc.Bots {
		if _, ok := fc.Teams[team]; !ok {
			return nil, fmt.Errorf("bots: team %q is not listed under teams", team)
		}
		for bot, app := range bots {
			if app == "" {
				return nil, fmt.Errorf("bots: bot %q of team %q has no app id", bot, team)
			}
		}
	}
	for team, bot := range fc.PrimaryBot {
		if _, ok := fc.Bots[team][bot]; !ok {
			return nil, fmt.Errorf("primary_bot: bot %q of team %q is not listed under bots", bot, team)
		}
	}
	if _, err := compileACL(fc.Authorization); err != nil {
		return nil, fmt.Errorf("authorization: %w", err)
	}
	fc.Handlers.HelpCallback, fc.Handlers.DefaultToHelp = fc.HelpCallback, fc.DefaultToHelp
	if err := events.CheckHandlers(fc.Handlers); err != nil {
		return nil, fmt.Errorf("handlers: %w", err)
	}
	return &fc, nil
}
