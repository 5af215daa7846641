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
	fs.SetOutput(stderr)
	table.Register(fs) // -h prints every setting by group, with its variables and default
	if err := fs.Parse(args); err != nil {
		return exitCodeOfParse(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gantry serve: unexpected argument %q (settings are flags: gantry serve -h)\n", fs.Arg(0))
		return 2
	}
	if err := table.Load(settings.Environment); err != nil {
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
	logger.Info("settings given (the rest are defaults, see gantry serve -h)", zap.Strings("settings", table.Changed()), zap.Int("gogc", tuneGC(os.Getenv)))
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

func runVersion(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "usage: gantry version")
		return 2
	}
	fmt.Fprintf(stdout, "gantry %s (%s/%s)\n", buildinfo.Version, buildinfo.ShortCommit(), buildinfo.BuildType)
	return 0
}
