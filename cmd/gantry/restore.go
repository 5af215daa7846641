package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/gantry-dev/gantry/internal/stack"
)

// runRestore makes a new data folder from a backup folder of gantry backup (bbolt), and checks it:
//
//	gantry restore -from BACKUP -data-dir NEWDIR [-kms local|aws]
//
// The backup folder is not changed (its database is copied in one read transaction), and NEWDIR must
// not exist or be empty: a restore never overwrites a data folder; move the old one aside first. An
// etcd backup is restored with etcd's own tool (docs/operations.md, Restore). Exit 0 when the new
// folder passes gantry check, 1 otherwise, 2 on a usage error.
func runRestore(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gantry restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "", "backup folder written by gantry backup")
	dataDir := fs.String("data-dir", "", "new data folder to restore into (must not exist, or be empty)")
	provider := fs.String("kms", envOr("GANTRY_KMS", "local"), "key provider gantry runs with: local or aws")
	if err := fs.Parse(args); err != nil {
		return exitCodeOfParse(err)
	}
	if fs.NArg() > 0 || *from == "" || *dataDir == "" || (*provider != "local" && *provider != "aws") {
		fmt.Fprintln(stderr, "usage: gantry restore -from BACKUP -data-dir NEWDIR [-kms local|aws]")
		return 2
	}
	written, err := stack.BackupDataDir(*from, *dataDir, stack.BackupOptions{})
	for _, f := range written {
		fmt.Fprintf(stdout, "restored %s\n", f)
	}
	if err != nil {
		fmt.Fprintln(stderr, "gantry restore:", err)
		return 1
	}
	fmt.Fprintf(stdout, "checking %s:\n", *dataDir)
	results := stack.CheckDataDir(context.Background(), *dataDir, stack.CheckOptions{KMS: *provider})
	printChecks(stdout, results)
	if stack.CheckFailed(results) {
		fmt.Fprintf(stderr, "gantry restore: %s does not pass gantry check (see above): do not start gantry on it; the backup %s was not changed\n", *dataDir, *from)
		return 1
	}
	fmt.Fprintf(stdout, "restored %s into %s: ok; start gantry with -data-dir %s\n", *from, *dataDir, *dataDir)
	return 0
}
