package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/internaltls"
)

// tlsHelp is gantry tls's -h.
var tlsHelp = helpText{
	name:        "gantry tls",
	description: "issue internal TLS certificates, one folder per process, for a split deployment",
	usage:       []string{"gantry tls init -ca-dir DIR -leaf ROLE:DIR [-leaf ROLE:DIR ...]"},
	details: `init is the one-shot initialisation of internal mutual TLS for a split deployment: it creates the
internal CA in -ca-dir (or loads it) and issues each -leaf its own certificate into a folder of its
own: ca.crt, tls.crt and tls.key, what -grpc-tls-ca-file, -grpc-tls-cert-file and -grpc-tls-key-file
take. Only -ca-dir holds ca.key: mount it into this command alone. ROLE is
  gateway  the gateway (the one identity services trust with gateway-only metadata, and the only one
           the admin gRPC listener answers)
  service  a secrets or chat process (one leaf per process)
  client   a direct caller (grpcurl, scripts): the service APIs only
Run it again to renew: a leaf signed by the CA, with its name and more than 30 days left is kept.`,
	examples: []string{
		"gantry tls init -ca-dir /pki/ca -leaf gateway:/pki/gateway -leaf service:/pki/secrets -leaf service:/pki/chat   # docker-compose.yml's tls-init",
	},
}

// tlsInitFlags is the flag set of gantry tls init.
func tlsInitFlags() (fs *flag.FlagSet, caDir *string, leaves *multiFlag) {
	fs = flag.NewFlagSet("gantry tls init", flag.ContinueOnError)
	caDir = fs.String("ca-dir", "", "folder of the internal CA (ca.crt and ca.key; created when missing)")
	leaves = &multiFlag{}
	fs.Var(leaves, "leaf", "ROLE:DIR, a certificate to issue into DIR (repeatable); ROLE is gateway, service or client")
	return fs, caDir, leaves
}

// runTLS administers the internal TLS material: gantry tls init.
func runTLS(args []string, stdout, stderr io.Writer) int {
	fs, caDir, leaves := tlsInitFlags()
	help := func(w io.Writer) { tlsHelp.print(w, fs) }
	if len(args) == 1 && isHelpFlag(args[0]) {
		help(stdout)
		return 0
	}
	if len(args) == 0 || args[0] != "init" {
		help(stderr)
		return 2
	}
	if code, ok := parseFlags(fs, args[1:], help, stdout, stderr); !ok {
		return code
	}
	if *caDir == "" || len(*leaves) == 0 || fs.NArg() != 0 {
		fmt.Fprintf(stderr, "gantry tls init: -ca-dir and at least one -leaf are required, and nothing else\n%s\n", whereTheFlagsAre(fs.Name()))
		return 2
	}
	roles := map[string]internaltls.LeafSpec{"gateway": internaltls.GatewayLeaf, "service": internaltls.ServiceLeaf, "client": internaltls.ClientLeaf}
	var specs []internaltls.LeafSpec
	for _, l := range *leaves {
		role, dir, ok := strings.Cut(l, ":")
		spec, known := roles[role]
		if !ok || !known || dir == "" {
			fmt.Fprintf(stderr, "gantry tls init: -leaf %q is not ROLE:DIR with ROLE gateway, service or client\n", l)
			return 2
		}
		spec.Dir = dir
		specs = append(specs, spec)
	}
	logger, err := zap.NewProduction()
	if err != nil {
		logger = zap.NewNop()
	}
	defer func() { _ = logger.Sync() }()
	if err := internaltls.Init(*caDir, specs, logger.Named("tls")); err != nil {
		fmt.Fprintln(stderr, "gantry tls init:", err)
		return 1
	}
	for _, s := range specs {
		fmt.Fprintf(stdout, "%s\t%s\n", s.Name, s.Dir)
	}
	return 0
}
