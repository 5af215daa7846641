// Command gantry is one binary for gantry's services and gateway (gantry serve) and their tools: the
// command-line client of the secrets API (creds, services, changes, env, certs) and the data-folder tools
// (token, keyring, tls, check, backup, restore). main only dispatches; each command lives in its own file.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

func main() { os.Exit(run(os.Args[1:])) }

// command is one subcommand of gantry: run gets the arguments after the command's name and returns
// the exit code.
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// commands lists every subcommand, in the order gantry help shows them. It is a function, not a
// variable, because help itself reads the list.
func commands() []command {
	return []command{
		{"serve", "start the services and the gateway (also: the bare binary with only flags)", runServe},
		{"creds", "list, read, create, update, diff, revert and archive credentials; list those due for rotation", runCreds},
		{"services", "list and read services, map and unmap credentials, history and revert", runServices},
		{"changes", "list, show, approve, reject or cancel the change requests an approval rule holds", runChanges},
		{"env", "run a command with a service's credentials as CREDENTIALS_<KEY> variables", runEnv},
		{"certs", "issue a certificate from a CA of the server into files, or renew a workload certificate", runCerts},
		{"whoami", "print who the server takes you for, and by which authentication method", runWhoami},
		{"token", "mint a kmsauth token with the keyring of a data folder (for curl -u)", runToken},
		{"login", "print a one-time link that opens a web UI session as a user", runLogin},
		{"keyring", "create, list, rotate (or stage and activate) and retire key versions; rewrap data keys online", runKeyring},
		{"tls", "issue internal TLS certificates, one folder per process, for a split deployment", runTLS},
		{"queue", "list, redrive or drop the dead letters of the chat inbound queue", runQueue},
		{"check", "check a data folder offline (gantry stopped); -upgrade rewrites old JSON records first", runCheck},
		{"backup", "copy a data folder (gantry running or stopped) and check the copy", runBackup},
		{"restore", "make a new data folder from a backup and check it", runRestore},
		{"import", "import a Confidant installation (gantry import confidant): every credential, service and revision", runImport},
		{"version", "print the version", runVersion},
		{"help", "list the commands, or show one command's help: gantry help COMMAND", runHelp},
	}
}

func run(args []string) int { return dispatch(args, os.Stdout, os.Stderr) }

// dispatch runs the command args name. No arguments, or a first argument that is a flag, start the
// server as gantry always did; a word that names no command is a usage error, never a server start.
func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && isHelpFlag(args[0]) {
		// The commands on one screen, as gantry help prints them; the server's 700 lines of settings
		// are gantry serve -h's, which the list names.
		printUsage(stdout)
		return 0
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return runServe(args, stdout, stderr)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "gantry: unknown command %q%s\nRun 'gantry help' for the list of commands.\n", args[0], suggestion(args[0]))
	return 2
}

func isHelpFlag(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help"
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, `gantry: a Confidant-compatible secrets manager, an Omnibot-compatible Slack gateway and an
Envoy-style gateway in one binary.

usage: gantry COMMAND [flags] [arguments]

commands:`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, `
Run 'gantry COMMAND -h' for a command's flags and examples; 'gantry serve -h' lists every setting
of the server. The client commands are described in docs/cli.md.`)
}

// helpHelp is gantry help's -h.
var helpHelp = helpText{
	name:        "gantry help",
	description: "list the commands, or show one command's help: gantry help COMMAND",
	usage:       []string{"gantry help [COMMAND]"},
	details:     "gantry help COMMAND prints what gantry COMMAND -h prints.",
	examples:    []string{"gantry help", "gantry help serve"},
	flagsNote:   "none",
}

func runHelp(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stdout)
		return 0
	}
	if isHelpFlag(args[0]) || args[0] == "help" {
		helpHelp.print(stdout, nil)
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run([]string{"-h"}, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "gantry help: unknown command %q%s\n", args[0], suggestion(args[0]))
	return 2
}
