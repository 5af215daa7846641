package chat

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"go.yaml.in/yaml/v3"

	"github.com/gantry-dev/gantry/pkg/envflag"
)

// Config configures the chat service.
type Config struct {
	// Listen is the gRPC listen address.
	Listen string
	// ConfigFile is the path of an Omnibot-shaped YAML file (teams, bots, authorization). Empty means
	// no teams are configured.
	ConfigFile string
}

// DefaultConfig listens on loopback port 9091 with no configuration file.
func DefaultConfig() Config { return Config{Listen: "127.0.0.1:9091"} }

// AddFlags registers the settings on fs.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "chat-listen", c.Listen, "gRPC listen address of the chat service")
	fs.StringVar(&c.ConfigFile, "chat-config", c.ConfigFile, "Omnibot-shaped YAML configuration file of the chat service")
}

// Validate reports the first bad setting, by flag name. It also loads the configuration file, so a
// broken file stops startup.
func (c Config) Validate() error {
	if err := envflag.CheckHostPort("chat-listen", c.Listen); err != nil {
		return err
	}
	if _, err := c.Load(); err != nil {
		return err
	}
	return nil
}

// Load reads the configuration file, or returns an empty configuration when none is set.
func (c Config) Load() (*FileConfig, error) {
	if c.ConfigFile == "" {
		return &FileConfig{Teams: map[string]string{}}, nil
	}
	data, err := os.ReadFile(c.ConfigFile)
	if err != nil {
		return nil, &envflag.SettingError{Flag: "chat-config", Err: err}
	}
	fc, err := ParseFileConfig(data)
	if err != nil {
		return nil, envflag.Invalid("chat-config", "%s: %w", c.ConfigFile, err)
	}
	return fc, nil
}

// FileConfig is Omnibot's configuration file shape. Keys gantry does not use (handlers, callbacks,
// watcher settings) are accepted and ignored, so an Omnibot file works unchanged.
type FileConfig struct {
	// Teams maps a team name to its Slack team id.
	Teams map[string]string `yaml:"teams"`
	// Bots maps a team name to bot names and their Slack app ids.
	Bots map[string]map[string]string `yaml:"bots"`
	// PrimaryBot names, per team, the bot whose token reads the workspace.
	PrimaryBot map[string]string `yaml:"primary_bot"`
	// Authorization holds the access-control checks, permissions and bindings.
	Authorization Authorization `yaml:"authorization"`
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
	return &fc, nil
}
