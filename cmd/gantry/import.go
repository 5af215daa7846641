package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	awskms "github.com/aws/aws-sdk-go-v2/service/kms"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/logging"
	"github.com/gantry-dev/gantry/pkg/settings"
	"github.com/gantry-dev/gantry/services/secrets/confidant"
)

// importHelp is gantry import's -h; the settings of serve follow its own flags.
var importHelp = helpText{
	name:        "gantry import",
	description: "import a Confidant installation (gantry import confidant): every credential, service and revision",
	usage:       []string{"gantry import confidant [-dry-run] [-skip-damaged] [-report-json FILE] [settings]"},
	details: `Copies a Confidant installation into gantry's store: every credential and service with every
revision, id, name, date and mapping, read from Confidant's DynamoDB table (DYNAMODB_TABLE,
DYNAMODB_URL, AWS_DEFAULT_REGION; read-only) and decrypted with the AWS KMS that wrapped its data
keys; with DYNAMODB_TABLE_ARCHIVE, the credentials Confidant archived there too, into gantry's
archive. gantry's store and keys are the ones 'gantry serve' would open with the same settings (every
setting of gantry serve is a flag here too, listed after the import's own). Run it again at any
time: it writes only what is missing, puts back mappings an earlier run left out, and says so;
every revision gantry holds is read back and compared with Confidant's. Exit status: 0 ok, 1 a
failure (see the report: each says whether a re-run may help), 2 a usage error or bad setting.`,
	examples: []string{
		"gantry import confidant -dry-run",
		"set -a; . ./confidant.env; set +a; gantry import confidant -report-json import.json",
	},
}

const skipDamagedUsage = "import what is intact of a credential with a damaged revision before its last (an item that cannot be read, pairs that do not decrypt): that revision is recorded in gantry's history as missing (no pairs), and services mapping a credential that cannot be imported at all are imported without that mapping; each is listed under skipped, and a later run puts the mapping back once the item is repaired"

// importKMSMaxBackoff bounds one pause before a throttled KMS call is tried again (the SDK's own;
// a variable so that a test waits milliseconds).
var importKMSMaxBackoff = 20 * time.Second

// importRun is one gantry import confidant: serve's whole table (Confidant's env file sets what
// serve reads) and the import's own flags.
type importRun struct {
	cfg                 stack.Config
	table               *settings.Table
	dryRun, skipDamaged bool
	reportJSON          string
}

// parseImport reads the command line and the settings of gantry import confidant; ok is false when
// it should exit with code.
func parseImport(args []string, stdout, stderr io.Writer) (r *importRun, code int, ok bool) {
	r = &importRun{cfg: stack.DefaultConfig()}
	r.cfg.Log.Level = "warn" // the report is the output; the log only says what went wrong
	r.table = r.cfg.Settings()
	own := flag.NewFlagSet("gantry import confidant", flag.ContinueOnError)
	own.BoolVar(&r.dryRun, "dry-run", false, "read and decrypt everything, write nothing, print the report")
	own.StringVar(&r.reportJSON, "report-json", "", "also write the report as JSON to this `file`")
	own.BoolVar(&r.skipDamaged, "skip-damaged", false, skipDamagedUsage)
	fs := flag.NewFlagSet("gantry import confidant", flag.ContinueOnError)
	own.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
	r.table.AddFlags(fs)
	help := func(w io.Writer) {
		importHelp.print(w, own)
		fmt.Fprintln(w, "\nSettings (gantry serve's flags and variables):")
		r.table.PrintGroups(w)
	}
	switch {
	case len(args) == 0 || (args[0] != "confidant" && !isHelpFlag(args[0])):
		help(stderr)
		return nil, 2, false
	case isHelpFlag(args[0]):
		help(stdout)
		return nil, 0, false
	}
	if code, ok := parseFlags(fs, args[1:], help, stdout, stderr, r.table); !ok {
		return nil, code, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gantry import confidant: unexpected argument %q\n", fs.Arg(0))
		return nil, 2, false
	}
	// Only what the import uses is checked: Confidant's env file also sets what gantry serve reads
	// (SESSION_SECRET, login, ACLs), and a value serve would refuse there is no reason to stop here.
	if err := r.table.Explain(r.cfg.ValidateImport()); err != nil {
		fmt.Fprintln(stderr, "gantry import confidant: bad configuration:", err)
		return nil, 2, false
	}
	return r, 0, true
}

