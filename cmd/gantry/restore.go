package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/gantry-dev/gantry/internal/stack"
)

// restoreHelp is gantry restore's -h.
var restoreHelp = helpText{
	name:        "gantry restore",
	description: "make a new data folder from a backup and check it",
	usage:       []string{"gantry restore -from BACKUP -data-dir NEWDIR [-kms local|aws]"},
	details: `Makes a new data folder from a backup folder of gantry backup (bolt), and checks it. The backup
folder is not changed (its database is copied in one read transaction), and NEWDIR must not exist or
be empty: a restore never overwrites a data folder; move the old one aside first. -data-dir is
always given here (never GANTRY_DATA_DIR): it names the new folder. An etcd backup is restored with
etcd's own tool (docs/operations.md, Restore). Exit 0 when the new folder passes gantry check, 1
otherwise, 2 on a usage error.`,
	examples: []string{"gantry restore -from /backups/gantry-2024-05-01 -data-dir /var/lib/gantry-restored"},
}

// runRestore makes a new data folder from a backup folder of gantry backup (see restoreHelp).
func runRestore(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gantry restore", flag.ContinueOnError)
	from := fs.String("from", "", "backup folder written by gantry backup")
	dataDir := fs.String("data-dir", "", "new data folder to restore into (must not exist, or be empty)")
	cfg := stack.DefaultConfig()
	server := serverSettings(&cfg, fs, "kms")
	describe(fs, "kms", "key provider gantry runs with: local or aws")
	help := func(w io.Writer) { restoreHelp.print(w, fs) }
	if code, ok := parseFlags(fs, args, help, stdout, stderr, server); !ok {
		return code
	}
	if code, ok := checkServerFlags(fs, cfg, stderr); !ok {
		return code
	}
	if *from == "" || *dataDir == "" {
		fmt.Fprintf(stderr, "gantry restore: -from and -data-dir are required\n%s\n", whereTheFlagsAre(fs.Name()))
		return 2
	}
	provider := cfg.Secrets.KMS
	written, err := stack.BackupDataDir(*from, *dataDir, stack.BackupOptions{})
	for _, f := range written {
		fmt.Fprintf(stdout, "restored %s\n", f)
	}
	if err != nil {
		fmt.Fprintln(stderr, "gantry restore:", err)
		return 1
	}
	fmt.Fprintf(stdout, "checking %s:\n", *dataDir)
	results := stack.CheckDataDir(context.Background(), *dataDir, stack.CheckOptions{KMS: provider})
	printChecks(stdout, results)
	if stack.CheckFailed(results) {
		fmt.Fprintf(stderr, "gantry restore: %s does not pass gantry check (see above): do not start gantry on it; the backup %s was not changed\n", *dataDir, *from)
		return 1
	}
	fmt.Fprintf(stdout, "restored %s into %s: ok; start gantry with -data-dir %s\n", *from, *dataDir, *dataDir)
	return 0
}
