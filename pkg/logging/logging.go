// Package logging builds the zap loggers gantry injects into every component: JSON for containers,
// console for a terminal, with a level that can be changed at run time.
package logging

import (
	"fmt"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gantry-dev/gantry/pkg/settings"
)

// Config selects the log level and encoding.
type Config struct {
	// Level is debug, info, warn or error.
	Level string
	// Format is json or console.
	Format string
}

// DefaultConfig logs at info level in console format.
func DefaultConfig() Config { return Config{Level: "info", Format: "console"} }

// Validate reports a setting that New would reject.
func (c Config) Validate() error {
	if _, err := zapcore.ParseLevel(c.Level); err != nil {
		return settings.Invalid("log-level", "%q is not one of debug, info, warn, error", c.Level)
	}
	if c.Format != "json" && c.Format != "console" {
		return settings.Invalid("log-format", "%q is not json or console", c.Format)
	}
	return nil
}

// New returns a logger and the atomic level that controls it. The logger also carries one level per
// named component (see Levels and LevelsOf), all starting at cfg.Level.
func New(cfg Config) (*zap.Logger, zap.AtomicLevel, error) {
	if err := cfg.Validate(); err != nil {
		return nil, zap.AtomicLevel{}, err
	}
	level, _ := zap.ParseAtomicLevel(cfg.Level)
	zc := zap.NewProductionConfig()
	if cfg.Format == "console" {
		zc = zap.NewDevelopmentConfig()
		zc.Development = false
		zc.EncoderConfig.EncodeLevel = zapcore.CapitalLevelEncoder
	}
	// The base core lets everything through; the per-component levels filter. The returned level
	// stays the default of components without a level of their own.
	zc.Level = zap.NewAtomicLevelAt(zapcore.DebugLevel)
	zc.DisableStacktrace = true
	lv := &Levels{def: level, byName: map[string]zap.AtomicLevel{}, minLevel: zap.NewAtomicLevelAt(level.Level())}
	logger, err := zc.Build(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return &levelCore{Core: c, levels: lv} }))
	if err != nil {
		return nil, zap.AtomicLevel{}, fmt.Errorf("build logger: %w", err)
	}
	return logger, level, nil
}
