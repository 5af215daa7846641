package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/gantry-dev/gantry/internal/stack"
)

// runBackup copies a data folder into a new folder and checks the copy:
//
//	gantry backup [-data-dir gantry-data] -out NEWDIR [-kms local|aws]
//
// Exit 0 when the copy is made and passes gantry check, 1 otherwise (nothing the user had is removed;
// a copy that fails its check is left for inspection), 2 on a usage error.
func runBackup(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gantry backup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", envOr("GANTRY_DATA_DIR", "gantry-data"), "data folder to back up")
	out := fs.String("out", "", "new folder to write the backup to (must not exist, or be empty)")
	provider := fs.String("kms", envOr("GANTRY_KMS", "local"), "key provider gantry runs with: local (check the copied keyring against the copied store) or aws")
	if err := fs.Parse(args); err != nil {
		return exitCodeOfParse(err)
	}
	if fs.NArg() > 0 || *out == "" || (*provider != "local" && *provider != "aws") {
		fmt.Fprintln(stderr, "usage: gantry backup [-data-dir DIR] -out NEWDIR [-kms local|aws]")
		return 2
	}
	written, err := stack.BackupDataDir(*dataDir, *out, stack.BackupOptions{})
	for _, f := range written {
		fmt.Fprintf(stdout, "copied %s\n", f)
	}
	if err != nil {
		fmt.Fprintln(stderr, "gantry backup:", err)
		return 1
	}
	fmt.Fprintf(stdout, "checking the copy in %s:\n", *out)
	results := stack.CheckDataDir(context.Background(), *out, stack.CheckOptions{KMS: *provider})
	printChecks(stdout, results)
	if stack.CheckFailed(results) {
		fmt.Fprintf(stderr, "gantry backup: the copy in %s does not pass gantry check (see above): do not rely on it. It is left there for inspection; the data folder %s was not changed\n", *out, *dataDir)
		return 1
	}
	fmt.Fprintf(stdout, "backup of %s in %s: ok\n", *dataDir, *out)
	return 0
}
