// Command gantry runs gantry's services and gateway (-target=all by default) and hosts its client
// subcommands.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/buildinfo"
	"github.com/gantry-dev/gantry/pkg/logging"
	"github.com/gantry-dev/gantry/pkg/settings"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	if len(args) > 0 && args[0] == "token" {
		return runToken(args[1:], os.Stdout, os.Stderr)
	}
	if len(args) > 0 && args[0] == "keyring" {
		return runKeyring(args[1:], os.Stdout, os.Stderr)
	}
	if len(args) > 0 && args[0] == "check" {
		return runCheck(args[1:], os.Stdout, os.Stderr)
	}
	if len(args) > 0 && args[0] == "backup" {
		return runBackup(args[1:], os.Stdout, os.Stderr)
	}
	if len(args) > 0 && args[0] == "version" {
		fmt.Printf("gantry %s (%s/%s)\n", buildinfo.Version, buildinfo.ShortCommit(), buildinfo.BuildType)
		return 0
	}
	cfg := stack.DefaultConfig()
	table := cfg.Settings()
	fs := flag.NewFlagSet("gantry", flag.ContinueOnError)
	table.Register(fs) // -h prints the whole table, by group
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := table.Load(settings.Environment); err != nil {
		fmt.Fprintln(os.Stderr, "gantry: bad configuration:", err)
		return 2
	}
	if err := table.Explain(cfg.Validate()); err != nil {
		fmt.Fprintln(os.Stderr, "gantry: bad configuration:", err)
		return 2
	}
	logger, _, err := logging.New(cfg.Log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gantry:", err)
		return 2
	}
	defer func() { _ = logger.Sync() }()
	logger.Info("settings given (the rest are defaults, see gantry -h)", zap.Strings("settings", table.Changed()))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// SIGHUP reloads the clusters file instead of killing the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if err := stack.Run(ctx, cfg, logger, hup); err != nil {
		logger.Error("gantry stopped", zap.Error(err))
		return 1
	}
	logger.Info("gantry stopped cleanly")
	return 0
}
