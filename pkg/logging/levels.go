package logging

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// offLevel silences a logger completely: above every level zap writes.
const offLevel = zapcore.FatalLevel + 1

// Levels holds one atomic level per named component ("gateway", "gateway.upstream", "secrets"). A
// log entry obeys the level of the longest registered prefix of its logger name (by dot-separated
// segments), or the default level when none matches. The admin interface's /logging changes them.
type Levels struct {
	mu       sync.RWMutex
	def      zap.AtomicLevel
	byName   map[string]zap.AtomicLevel
	minLevel zap.AtomicLevel // the lowest level any component enables; the fast path of Enabled
}

func newLevels(def zapcore.Level) *Levels {
	return &Levels{def: zap.NewAtomicLevelAt(def), byName: map[string]zap.AtomicLevel{}, minLevel: zap.NewAtomicLevelAt(def)}
}

// Register adds components at the default level; registering a known name again changes nothing.
func (l *Levels) Register(names ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range names {
		if _, ok := l.byName[n]; !ok {
			l.byName[n] = zap.NewAtomicLevelAt(l.def.Level())
		}
	}
}

// level returns the level governing a logger name.
func (l *Levels) level(loggerName string) zapcore.Level {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for name := loggerName; name != ""; {
		if lv, ok := l.byName[name]; ok {
			return lv.Level()
		}
		i := strings.LastIndexByte(name, '.')
		if i < 0 {
			break
		}
		name = name[:i]
	}
	return l.def.Level()
}

// List maps each registered component to its level name, in Envoy's vocabulary.
func (l *Levels) List() map[string]string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make(map[string]string, len(l.byName))
	for n, lv := range l.byName {
		out[n] = LevelName(lv.Level())
	}
	return out
}

// Names returns the registered components, sorted.
func (l *Levels) Names() []string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]string, 0, len(l.byName))
	for n := range l.byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Set changes one registered component, or every component and the default when name is empty.
// level is an Envoy level name (trace, debug, info, warning, error, critical, off) or a zap one.
func (l *Levels) Set(name, level string) error {
	lv, err := ParseLevel(level)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if name == "" {
		l.def.SetLevel(lv)
		for _, a := range l.byName {
			a.SetLevel(lv)
		}
	} else {
		a, ok := l.byName[name]
		if !ok {
			return fmt.Errorf("unknown logger name")
		}
		a.SetLevel(lv)
	}
	lowest := l.def.Level()
	for _, a := range l.byName {
		lowest = min(lowest, a.Level())
	}
	l.minLevel.SetLevel(lowest)
	return nil
}

// ParseLevel reads an Envoy level name (trace and debug are both zap's debug, critical is zap's
// dpanic, off silences) or a zap level name.
func ParseLevel(s string) (zapcore.Level, error) {
	switch s {
	case "trace":
		return zapcore.DebugLevel, nil
	case "warning":
		return zapcore.WarnLevel, nil
	case "critical":
		return zapcore.DPanicLevel, nil
	case "off":
		return offLevel, nil
	}
	lv, err := zapcore.ParseLevel(s)
	if err != nil {
		return 0, fmt.Errorf("unknown logger level")
	}
	return lv, nil
}

// LevelName is the Envoy name of a zap level.
func LevelName(lv zapcore.Level) string {
	switch {
	case lv <= zapcore.DebugLevel:
		return "debug"
	case lv == zapcore.InfoLevel:
		return "info"
	case lv == zapcore.WarnLevel:
		return "warning"
	case lv == zapcore.ErrorLevel:
		return "error"
	case lv < offLevel:
		return "critical"
	default:
		return "off"
	}
}

// levelCore filters entries by the level of their logger's component. The core it wraps must let
// every level through; the filtering happens here.
type levelCore struct {
	zapcore.Core
	levels *Levels
}

func (c *levelCore) Enabled(lv zapcore.Level) bool {
	return c.levels.minLevel.Enabled(lv) || c.levels.def.Enabled(lv)
}

func (c *levelCore) With(fields []zapcore.Field) zapcore.Core {
	return &levelCore{Core: c.Core.With(fields), levels: c.levels}
}

func (c *levelCore) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if ent.Level < c.levels.level(ent.LoggerName) {
		return ce
	}
	return c.Core.Check(ent, ce)
}

// LevelsOf returns the per-component levels of a logger built by New (or WithLevels), or nil.
func LevelsOf(logger *zap.Logger) *Levels {
	if c, ok := logger.Core().(*levelCore); ok {
		return c.levels
	}
	return nil
}

// WithLevels returns logger filtered by per-component levels, reusing the levels it already has. A
// logger from elsewhere (zaptest in tests) gets new levels that start at debug, so wrapping it
// changes nothing until a level is set.
func WithLevels(logger *zap.Logger) (*zap.Logger, *Levels) {
	if lv := LevelsOf(logger); lv != nil {
		return logger, lv
	}
	lv := newLevels(zapcore.DebugLevel)
	return logger.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return &levelCore{Core: c, levels: lv} })), lv
}
