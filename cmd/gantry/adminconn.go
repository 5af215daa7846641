package main

import (
	"flag"
	"path/filepath"

	"google.golang.org/grpc/credentials"

	"github.com/gantry-dev/gantry/pkg/internaltls"
)

// adminConnFlags are the flags that reach a running secrets service's admin interface
// (secretsadmin.v1), which answers only the gateway's certificate of the internal CA: gantry backup
// of a running bbolt store, gantry keyring rewrap.
type adminConnFlags struct {
	dataDir, addr, tlsDir, caFile, certFile, keyFile, serverName *string
}

// registerAdminConnFlags adds the admin connection flags to fs; dataDir is the command's own
// -data-dir (the default internal TLS folder is its tls/).
func registerAdminConnFlags(fs *flag.FlagSet, dataDir *string) *adminConnFlags {
	return &adminConnFlags{
		dataDir:    dataDir,
		addr:       fs.String("secrets-addr", envOr("GANTRY_SECRETS_LISTEN", "127.0.0.1:9090"), "gRPC address of the running secrets service (its -secrets-listen)"),
		tlsDir:     fs.String("grpc-tls-dir", envOr("GANTRY_GRPC_TLS_DIR", ""), "internal TLS folder gantry runs with (default: the data folder's tls/); its gateway.crt and gateway.key authenticate this tool"),
		caFile:     fs.String("grpc-tls-ca-file", envOr("GANTRY_GRPC_TLS_CA_FILE", ""), "with your own internal PKI: the CA file gantry runs with"),
		certFile:   fs.String("grpc-tls-cert-file", envOr("GANTRY_GRPC_TLS_CERT_FILE", ""), "with your own internal PKI: a certificate naming the gateway (-grpc-tls-gateway-name)"),
		keyFile:    fs.String("grpc-tls-key-file", envOr("GANTRY_GRPC_TLS_KEY_FILE", ""), "with your own internal PKI: the key of -grpc-tls-cert-file"),
		serverName: fs.String("grpc-tls-server-name", envOr("GANTRY_GRPC_TLS_SERVER_NAME", internaltls.DefaultServerName), "name verified in the secrets service's certificate"),
	}
}

// operatorPKI reports whether the operator's own PKI files were given.
func (a *adminConnFlags) operatorPKI() bool {
	return *a.caFile != "" || *a.certFile != "" || *a.keyFile != ""
}

// valid reports whether the PKI files are all given or none.
func (a *adminConnFlags) valid() bool {
	return !a.operatorPKI() || (*a.caFile != "" && *a.certFile != "" && *a.keyFile != "")
}

// target is the address to dial (an unspecified listen host becomes loopback).
func (a *adminConnFlags) target() string { return dialAddr(*a.addr) }

// credentials loads the gateway's certificate: the operator's files, or the internal CA's in the
// TLS folder.
func (a *adminConnFlags) credentials() (credentials.TransportCredentials, error) {
	if a.operatorPKI() {
		return internaltls.FileClientCredentials(*a.caFile, *a.certFile, *a.keyFile, *a.serverName)
	}
	dir := *a.tlsDir
	if dir == "" {
		dir = filepath.Join(*a.dataDir, "tls")
	}
	return internaltls.GatewayClientCredentials(dir, *a.serverName)
}
