package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/buildinfo"
	"github.com/gantry-dev/gantry/pkg/logging"
	"github.com/gantry-dev/gantry/pkg/settings"
)

// runServe starts the services and the gateway (-target=all by default) and runs until SIGINT or
// SIGTERM; SIGHUP reloads the clusters file.
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
	logger.Info("settings given (the rest are defaults, see gantry serve -h)", zap.Strings("settings", table.Changed()))
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
