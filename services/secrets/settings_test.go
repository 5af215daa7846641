package secrets

import (
	"github.com/gantry-dev/gantry/pkg/settings"
)

// loadEnv loads cfg from a map of environment variables through the settings table and validates
// it, naming a bad setting as the table does.
func loadEnv(cfg *Config, env map[string]string) error {
	table := settings.New(cfg.Settings())
	if err := table.Load(settings.MapLookup(env)); err != nil {
		return err
	}
	return table.Explain(cfg.Validate())
}
