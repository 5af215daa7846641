package main

import (
	"flag"
	"os"
	"strings"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/settings"
)

// This file is the one place of cmd/gantry that touches the process environment (a guard test,
// TestEveryEnvironmentReadIsInTheTable, fails on a read anywhere else). Every variable a command
// reads is a setting of a table: serve's own (serverSettings), or the client commands'
// (clientSettings); the table reads it through environment. The three reads below are not settings:
// the login name as a last resort, Go's runtime variable GOGC, and the whole environment gantry env
// hands on to the command it runs.

// environment is where the tables read their variables: the process environment, a recording map
// in the tests.
var environment settings.Lookup = settings.Environment

// serverSettings selects the settings of serve's table that patterns name (a name, or a prefix
// ending in "*": "etcd-*") for cfg, and registers them as flags of fs with serve's names; parseFlags
// then reads them from serve's variables. A nil fs registers no flags: the settings then come from
// the environment alone, as the defaults of a command's own flags (gantry token's -to is the
// server's -auth-context).
func serverSettings(cfg *stack.Config, fs *flag.FlagSet, patterns ...string) *settings.Table {
	table := cfg.Settings().Select(patterns...)
	if fs != nil {
		table.AddFlags(fs)
	}
	return table
}

// describe replaces the description of a flag registered from serve's table with what it means to
// the command (serve's -data-dir is created; gantry token only reads the keyring in it).
func describe(fs *flag.FlagSet, name, usage string) {
	fs.Lookup(name).Usage = usage
}

// clientGroup is the group of the client commands' settings: they configure the command line, not a
// server, so docs/cli.md describes them and serve's table does not hold them.
const clientGroup = "client"

// clientSettings registers settings of a command's own as flags of fs, each also read from its
// GANTRY_<FLAG> variable (GANTRY_ADDR for -addr), and returns their table to load after the flags.
func clientSettings(fs *flag.FlagSet, list ...settings.Setting) *settings.Table {
	for i := range list {
		list[i].Group = clientGroup
	}
	table := settings.New(settings.Part{Settings: list})
	table.AddFlags(fs)
	return table
}

// clientString is a string setting of the client commands: a blank variable keeps the default, as
// they always read their variables.
func clientString(p *string) settings.Value {
	return settings.Func("string", func() string { return *p }, func(s string) error {
		if strings.TrimSpace(s) != "" {
			*p = s
		}
		return nil
	})
}

// loginNameFromEnvironment is $USER, the caller's name when the system's user database has none.
func loginNameFromEnvironment() string { return os.Getenv("USER") }

// goRuntimeVariable reads GOGC, Go's own runtime variable (which the runtime has applied already),
// for tuneGC; any other name reads as unset.
func goRuntimeVariable(name string) string {
	if name != "GOGC" {
		return ""
	}
	return os.Getenv("GOGC")
}

// processEnvironment is the whole environment, for gantry env to pass on to the command it runs.
func processEnvironment() []string { return os.Environ() }
