package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/buildinfo"
	"github.com/gantry-dev/gantry/pkg/logging"
	"github.com/gantry-dev/gantry/pkg/settings"
)

// defaultGCPercent is the garbage collector's target of gantry serve when GOGC is not set: a read
// allocates a few hundred short-lived objects, and at Go's default (100) collection took 10-12% of
// a read's CPU; at 200 a read of one credential served about 10% more requests per second (wrk, 2
// vCPU: 17.6-18.1k → 19.6-19.8k req/s) for a heap up to three times the live data, which is tens of
// megabytes. GOGC (and GOMEMLIMIT, to cap the heap) still decide when set.
const defaultGCPercent = 200

// tuneGC applies defaultGCPercent unless the GOGC environment variable is set, and returns the
// percent in force.
func tuneGC(getenv func(string) string) int {
	if v := getenv("GOGC"); v != "" {
		previous := debug.SetGCPercent(-1)
		debug.SetGCPercent(previous)
		return previous
	}
	debug.SetGCPercent(defaultGCPercent)
	return defaultGCPercent
}

// runServe starts the services and the gateway (-target=all by default) and runs until SIGINT or
// SIGTERM; SIGHUP reloads the keyring and the clusters file.
func runServe(args []string, stdout, stderr io.Writer) int {
	cfg := stack.DefaultConfig()
	table := cfg.Settings()
	fs := flag.NewFlagSet("gantry serve", flag.ContinueOnError)
	table.AddFlags(fs)
	help := func(w io.Writer) { printServeHelp(w, table) }
	if code, ok := parseFlags(fs, args, help, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gantry serve: unexpected argument %q (settings are flags: gantry serve -h)\n", fs.Arg(0))
		return 2
	}
	if err := table.Load(environment); err != nil {
		fmt.Fprintln(stderr, "gantry: bad configuration:", err)
		return 2
	}
	if err := table.Explain(cfg.Validate()); err != nil {
		fmt.Fprintln(stderr, "gantry: bad configuration:", err)
		return 2
	}
	logger, _, err := logging.New(cfg.Log)
	if err != nil {
		fmt.Fprintln(stderr, "gantry:", err)
		return 2
	}
	defer func() { _ = logger.Sync() }()
	logger.Info("settings given (the rest are defaults, see gantry serve -h)", zap.Strings("settings", table.Changed()), zap.Int("gogc", tuneGC(goRuntimeVariable)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// SIGHUP reloads the clusters file instead of killing the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if err := stack.Run(ctx, cfg, logger, hup); err != nil {
		// A setting that fails at start (a listen address already in use) is named as it was given.
		logger.Error("gantry stopped", zap.Error(table.Explain(err)))
		return 1
	}
	logger.Info("gantry stopped cleanly")
	return 0
}

// serveHelp is gantry serve's -h; its flags are every setting of the table, by group.
var serveHelp = helpText{
	name:        "gantry serve",
	description: "start the services and the gateway (also: the bare binary with only flags)",
	usage:       []string{"gantry serve [flags]", "gantry [flags]"},
	details: `Runs the roles -target names (all by default) until SIGINT or SIGTERM; SIGHUP reloads the
keyring and the clusters file. Every setting is a flag and a GANTRY_* variable (some also answer to
Confidant's or Omnibot's names); docs/configuration.md lists the same table.`,
	examples: []string{
		"gantry serve",
		"gantry serve -data-dir /var/lib/gantry -log-format json",
		"GANTRY_TARGET=secrets GANTRY_SECRETS_LISTEN=:9090 gantry serve",
	},
}

// printServeHelp prints serveHelp with every setting of table, by group, as the reference.
func printServeHelp(w io.Writer, table *settings.Table) {
	serveHelp.print(w, nil)
	table.PrintGroups(w)
}

// versionHelp is gantry version's -h.
var versionHelp = helpText{
	name:        "gantry version",
	description: "print the version",
	usage:       []string{"gantry version"},
	details:     "Prints the version, the commit and the build type (release or dev).",
	examples:    []string{"gantry version"},
	flagsNote:   "none",
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && isHelpFlag(args[0]) {
		versionHelp.print(stdout, nil)
		return 0
	}
	if len(args) > 0 {
		fmt.Fprintf(stderr, "gantry version: takes no arguments\n%s\n", whereTheFlagsAre("gantry version"))
		return 2
	}
	fmt.Fprintf(stdout, "gantry %s (%s/%s)\n", buildinfo.Version, buildinfo.ShortCommit(), buildinfo.BuildType)
	return 0
}
