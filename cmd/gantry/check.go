package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/gantry-dev/gantry/internal/stack"
)

// checkHelp is gantry check's -h.
var checkHelp = helpText{
	name:        "gantry check",
	description: "check a data folder offline (gantry stopped); -upgrade rewrites old JSON records first",
	usage:       []string{"gantry check [-data-dir DIR] [-no-consistency] [-kms local|aws] [-grpc-tls-dir DIR] [-store bolt|etcd] [-upgrade] [-etcd-... flags]"},
	details: `Checks a data folder read-only, one line per check. With -upgrade it first rewrites every stored
record still in the JSON format of earlier versions in the current one (bolt: the stopped folder's
database; -store etcd: online, in the cluster the -etcd-* flags name, with every -etcd-* setting
serve runs with), then checks as without it. The settings are serve's flags and GANTRY_* variables.
Exit 0 when every check passes, 1 when one fails, 2 on a usage error.`,
	examples: []string{
		"gantry check -data-dir /var/lib/gantry",
		"gantry check -data-dir /var/lib/gantry -upgrade",
		"GANTRY_STORE=etcd GANTRY_ETCD_ENDPOINTS=https://etcd-0:2379 gantry check -upgrade",
	},
}

// runCheck checks a data folder offline, read-only, while gantry is stopped (see checkHelp).
func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gantry check", flag.ContinueOnError)
	cfg := stack.DefaultConfig()
	server := serverSettings(&cfg, fs, "data-dir", "grpc-tls-dir", "kms", "store", "etcd-*")
	describe(fs, "data-dir", "data folder to check")
	describe(fs, "grpc-tls-dir", "internal TLS folder gantry runs with (default: the data folder's tls/)")
	describe(fs, "kms", "key provider gantry runs with: local (check keyring.json against the store) or aws (skip the key checks)")
	describe(fs, "store", "store gantry runs with: bolt, or etcd (no database in the folder; a backup folder's etcd.snapshot is verified)")
	noConsistency := fs.Bool("no-consistency", false, "skip the consistency check, which reads the whole database file")
	upgrade := fs.Bool("upgrade", false, "first rewrite every record still stored as JSON (earlier versions) in the current format; bolt: gantry stopped; etcd: online, in the cluster of -etcd-endpoints")
	help := func(w io.Writer) { checkHelp.print(w, fs) }
	if code, ok := parseFlags(fs, args, help, stdout, stderr, server); !ok {
		return code
	}
	if code, ok := checkServerFlags(fs, cfg, stderr); !ok {
		return code
	}
	dataDir := cfg.DataDir
	var results []stack.CheckResult
	if *upgrade {
		results = stack.UpgradeRecords(context.Background(), dataDir, stack.UpgradeOptions{Store: cfg.Secrets.Store, Etcd: cfg.Etcd})
	}
	opts := stack.CheckOptions{NoConsistency: *noConsistency, KMS: cfg.Secrets.KMS, TLSDir: cfg.InternalTLS.Dir, Store: cfg.Secrets.Store, EtcdPrefix: cfg.Etcd.Prefix}
	results = append(results, stack.CheckDataDir(context.Background(), dataDir, opts)...)
	printChecks(stdout, results)
	if stack.CheckFailed(results) {
		fmt.Fprintf(stdout, "%s: FAILED (see above; restoring is described in SECURITY.md, Backups)\n", dataDir)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok\n", dataDir)
	return 0
}

// checkServerFlags refuses arguments and a -kms or -store the data-folder tools do not know, in one
// line and exit 2, as a bad flag.
func checkServerFlags(fs *flag.FlagSet, cfg stack.Config, stderr io.Writer) (int, bool) {
	var problem string
	switch {
	case fs.NArg() > 0:
		problem = fmt.Sprintf("unexpected argument %q", fs.Arg(0))
	case cfg.Secrets.KMS != "local" && cfg.Secrets.KMS != "aws":
		problem = fmt.Sprintf("-kms %q is not local or aws", cfg.Secrets.KMS)
	case cfg.Secrets.Store != "bolt" && cfg.Secrets.Store != "etcd":
		problem = fmt.Sprintf("-store %q is not bolt or etcd", cfg.Secrets.Store)
	default:
		return 0, true
	}
	fmt.Fprintf(stderr, "%s: %s\n%s\n", fs.Name(), problem, whereTheFlagsAre(fs.Name()))
	return 2, false
}

// printChecks prints one line per check: ok, skipped or FAILED with the reason.
func printChecks(w io.Writer, results []stack.CheckResult) {
	for _, r := range results {
		switch {
		case r.Err != nil:
			fmt.Fprintf(w, "%-22s FAILED: %v\n", r.Name, r.Err)
		case r.Skipped:
			fmt.Fprintf(w, "%-22s skipped: %s\n", r.Name, r.Detail)
		default:
			fmt.Fprintf(w, "%-22s ok: %s\n", r.Name, r.Detail)
		}
	}
}
