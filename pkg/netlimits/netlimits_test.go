package netlimits

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/settings"
)

func TestDefaultsAreValid(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateNamesTheSetting(t *testing.T) {
	tests := []struct {
		flag   string
		mutate func(*Config)
	}{
		{"http-read-header-timeout", func(c *Config) { c.ReadHeaderTimeout = 0 }},
		{"http-read-header-timeout", func(c *Config) { c.ReadHeaderTimeout = time.Hour }},
		{"http-write-timeout", func(c *Config) { c.WriteTimeout = -time.Second }},
		{"http-max-header-bytes", func(c *Config) { c.MaxHeaderBytes = 100 }},
		{"http-max-query-params", func(c *Config) { c.MaxQueryParams = 0 }},
		{"grpc-max-recv-msg-bytes", func(c *Config) { c.GRPCMaxRecvMsgBytes = 10 }},
		{"grpc-max-concurrent-streams", func(c *Config) { c.GRPCMaxConcurrentStreams = 0 }},
		{"grpc-max-connection-idle", func(c *Config) { c.GRPCMaxConnectionIdle = -1 }},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		tt.mutate(&c)
		var se *settings.SettingError
		if err := c.Validate(); !errors.As(err, &se) || se.Flag != tt.flag {
			t.Errorf("%s: Validate() = %v, want an error naming it", tt.flag, err)
		}
	}
}

func TestFlags(t *testing.T) {
	c := DefaultConfig()
	table := settings.New(c.Settings())
	if err := table.Parse([]string{"-http-read-header-timeout=2s", "-grpc-max-concurrent-streams=7", "-http-max-query-params=3"}, settings.MapLookup(nil)); err != nil {
		t.Fatal(err)
	}
	if c.ReadHeaderTimeout != 2*time.Second || c.GRPCMaxConcurrentStreams != 7 || c.MaxQueryParams != 3 {
		t.Fatalf("flags not applied: %+v", c)
	}
	if err := settings.New(c.Settings()).Parse([]string{"-grpc-max-concurrent-streams=-1"}, settings.MapLookup(nil)); err == nil {
		t.Error("negative stream limit accepted")
	}
	srv := c.HTTPServer(nil, nil)
	if srv.ReadHeaderTimeout != 2*time.Second || srv.MaxHeaderBytes != c.MaxHeaderBytes || srv.IdleTimeout != c.IdleTimeout || srv.WriteTimeout != c.WriteTimeout || srv.ReadTimeout != c.ReadTimeout {
		t.Errorf("HTTPServer does not carry the limits: %+v", srv)
	}
}

func TestTooManyQueryParams(t *testing.T) {
	c := Config{MaxQueryParams: 3}
	for q, want := range map[string]bool{
		"": false, "a=1": false, "a=1&b=2&c=3": false, "a=1&b=2&c=3&d": true,
		strings.Repeat("x=1&", 5000): true,
	} {
		if got := c.TooManyQueryParams(q); got != want {
			t.Errorf("TooManyQueryParams(%.20q) = %v, want %v", q, got, want)
		}
	}
}