// runImport runs `gantry import confidant`.
func runImport(args []string, stdout, stderr io.Writer) int {
	r, code, ok := parseImport(args, stdout, stderr)
	if !ok {
		return code
	}
	cfg, table := r.cfg, r.table
	logger, _, err := logging.New(cfg.Log)
	if err != nil {
		fmt.Fprintln(stderr, "gantry import confidant:", err)
		return 2
	}
	defer func() { _ = logger.Sync() }()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	importer, closeStore, err := stack.OpenImporter(ctx, cfg, logger)
	if err != nil {
		fmt.Fprintln(stderr, "gantry import confidant:", table.Explain(err))
		if errors.As(err, new(*settings.SettingError)) {
			return 2 // a setting to change (the master key a local keyring lacks, a keyring that is not the store's)
		}
		return 1
	}
	defer closeStore()
	// Confidant's data keys were wrapped by AWS KMS (Confidant has no other provider); only Decrypt
	// is ever called on it.
	// A throttled call (the account's KMS quota, shared with production) is waited out and retried,
	// never counted against the credential (confidant.KMSRetryer).
	source, err := kms.NewAWS(ctx, kms.AWSConfig{
		Region:         cfg.Secrets.AWSRegion,
		Endpoint:       cmp.Or(cfg.Import.KMSURL, cfg.Secrets.KMSURL),
		ConnectTimeout: cfg.Secrets.KMSConnectionTimeout,
		ReadTimeout:    cfg.Secrets.KMSReadTimeout,
		MaxConns:       cfg.Import.Workers,
	}, logger.Named("confidant-kms"), func(o *awskms.Options) { o.Retryer = confidant.KMSRetryer(importKMSMaxBackoff) })
	if err != nil {
		fmt.Fprintln(stderr, "gantry import confidant:", err)
		return 1
	}
	dynamo, err := confidant.NewDynamoDB(ctx, cfg.Import, cfg.Secrets.AWSRegion)
	if err != nil {
		fmt.Fprintln(stderr, "gantry import confidant:", err)
		return 1
	}
	opts := confidant.Options{Limits: cfg.Secrets.Limits, Table: cfg.Import.Table, ArchiveTable: cfg.Import.ArchiveTable, Workers: cfg.Import.Workers,
		KMSRate: cfg.Import.KMSRate, DryRun: r.dryRun, SkipDamaged: r.skipDamaged, Logger: logger.Named("import")}
	if !cfg.Import.Quiet {
		// On a terminal one line redrawn in place; in a log or a pipe a plain line every
		// -import-progress-interval, so a long run shows it is alive and when it will end.
		opts.Progress, opts.ProgressRedraw, opts.ProgressInterval = stderr, isTerminal(stderr), cfg.Import.ProgressInterval
	}
	rep, err := confidant.Run(ctx, dynamo, source, importer, opts)
	if err != nil {
		logger.Error("import failed", zap.Error(err))
		fmt.Fprintln(stderr, "gantry import confidant:", err)
		return 1
	}
	rep.WriteText(stdout)
	if r.reportJSON != "" {
		if err := writeReportJSON(r.reportJSON, rep); err != nil {
			fmt.Fprintln(stderr, "gantry import confidant:", err)
			return 1
		}
	}
	if !rep.OK() {
		return 1
	}
	return 0
}

func writeReportJSON(path string, rep *confidant.Report) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("report-json: %w", err)
	}
	if err := rep.WriteJSON(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("report-json: %w", err)
	}
	return f.Close()
}

// isTerminal reports whether w is a terminal: the progress line is for a person watching, never for
// a log file or a pipe.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}
