package logging

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gantry-dev/gantry/pkg/logging/logtest"
)

func TestComponentLevels(t *testing.T) {
	logger, _, err := New(Config{Level: "info", Format: "json"})
	if err != nil {
		t.Fatal(err)
	}
	levels := LevelsOf(logger.Named("gateway").With(zap.String("k", "v")))
	if levels == nil {
		t.Fatal("a logger from New (named, with fields) has no levels")
	}
	levels.Register("gateway", "gateway.upstream", "secrets")
	enabled := func(name string, lv zapcore.Level) bool { return logger.Named(name).Check(lv, "x") != nil }

	if enabled("gateway", zapcore.DebugLevel) || !enabled("gateway", zapcore.InfoLevel) {
		t.Error("components start at the configured level")
	}
	if err := levels.Set("gateway.upstream", "debug"); err != nil {
		t.Fatal(err)
	}
	if !enabled("gateway.upstream", zapcore.DebugLevel) || !enabled("gateway.upstream.hc", zapcore.DebugLevel) {
		t.Error("gateway.upstream (and below) should log debug")
	}
	if enabled("gateway", zapcore.DebugLevel) || enabled("secrets", zapcore.DebugLevel) {
		t.Error("other components must stay at info")
	}
	if err := levels.Set("", "off"); err != nil {
		t.Fatal(err)
	}
	if enabled("secrets", zapcore.ErrorLevel) || enabled("unregistered", zapcore.ErrorLevel) {
		t.Error("level=off silences every logger")
	}
	if got := levels.List(); got["gateway.upstream"] != "off" || len(got) != 3 {
		t.Errorf("List = %v", got)
	}
	if err := levels.Set("nope", "info"); err == nil {
		t.Error("an unknown logger must be rejected")
	}
	if err := levels.Set("secrets", "loud"); err == nil {
		t.Error("an unknown level must be rejected")
	}
	for in, want := range map[string]string{"trace": "debug", "warning": "warning", "warn": "warning", "critical": "critical", "error": "error"} {
		lv, err := ParseLevel(in)
		if err != nil || LevelName(lv) != want {
			t.Errorf("%s → %v %v, want %s", in, LevelName(lv), err, want)
		}
	}
}

func TestWithLevelsWrapsForeignLoggers(t *testing.T) {
	logger, levels := WithLevels(logtest.New(t))
	levels.Register("gateway")
	if logger.Named("gateway").Check(zapcore.DebugLevel, "x") == nil {
		t.Error("a wrapped test logger keeps logging debug")
	}
	if again, lv := WithLevels(logger); lv != levels || again != logger {
		t.Error("wrapping twice must reuse the levels")
	}
	_ = levels.Set("gateway", "error")
	if logger.Named("gateway").Check(zapcore.WarnLevel, "x") != nil {
		t.Error("level error still lets warnings through")
	}
}
