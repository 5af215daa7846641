package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
)

// whoamiHelp is gantry whoami's -h.
var whoamiHelp = helpText{
	name:        "gantry whoami",
	description: "print who the server takes you for, and by which authentication method",
	usage:       []string{"gantry whoami [flags]"},
	details: `Prints the principal the server authenticated (name and type) and the method: kms, cert, kubernetes,
jwt, session or header.`,
	examples: []string{
		"gantry whoami",
		"gantry whoami -addr https://gantry.internal:8443 -cert tls/cert.pem -cert-key tls/key.pem",
		"gantry whoami -token-file /var/run/secrets/gantry/token",
	},
}

// runWhoami prints who the server takes the caller to be, and by which authentication method: the
// check that a certificate, a pod's token or a CI token maps to the service it should.
func runWhoami(args []string, stdout, stderr io.Writer) int {
	const name = "gantry whoami"
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	client := addClientFlags(fs, stderr)
	help := func(w io.Writer) { whoamiHelp.print(w, fs) }
	if code, ok := parseFlags(fs, args, help, stdout, stderr, client.settings...); !ok {
		return code
	}
	if err := client.validate(); err != nil {
		return exitCode(stderr, name, err)
	}
	if fs.NArg() > 0 {
		return exitCode(stderr, name, usageErrorf("whoami takes no arguments"))
	}
	ctx := context.Background()
	api, err := client.client(ctx)
	if err != nil {
		return exitCode(stderr, name, err)
	}
	caller, err := api.Caller(ctx)
	if err != nil {
		return exitCode(stderr, name, err)
	}
	if client.asJSON(stdout) {
		return exitCode(stderr, name, printJSON(stdout, caller))
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "principal\t%s\n", caller.Principal)
	fmt.Fprintf(tw, "type\t%s\n", caller.PrincipalType)
	fmt.Fprintf(tw, "authenticated by\t%s\n", caller.AuthType)
	return exitCode(stderr, name, tw.Flush())
}
