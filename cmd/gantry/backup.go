package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/settings"
)

// backupHelp is gantry backup's -h.
var backupHelp = helpText{
	name:        "gantry backup",
	description: "copy a data folder (gantry running or stopped) and check the copy",
	usage: []string{"gantry backup [-data-dir DIR] -out NEWDIR [-kms local|aws] [-secrets-addr HOST:PORT] [-grpc-tls-dir DIR | -grpc-tls-ca-file F -grpc-tls-cert-file F -grpc-tls-key-file F] [-timeout D]",
		"gantry backup -store etcd [-etcd-... flags] -out NEWDIR [-allow-stale]"},
	details: `While gantry is stopped the database file is copied directly; while it runs (the file is locked)
the database is streamed from the running secrets service at -secrets-addr, which answers only the
gateway's certificate of the internal CA (the data folder's tls/gateway.crt, or -grpc-tls-*-file).
With -store etcd the snapshot comes from a member that has a leader and answers a linearizable read
(every write the cluster acknowledged is in it); when none does, the backup is refused, unless
-allow-stale, whose copy is reported unverified and possibly stale, never ok. The settings are
serve's flags and GANTRY_* variables, every -etcd-* one included.
Exit 0 when the copy is made and passes gantry check, 1 otherwise (nothing the user had is removed;
a copy that fails its check is left for inspection), 2 on a usage error.`,
	examples: []string{
		"gantry backup -data-dir /var/lib/gantry -out /backups/gantry-$(date +%F)",
		"GANTRY_STORE=etcd GANTRY_ETCD_ENDPOINTS=https://etcd-0:2379 gantry backup -out /backups/etcd-$(date +%F)",
	},
}

// backupRun is one gantry backup: serve's settings of the data folder and its store, and the
// backup's own flags.
type backupRun struct {
	cfg        stack.Config
	conn       *adminConnFlags
	out        string
	timeout    time.Duration
	chatAddr   string
	allowStale bool
}

// parseBackup reads the command line of gantry backup; ok is false when it should exit with code.
func parseBackup(args []string, stdout, stderr io.Writer) (b *backupRun, code int, ok bool) {
	b = &backupRun{cfg: stack.DefaultConfig()}
	fs := flag.NewFlagSet("gantry backup", flag.ContinueOnError)
	server := serverSettings(&b.cfg, fs, "data-dir", "kms", "store", "etcd-*")
	describe(fs, "data-dir", "data folder to back up")
	describe(fs, "kms", "key provider gantry runs with: local (check the copied keyring against the copied store) or aws")
	describe(fs, "store", "store gantry runs with: bolt (the data folder's secrets.db) or etcd (a snapshot of the etcd cluster)")
	chatListen := serverSettings(&b.cfg, nil, "chat-listen")
	b.conn = registerAdminConnFlags(fs, &b.cfg)
	fs.StringVar(&b.out, "out", "", "new folder to write the backup to (must not exist, or be empty)")
	fs.DurationVar(&b.timeout, "timeout", 10*time.Minute, "bound of an online backup's stream")
	fs.StringVar(&b.chatAddr, "chat-addr", "", "gRPC address of the running chat service, which streams the chat queue file with its dead letters during an online backup (default: its -chat-listen, from GANTRY_CHAT_LISTEN, else 127.0.0.1:9091)")
	fs.BoolVar(&b.allowStale, "allow-stale", false, "with -store=etcd: when no member has a leader and is current, take the snapshot from any member anyway; the copy may lack acknowledged writes and is reported unverified, never ok")
	help := func(w io.Writer) { backupHelp.print(w, fs) }
	if code, ok := parseFlags(fs, args, help, stdout, stderr, append([]*settings.Table{server, chatListen}, b.conn.settings...)...); !ok {
		return nil, code, false
	}
	if code, ok := checkServerFlags(fs, b.cfg, stderr); !ok {
		return nil, code, false
	}
	if b.out == "" || b.timeout <= 0 || !b.conn.valid() {
		fmt.Fprintf(stderr, "gantry backup: -out is required, -timeout positive, and -grpc-tls-ca-file, -grpc-tls-cert-file and -grpc-tls-key-file all or none\n%s\n", whereTheFlagsAre(fs.Name()))
		return nil, 2, false
	}
	return b, 0, true
}

// runBackup copies a data folder into a new folder and checks the copy (see backupHelp).
func runBackup(args []string, stdout, stderr io.Writer) int {
	b, code, ok := parseBackup(args, stdout, stderr)
	if !ok {
		return code
	}
	dataDir := b.cfg.DataDir
	written, stale, err := b.copy(stdout)
	for _, f := range written {
		fmt.Fprintf(stdout, "copied %s\n", f)
	}
	if err != nil {
		fmt.Fprintln(stderr, "gantry backup:", err)
		return 1
	}
	fmt.Fprintf(stdout, "checking the copy in %s:\n", b.out)
	results := stack.CheckDataDir(context.Background(), b.out, stack.CheckOptions{KMS: b.cfg.Secrets.KMS, Store: b.cfg.Secrets.Store, EtcdPrefix: b.cfg.Etcd.Prefix})
	printChecks(stdout, results)
	if stack.CheckFailed(results) {
		fmt.Fprintf(stderr, "gantry backup: the copy in %s does not pass gantry check (see above): do not rely on it. It is left there for inspection; the data folder %s was not changed\n", b.out, dataDir)
		return 1
	}
	if stale {
		fmt.Fprintf(stdout, "backup of %s in %s: copied, but UNVERIFIED and possibly stale (-allow-stale): take another backup once the etcd cluster has its quorum\n", dataDir, b.out)
		return 0
	}
	fmt.Fprintf(stdout, "backup of %s in %s: ok\n", dataDir, b.out)
	return 0
}

// copy writes the backup: an etcd snapshot (saying which member it came from, and whether it was
// verified), or the data folder, offline or streamed from the running services.
func (b *backupRun) copy(stdout io.Writer) (written []string, stale bool, err error) {
	if b.cfg.Secrets.Store != "etcd" {
		online := &stack.OnlineBackup{Addr: b.conn.target(), ChatAddr: dialAddr(cmp.Or(b.chatAddr, b.cfg.Chat.Listen)), Timeout: b.timeout, Credentials: b.conn.credentials}
		written, err = stack.BackupDataDir(b.cfg.DataDir, b.out, stack.BackupOptions{Online: online})
		return written, false, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	written, src, err := stack.BackupEtcd(ctx, b.cfg.DataDir, b.out, b.cfg.Etcd, b.allowStale)
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
	return written, stale, err
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
