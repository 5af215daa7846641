package secrets

import (
	"flag"
	"os"
	"strings"

	"github.com/gantry-dev/gantry/pkg/envflag"
)

// addStoreFlags registers the storage settings: -store and the etcd store's (GANTRY_STORE,
// GANTRY_ETCD_*).
func (c *Config) addStoreFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Store, "store", c.Store, "storage backend of the secrets service: bolt or etcd")
	fs.Func("etcd-endpoints", "comma list of etcd client URLs (-store=etcd; default "+strings.Join(c.Etcd.Endpoints, ",")+")", func(v string) error {
		c.Etcd.Endpoints = nil
		for _, e := range strings.Split(v, ",") {
			if e = strings.TrimSpace(e); e != "" {
				c.Etcd.Endpoints = append(c.Etcd.Endpoints, e)
			}
		}
		return nil
	})
	fs.StringVar(&c.Etcd.Prefix, "etcd-prefix", c.Etcd.Prefix, "prefix of every etcd key gantry writes")
	fs.StringVar(&c.Etcd.CAFile, "etcd-ca-file", c.Etcd.CAFile, "PEM file of the CA that signed the etcd members' certificates (enables TLS)")
	fs.StringVar(&c.Etcd.CertFile, "etcd-cert-file", c.Etcd.CertFile, "PEM client certificate for etcd (with -etcd-key-file)")
	fs.StringVar(&c.Etcd.KeyFile, "etcd-key-file", c.Etcd.KeyFile, "PEM private key of -etcd-cert-file")
	fs.DurationVar(&c.Etcd.DialTimeout, "etcd-dial-timeout", c.Etcd.DialTimeout, "how long startup waits for etcd")
	fs.DurationVar(&c.Etcd.RequestTimeout, "etcd-request-timeout", c.Etcd.RequestTimeout, "bound of each etcd request (503 when exceeded)")
	fs.IntVar(&c.Etcd.MaxRequestBytes, "etcd-max-request-bytes", c.Etcd.MaxRequestBytes, "largest etcd write transaction; at most the members' --max-request-bytes")
}

// validateEtcd checks the etcd settings (used with -store=etcd).
func (c Config) validateEtcd() error {
	o := c.Etcd
	if len(o.Endpoints) == 0 {
		return envflag.Invalid("etcd-endpoints", "must list at least one etcd client URL")
	}
	for _, e := range o.Endpoints {
		hostPort := e
		if scheme, rest, ok := strings.Cut(e, "://"); ok {
			if scheme != "http" && scheme != "https" {
				return envflag.Invalid("etcd-endpoints", "%q: scheme must be http or https", e)
			}
			hostPort = rest
		}
		if err := envflag.CheckHostPort("etcd-endpoints", strings.TrimSuffix(hostPort, "/")); err != nil {
			return err
		}
	}
	if o.Prefix == "" {
		return envflag.Invalid("etcd-prefix", "must not be empty")
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return envflag.Invalid("etcd-cert-file", "-etcd-cert-file and -etcd-key-file go together")
	}
	for flagName, file := range map[string]string{"etcd-ca-file": o.CAFile, "etcd-cert-file": o.CertFile, "etcd-key-file": o.KeyFile} {
		if file == "" {
			continue
		}
		if _, err := os.Stat(file); err != nil {
			return envflag.Invalid(flagName, "%w", err)
		}
	}
	if o.DialTimeout <= 0 {
		return envflag.Invalid("etcd-dial-timeout", "must be positive, got %v", o.DialTimeout)
	}
	if o.RequestTimeout <= 0 {
		return envflag.Invalid("etcd-request-timeout", "must be positive, got %v", o.RequestTimeout)
	}
	if o.MaxRequestBytes < 64<<10 {
		return envflag.Invalid("etcd-max-request-bytes", "must be at least 65536, got %d", o.MaxRequestBytes)
	}
	return nil
}
