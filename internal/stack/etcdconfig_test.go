package stack

import (
	"strings"
	"testing"
)

func TestEtcdConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string // "" = valid
	}{
		{"bolt ignores etcd settings", func(c *Config) { c.Etcd.Endpoints = nil }, ""},
		{"etcd defaults", func(c *Config) { c.Secrets.Store = "etcd" }, ""},
		{"unknown store", func(c *Config) { c.Secrets.Store = "dynamo" }, "GANTRY_STORE"},
		{"bare host:port endpoints", func(c *Config) { c.Secrets.Store = "etcd"; c.Etcd.Endpoints = []string{"etcd-0:2379", "etcd-1:2379"} }, ""},
		{"no endpoints", func(c *Config) { c.Secrets.Store = "etcd"; c.Etcd.Endpoints = nil }, "GANTRY_ETCD_ENDPOINTS"},
		{"bad scheme", func(c *Config) { c.Secrets.Store = "etcd"; c.Etcd.Endpoints = []string{"unix://x:1"} }, "GANTRY_ETCD_ENDPOINTS"},
		{"no port", func(c *Config) { c.Secrets.Store = "etcd"; c.Etcd.Endpoints = []string{"http://etcd"} }, "GANTRY_ETCD_ENDPOINTS"},
		{"empty prefix", func(c *Config) { c.Secrets.Store = "etcd"; c.Etcd.Prefix = "" }, "GANTRY_ETCD_PREFIX"},
		{"cert without key", func(c *Config) { c.Secrets.Store = "etcd"; c.Etcd.CertFile = "/etc/hostname" }, "GANTRY_ETCD_CERT_FILE"},
		{"missing CA file", func(c *Config) { c.Secrets.Store = "etcd"; c.Etcd.CAFile = "/nonexistent/ca.pem" }, "GANTRY_ETCD_CA_FILE"},
		{"zero dial timeout", func(c *Config) { c.Secrets.Store = "etcd"; c.Etcd.DialTimeout = 0 }, "GANTRY_ETCD_DIAL_TIMEOUT"},
		{"zero request timeout", func(c *Config) { c.Secrets.Store = "etcd"; c.Etcd.RequestTimeout = 0 }, "GANTRY_ETCD_REQUEST_TIMEOUT"},
		{"tiny request limit", func(c *Config) { c.Secrets.Store = "etcd"; c.Etcd.MaxRequestBytes = 1000 }, "GANTRY_ETCD_MAX_REQUEST_BYTES"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.mutate(&cfg)
			err := cfg.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate() error = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate() error = %v, want one naming %s", err, tt.wantErr)
			}
		})
	}
}
