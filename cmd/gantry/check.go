package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/services/secrets/store/etcdstore"
)

// runCheck checks a data folder offline, read-only, while gantry is stopped:
//
//	gantry check [-data-dir gantry-data] [-no-consistency] [-kms local|aws] [-grpc-tls-dir DIR] [-upgrade]
//
// With -upgrade it first rewrites every stored record still in the JSON format of earlier versions
// in the current one (bbolt: the stopped folder's database; -store etcd: online, in the cluster the
// -etcd-... flags name), then checks as without it.
//
// One line per check; exit 0 when every check passes, 1 when one fails, 2 on a usage error.
func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gantry check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", envOr("GANTRY_DATA_DIR", "gantry-data"), "data folder to check")
	noConsistency := fs.Bool("no-consistency", false, "skip the consistency check, which reads the whole database file")
	tlsDir := fs.String("grpc-tls-dir", envOr("GANTRY_GRPC_TLS_DIR", ""), "internal TLS folder gantry runs with (default: the data folder's tls/)")
	provider := fs.String("kms", envOr("GANTRY_KMS", "local"), "key provider gantry runs with: local (check keyring.json against the store) or aws (skip the key checks)")
	store := fs.String("store", envOr("GANTRY_STORE", "bolt"), "store gantry runs with: bolt, or etcd (no database in the folder; a backup folder's etcd.snapshot is verified)")
	prefix := fs.String("etcd-prefix", envOr("GANTRY_ETCD_PREFIX", ""), "with -store=etcd: gantry's key prefix, looked for in etcd.snapshot (default /gantry/)")
	upgrade := fs.Bool("upgrade", false, "first rewrite every record still stored as JSON (earlier versions) in the current format; bbolt: gantry stopped; etcd: online, in the cluster of -etcd-endpoints")
	etcd := etcdstore.DefaultOptions()
	endpoints := fs.String("etcd-endpoints", envOr("GANTRY_ETCD_ENDPOINTS", strings.Join(etcd.Endpoints, ",")), "with -store=etcd -upgrade: comma list of etcd client URLs")
	fs.StringVar(&etcd.CAFile, "etcd-ca-file", envOr("GANTRY_ETCD_CA_FILE", ""), "with -store=etcd -upgrade: PEM CA of the members' certificates")
	fs.StringVar(&etcd.CertFile, "etcd-cert-file", envOr("GANTRY_ETCD_CERT_FILE", ""), "with -store=etcd -upgrade: client certificate")
	fs.StringVar(&etcd.KeyFile, "etcd-key-file", envOr("GANTRY_ETCD_KEY_FILE", ""), "with -store=etcd -upgrade: client key")
	if err := fs.Parse(args); err != nil {
		return exitCodeOfParse(err)
	}
	if fs.NArg() > 0 || (*provider != "local" && *provider != "aws") || (*store != "bolt" && *store != "etcd") {
		fmt.Fprintln(stderr, "usage: gantry check [-data-dir DIR] [-no-consistency] [-kms local|aws] [-grpc-tls-dir DIR] [-store bolt|etcd] [-etcd-prefix P] [-upgrade [-etcd-endpoints URLS ...]]")
		return 2
	}
	var results []stack.CheckResult
	if *upgrade {
		etcd.Endpoints = strings.Split(*endpoints, ",")
		if *prefix != "" {
			etcd.Prefix = *prefix
		}
		results = stack.UpgradeRecords(context.Background(), *dataDir, stack.UpgradeOptions{Store: *store, Etcd: etcd})
	}
	results = append(results, stack.CheckDataDir(context.Background(), *dataDir, stack.CheckOptions{NoConsistency: *noConsistency, KMS: *provider, TLSDir: *tlsDir, Store: *store, EtcdPrefix: *prefix})...)
	printChecks(stdout, results)
	if stack.CheckFailed(results) {
		fmt.Fprintf(stdout, "%s: FAILED (see above; restoring is described in SECURITY.md, Backups)\n", *dataDir)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok\n", *dataDir)
	return 0
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
