package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"

	"github.com/gantry-dev/gantry/pkg/gantryclient"
)

// envHelp is gantry env's -h.
var envHelp = helpText{
	name:        "gantry env",
	description: "run a command with a service's credentials as CREDENTIALS_<KEY> variables",
	usage:       []string{"gantry env -service S [flags] -- COMMAND [ARGUMENTS...]"},
	details: `Runs COMMAND with the credential pairs of service S added to its environment as CREDENTIALS_<KEY>
(upper-cased). Values are never printed. The service is read as the caller: a service reads its own
credentials with a service token (-from S -user-type service).`,
	examples: []string{
		"gantry env -service orders -- ./orders-server --port 8000",
		`gantry env -service orders -from orders -user-type service -- sh -c 'test -n "$CREDENTIALS_DB_PASSWORD" && echo set'`,
	},
}

// runEnv runs a command with the credential pairs of a service in its environment, as Confidant's
// `confidant env` does: each key becomes PREFIX+KEY upper-cased (CREDENTIALS_DB_PASSWORD). gantry
// replaces itself with the command (exec), so signals and the exit code are the command's own.
func runEnv(args []string, stdout, stderr io.Writer) int {
	const name = "gantry env"
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	service := fs.String("service", "", "the service whose credentials to pass (required)")
	prefix := fs.String("prefix", "CREDENTIALS_", "prefix of the variable names")
	client := addClientFlags(fs, stderr)
	help := func(w io.Writer) { envHelp.print(w, fs) }
	if code, ok := parseFlags(fs, args, help, stdout, stderr, client.settings...); !ok {
		return code
	}
	command := fs.Args()
	if err := client.validate(); err != nil {
		return exitCode(stderr, name, err)
	}
	if *service == "" || len(command) == 0 {
		return exitCode(stderr, name, usageErrorf("want -service S and a command after --"))
	}
	path, err := exec.LookPath(command[0])
	if err != nil {
		return exitCode(stderr, name, fmt.Errorf("command %q: %w", command[0], err))
	}
	ctx := context.Background()
	api, err := client.client(ctx)
	if err != nil {
		return exitCode(stderr, name, err)
	}
	svc, err := api.GetService(ctx, *service, false)
	if err != nil {
		return exitCode(stderr, name, err)
	}
	err = syscall.Exec(path, command, credentialEnviron(processEnvironment(), *prefix, svc.Credentials))
	// Exec returns only when it failed.
	return exitCode(stderr, name, fmt.Errorf("run %s: %w", path, err))
}

// credentialEnviron is environ with each credential pair as PREFIX+KEY (upper-cased), a value as its
// text (a number as its JSON text, true/false, null as the empty string). A variable of
// that name already in environ is replaced, not repeated: with two entries a child's getenv would
// see the first, the stale one.
func credentialEnviron(environ []string, prefix string, creds []gantryclient.Credential) []string {
	pairs := map[string]string{}
	for _, cred := range creds {
		for key, value := range cred.CredentialPairs {
			pairs[strings.ToUpper(prefix+key)] = value.Text()
		}
	}
	out := make([]string, 0, len(environ)+len(pairs))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if _, replaced := pairs[name]; !replaced {
			out = append(out, kv)
		}
	}
	for _, name := range sortedKeys(pairs) {
		out = append(out, name+"="+pairs[name])
	}
	return out
}
