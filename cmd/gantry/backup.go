package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/services/secrets/store/etcdstore"
)

// runBackup copies a data folder into a new folder and checks the copy:
//
//	gantry backup [-data-dir gantry-data] -out NEWDIR [-kms local|aws] [-secrets-addr ADDR] ...
//
// While gantry is stopped the database file is copied directly; while it runs (the file is locked)
// the database is streamed from the running secrets service at -secrets-addr, which answers only the
// gateway's certificate of the internal CA (the data folder's tls/gateway.crt, or -grpc-tls-*-file).
// With -store etcd the snapshot comes from a member that has a leader and answers a linearizable read
// (every write the cluster acknowledged is in it); when none does, the backup is refused, unless
// -allow-stale, whose copy is reported unverified and possibly stale, never ok.
// Exit 0 when the copy is made and passes gantry check, 1 otherwise (nothing the user had is removed;
// a copy that fails its check is left for inspection), 2 on a usage error.
func runBackup(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gantry backup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", envOr("GANTRY_DATA_DIR", "gantry-data"), "data folder to back up")
	out := fs.String("out", "", "new folder to write the backup to (must not exist, or be empty)")
	provider := fs.String("kms", envOr("GANTRY_KMS", "local"), "key provider gantry runs with: local (check the copied keyring against the copied store) or aws")
	conn := registerAdminConnFlags(fs, dataDir)
	timeout := fs.Duration("timeout", 10*time.Minute, "bound of an online backup's stream")
	chatAddr := fs.String("chat-addr", envOr("GANTRY_CHAT_LISTEN", "127.0.0.1:9091"), "gRPC address of the running chat service (its -chat-listen), which streams the chat queue file with its dead letters during an online backup")
	store := fs.String("store", envOr("GANTRY_STORE", "bolt"), "store gantry runs with: bolt (the data folder's secrets.db) or etcd (a snapshot of the etcd cluster)")
	etcd := etcdstore.DefaultOptions()
	endpoints := fs.String("etcd-endpoints", envOr("GANTRY_ETCD_ENDPOINTS", strings.Join(etcd.Endpoints, ",")), "with -store=etcd: comma list of etcd client URLs")
	fs.StringVar(&etcd.Prefix, "etcd-prefix", envOr("GANTRY_ETCD_PREFIX", etcd.Prefix), "with -store=etcd: gantry's key prefix (checked in the snapshot)")
	fs.StringVar(&etcd.CAFile, "etcd-ca-file", envOr("GANTRY_ETCD_CA_FILE", ""), "with -store=etcd: PEM CA of the members' certificates")
	fs.StringVar(&etcd.CertFile, "etcd-cert-file", envOr("GANTRY_ETCD_CERT_FILE", ""), "with -store=etcd: client certificate")
	fs.StringVar(&etcd.KeyFile, "etcd-key-file", envOr("GANTRY_ETCD_KEY_FILE", ""), "with -store=etcd: client key")
	allowStale := fs.Bool("allow-stale", false, "with -store=etcd: when no member has a leader and is current, take the snapshot from any member anyway; the copy may lack acknowledged writes and is reported unverified, never ok")
	if err := fs.Parse(args); err != nil {
		return exitCodeOfParse(err)
	}
	if fs.NArg() > 0 || *out == "" || (*provider != "local" && *provider != "aws") || *timeout <= 0 || (*store != "bolt" && *store != "etcd") || !conn.valid() {
		fmt.Fprintln(stderr, "usage: gantry backup [-data-dir DIR] -out NEWDIR [-kms local|aws] [-secrets-addr HOST:PORT] [-grpc-tls-dir DIR | -grpc-tls-ca-file F -grpc-tls-cert-file F -grpc-tls-key-file F] [-timeout D] [-store etcd -etcd-endpoints URLS [-allow-stale] ...]")
		return 2
	}
	online := &stack.OnlineBackup{Addr: conn.target(), ChatAddr: dialAddr(*chatAddr), Timeout: *timeout, Credentials: conn.credentials}
	var written []string
	var err error
	stale := false
	if *store == "etcd" {
		etcd.Endpoints = strings.Split(*endpoints, ",")
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		var src etcdstore.SnapshotSource
		written, src, err = stack.BackupEtcd(ctx, *dataDir, *out, etcd, *allowStale)
		cancel()
		switch {
		case err != nil: // the error names every member passed over
		case src.Verified:
			fmt.Fprintf(stdout, "etcd member %s (id %x) follows leader %x and answered a linearizable read at revision %d: the snapshot holds every write acknowledged before it\n",
				src.Endpoint, src.MemberID, src.Leader, src.Revision)
		default:
			stale = true
			for _, reason := range src.PassedOver {
				fmt.Fprintf(stdout, "passed over etcd member %s\n", reason)
			}
			fmt.Fprintf(stdout, "WARNING: the snapshot comes from etcd member %s, which was not verified (no member had a leader and answered a linearizable read): it is possibly STALE and may lack writes the cluster acknowledged\n", src.Endpoint)
		}
	} else {
		written, err = stack.BackupDataDir(*dataDir, *out, stack.BackupOptions{Online: online})
	}
	for _, f := range written {
		fmt.Fprintf(stdout, "copied %s\n", f)
	}
	if err != nil {
		fmt.Fprintln(stderr, "gantry backup:", err)
		return 1
	}
	fmt.Fprintf(stdout, "checking the copy in %s:\n", *out)
	results := stack.CheckDataDir(context.Background(), *out, stack.CheckOptions{KMS: *provider, Store: *store, EtcdPrefix: etcd.Prefix})
	printChecks(stdout, results)
	if stack.CheckFailed(results) {
		fmt.Fprintf(stderr, "gantry backup: the copy in %s does not pass gantry check (see above): do not rely on it. It is left there for inspection; the data folder %s was not changed\n", *out, *dataDir)
		return 1
	}
	if stale {
		fmt.Fprintf(stdout, "backup of %s in %s: copied, but UNVERIFIED and possibly stale (-allow-stale): take another backup once the etcd cluster has its quorum\n", *dataDir, *out)
		return 0
	}
	fmt.Fprintf(stdout, "backup of %s in %s: ok\n", *dataDir, *out)
	return 0
}

// dialAddr turns a listen address into one to dial: a wildcard or empty host is this machine.
func dialAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
