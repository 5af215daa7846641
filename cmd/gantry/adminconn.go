package main

import (
	"cmp"
	"flag"
	"path/filepath"

	"google.golang.org/grpc/credentials"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/internaltls"
	"github.com/gantry-dev/gantry/pkg/settings"
)

// adminConnFlags are the flags that reach a running secrets service's admin interface
// (secretsadmin.v1), which answers only the gateway's certificate of the internal CA: gantry backup
// of a running bbolt store, gantry keyring rewrap. The internal TLS flags are serve's own (-grpc-tls-*,
// same variables): the tool authenticates with what the gateway runs with.
type adminConnFlags struct {
	// cfg is the command's Config: its -data-dir (the default internal TLS folder is its tls/), the
	// -grpc-tls-* settings and the secrets service's -secrets-listen.
	cfg  *stack.Config
	addr string
	// settings are loaded by parseFlags.
	settings []*settings.Table
}

// registerAdminConnFlags adds the admin connection flags to fs, filling cfg.
func registerAdminConnFlags(fs *flag.FlagSet, cfg *stack.Config) *adminConnFlags {
	a := &adminConnFlags{cfg: cfg}
	fs.StringVar(&a.addr, "secrets-addr", "", "gRPC address of the running secrets service (default: its -secrets-listen, from GANTRY_SECRETS_LISTEN, else 127.0.0.1:9090)")
	a.settings = []*settings.Table{
		serverSettings(cfg, fs, "grpc-tls-dir", "grpc-tls-ca-file", "grpc-tls-cert-file", "grpc-tls-key-file", "grpc-tls-server-name"),
		serverSettings(cfg, nil, "secrets-listen"),
	}
	describe(fs, "grpc-tls-dir", "internal TLS folder gantry runs with (default: the data folder's tls/); its gateway.crt and gateway.key authenticate this tool")
	describe(fs, "grpc-tls-ca-file", "with your own internal PKI: the CA file gantry runs with")
	describe(fs, "grpc-tls-cert-file", "with your own internal PKI: a certificate naming the gateway (-grpc-tls-gateway-name)")
	describe(fs, "grpc-tls-server-name", "name verified in the secrets service's certificate")
	return a
}

// operatorPKI reports whether the operator's own PKI files were given.
func (a *adminConnFlags) operatorPKI() bool {
	t := a.cfg.InternalTLS
	return t.CAFile != "" || t.CertFile != "" || t.KeyFile != ""
}

// valid reports whether the PKI files are all given or none.
func (a *adminConnFlags) valid() bool {
	t := a.cfg.InternalTLS
	return !a.operatorPKI() || (t.CAFile != "" && t.CertFile != "" && t.KeyFile != "")
}

// target is the address to dial: -secrets-addr, else the server's -secrets-listen (an unspecified
// listen host becomes loopback).
func (a *adminConnFlags) target() string { return dialAddr(cmp.Or(a.addr, a.cfg.Secrets.Listen)) }

// credentials loads the gateway's certificate: the operator's files, or the internal CA's in the
// TLS folder.
func (a *adminConnFlags) credentials() (credentials.TransportCredentials, error) {
	t := a.cfg.InternalTLS
	serverName := cmp.Or(t.ServerName, internaltls.DefaultServerName)
	if a.operatorPKI() {
		return internaltls.FileClientCredentials(t.CAFile, t.CertFile, t.KeyFile, serverName)
	}
	dir := t.Dir
	if dir == "" {
		dir = filepath.Join(a.cfg.DataDir, "tls")
	}
	return internaltls.GatewayClientCredentials(dir, serverName)
}
