package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/settings"
)

// keyringHelp is gantry keyring's -h; each subcommand's -h is the same with its own flags.
var keyringHelp = helpText{
	name:        "gantry keyring",
	description: "create, list, rotate (or stage and activate) and retire key versions; rewrap data keys online",
	usage: []string{
		"gantry keyring create   [-data-dir DIR]",
		"gantry keyring list     [-data-dir DIR]",
		"gantry keyring rotate   [-data-dir DIR] [-key ALIAS_OR_ID ...] [-stage]",
		"gantry keyring activate [-data-dir DIR] [-key ALIAS_OR_ID ...] [-version N]",
		"gantry keyring rewrap   [-data-dir DIR] [-dry-run] [-batch N] [-resume TOKEN] [-secrets-addr HOST:PORT]",
		"gantry keyring retire   [-data-dir DIR] -key ALIAS_OR_ID -version N [-force] [-secrets-addr HOST:PORT]",
		"gantry keyring restore  [-data-dir DIR] -key ALIAS_OR_ID -version N",
		"gantry keyring destroy  [-data-dir DIR] -key ALIAS_OR_ID -version N [-secrets-addr HOST:PORT]",
	},
	details: `create makes the keyring of a data folder if it has none (the server also does on its first start);
it is what a deployment runs once before several replicas share the folder.
rotate adds a key version and encrypts with it from then on; with -stage the new version only
decrypts until activate: the order for replicas sharing a store (docs/operations.md, Key rotation).
A running gantry picks up a changed keyring by itself (-keyring-reload-interval) or on SIGHUP.
rewrap wraps every credential's data key again under the active master key version, online, through
the running secrets service (its gateway certificate authenticates this tool), and says done only when
a scan of the store finds every revision and the key-check value under the active version and every
running replica encrypts with it. retire marks an old version retired (it never encrypts again and
still decrypts) after the same check; restore takes a retire back; destroy deletes a retired version's
material for good, after the same check again, archived credentials included.
-data-dir, -kms-master-key and -grpc-tls-* are serve's flags, read from the same GANTRY_* variables.`,
	examples: []string{
		"gantry keyring create -data-dir /data",
		"gantry keyring rotate -data-dir gantry-data            # one replica: takes effect at once",
		"gantry keyring rotate -stage -data-dir gantry-data     # a fleet: copy to every replica, then activate",
		"gantry keyring rewrap -data-dir gantry-data",
		"gantry keyring retire -data-dir gantry-data -key alias/gantry-master -version 1",
		"gantry keyring destroy -data-dir gantry-data -key alias/gantry-master -version 1",
	},
	flagsNote: "each subcommand has its own: gantry keyring SUBCOMMAND -h",
}

// runKeyring administers the local keyring of a data folder (see keyringHelp).
func runKeyring(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && isHelpFlag(args[0]) {
		keyringHelp.print(stdout, nil)
		return 0
	}
	subcommands := map[string]func([]string, io.Writer, io.Writer) int{
		"create": runKeyringCreate, "list": runKeyringList, "rotate": runKeyringRotate,
		"activate": runKeyringActivate, "rewrap": runKeyringRewrap, "retire": runKeyringRetire,
		"restore": runKeyringRestore, "destroy": runKeyringDestroy,
	}
	if len(args) == 0 || subcommands[args[0]] == nil {
		if len(args) > 0 {
			fmt.Fprintf(stderr, "gantry keyring: unknown subcommand %q\n", args[0])
		}
		keyringHelp.print(stderr, nil)
		return 2
	}
	return subcommands[args[0]](args[1:], stdout, stderr)
}

// keyringCommand is the flag set of a keyring subcommand with serve's -data-dir, filling cfg.
type keyringCommand struct {
	fs       *flag.FlagSet
	cfg      stack.Config
	settings []*settings.Table
}

func newKeyringCommand(name, dataDirUsage string) *keyringCommand {
	k := &keyringCommand{fs: flag.NewFlagSet("gantry keyring "+name, flag.ContinueOnError), cfg: stack.DefaultConfig()}
	k.settings = []*settings.Table{serverSettings(&k.cfg, k.fs, "data-dir")}
	describe(k.fs, "data-dir", dataDirUsage)
	return k
}

// withMasterKey adds serve's -kms-master-key: retire and destroy check the master key's versions.
func (k *keyringCommand) withMasterKey() {
	k.settings = append(k.settings, serverSettings(&k.cfg, k.fs, "kms-master-key"))
	describe(k.fs, "kms-master-key", "the master key gantry runs with")
}

// withAdminConn adds the flags that reach the running secrets service.
func (k *keyringCommand) withAdminConn() *adminConnFlags {
	conn := registerAdminConnFlags(k.fs, &k.cfg)
	k.settings = append(k.settings, conn.settings...)
	return conn
}

// parse reads the command line and the settings; ok is false when the subcommand should exit with
// code (0 after -h).
func (k *keyringCommand) parse(args []string, stdout, stderr io.Writer) (code int, ok bool) {
	help := func(w io.Writer) {
		h := keyringHelp
		h.name, h.flagsNote = k.fs.Name(), ""
		h.print(w, k.fs)
	}
	return parseFlags(k.fs, args, help, stdout, stderr, k.settings...)
}

// usageError says in two lines that the arguments do not fit the subcommand, and returns 2.
func (k *keyringCommand) usageError(stderr io.Writer) int {
	fmt.Fprintf(stderr, "%s: missing, extra or out-of-range arguments (see the usage)\n%s\n", k.fs.Name(), whereTheFlagsAre(k.fs.Name()))
	return 2
}

// loadExistingKeyring loads the keyring of dataDir and never creates one: a keyring that is not there
// is a wrong -data-dir.
func loadExistingKeyring(dataDir string, stderr io.Writer) (*kms.Keyring, bool) {
	path := filepath.Join(dataDir, "keyring.json")
	if _, err := os.Stat(path); errors.Is(err, iofs.ErrNotExist) {
		fmt.Fprintf(stderr, "gantry keyring: no keyring at %s (wrong -data-dir?)\n", path)
		return nil, false
	}
	ring, err := kms.LoadKeyring(path, nil)
	if err != nil {
		fmt.Fprintln(stderr, "gantry keyring:", err)
		return nil, false
	}
	return ring, true
}

// defaultKeys are the keys rotate and activate change without -key.
var defaultKeys = multiFlag{kms.AliasMaster, kms.AliasAuth, kms.AliasUserAuth}

// keysOf is the keys a rotate or activate changes (-key, else defaultKeys) and the existing keyring of
// dataDir; ok is false, the reason said on stderr, when there is no keyring to change.
func keysOf(keys multiFlag, dataDir string, stderr io.Writer) (multiFlag, *kms.Keyring, bool) {
	if len(keys) == 0 {
		keys = defaultKeys
	}
	ring, ok := loadExistingKeyring(dataDir, stderr)
	return keys, ring, ok
}

// runKeyringRotate adds a version to each key (by default the master, auth and user-auth keys).
// Every older version is kept, so existing ciphertexts (wrapped data keys, tokens in flight) still
// decrypt. Without -stage new encryptions use the new version as soon as gantry reloads the keyring.
func runKeyringRotate(args []string, stdout, stderr io.Writer) int {
	k := newKeyringCommand("rotate", "data folder holding keyring.json")
	fs, dataDir := k.fs, &k.cfg.DataDir
	var keys multiFlag
	fs.Var(&keys, "key", "key alias or id to rotate (repeatable; default: the master, auth and user-auth keys)")
	stage := fs.Bool("stage", false, "add the version for decryption only; encrypt with it after gantry keyring activate (replicas sharing a store)")
	if code, ok := k.parse(args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return k.usageError(stderr)
	}
	keys, ring, ok := keysOf(keys, *dataDir, stderr)
	if !ok {
		return 1
	}
	add := ring.RotateKey
	if *stage {
		add = ring.StageKey
	}
	for _, key := range keys {
		version, err := add(context.Background(), key)
		if err != nil {
			fmt.Fprintln(stderr, "gantry keyring:", err)
			return 1
		}
		if *stage {
			fmt.Fprintf(stdout, "%s: version %d staged (decrypts; not used to encrypt yet)\n", key, version)
		} else {
			fmt.Fprintf(stdout, "%s: now at version %d\n", key, version)
		}
	}
	if *stage {
		fmt.Fprintln(stdout, "next: copy keyring.json to every replica, wait for them to reload it (-keyring-reload-interval, or SIGHUP), then gantry keyring activate")
	} else {
		fmt.Fprintln(stdout, "gantry encrypts with the new versions once it reloads the keyring (-keyring-reload-interval, or SIGHUP); older versions stay for decryption")
	}
	return 0
}

// runKeyringActivate makes a version (default: the latest) the one each key encrypts with.
func runKeyringActivate(args []string, stdout, stderr io.Writer) int {
	k := newKeyringCommand("activate", "data folder holding keyring.json")
	fs, dataDir := k.fs, &k.cfg.DataDir
	var keys multiFlag
	fs.Var(&keys, "key", "key alias or id to activate a version of (repeatable; default: the master, auth and user-auth keys)")
	version := fs.Int("version", 0, "version to encrypt with (default: the latest)")
	if code, ok := k.parse(args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 || *version < 0 {
		return k.usageError(stderr)
	}
	keys, ring, ok := keysOf(keys, *dataDir, stderr)
	if !ok {
		return 1
	}
	for _, key := range keys {
		if err := ring.ActivateKey(context.Background(), key, *version); err != nil {
			fmt.Fprintln(stderr, "gantry keyring:", err)
			return 1
		}
		active, _ := ring.ActiveKeyVersion(context.Background(), key)
		fmt.Fprintf(stdout, "%s: encrypts with version %d\n", key, active.Version)
	}
	fmt.Fprintln(stdout, "next: copy keyring.json to every replica; once they reloaded it, gantry keyring rewrap")
	return 0
}

// runKeyringList prints every key with its aliases, versions and active version.
func runKeyringList(args []string, stdout, stderr io.Writer) int {
	k := newKeyringCommand("list", "data folder holding keyring.json")
	fs, dataDir := k.fs, &k.cfg.DataDir
	if code, ok := k.parse(args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return k.usageError(stderr)
	}
	ring, ok := loadExistingKeyring(*dataDir, stderr)
	if !ok {
		return 1
	}
	for _, k := range ring.Keys() {
		versions := make([]string, len(k.Versions))
		for i, v := range k.Versions {
			versions[i] = strconv.Itoa(v)
			if v == k.Active {
				versions[i] += " (active)"
			} else if slices.Contains(k.Retired, v) {
				versions[i] += " (retired)"
			} else if v > k.Active {
				versions[i] += " (staged)"
			}
		}
		name := k.KeyID
		if len(k.Aliases) > 0 {
			name = strings.Join(k.Aliases, ", ") + "  " + k.KeyID
		}
		fmt.Fprintf(stdout, "%s\n  versions: %s\n", name, strings.Join(versions, ", "))
	}
	return 0
}

// runKeyringCreate creates the keyring of a data folder, the one explicit way besides the server's
// first start. An existing keyring is kept as it is (exit 0), so a deployment's init step can run on
// every start.
func runKeyringCreate(args []string, stdout, stderr io.Writer) int {
	k := newKeyringCommand("create", "data folder to hold keyring.json (created 0700 if missing)")
	fs, dataDir := k.fs, &k.cfg.DataDir
	if code, ok := k.parse(args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return k.usageError(stderr)
	}
	path := filepath.Join(*dataDir, "keyring.json")
	if _, err := os.Stat(path); err == nil {
		fmt.Fprintf(stdout, "%s: a keyring is already there; kept as it is\n", path)
		return 0
	}
	if err := os.MkdirAll(*dataDir, 0o700); err != nil {
		fmt.Fprintln(stderr, "gantry keyring:", err)
		return 1
	}
	// OpenKeyring creates the file with an exclusive link: a concurrent creator's keyring wins, whole.
	if _, err := kms.OpenKeyring(path, nil); err != nil {
		fmt.Fprintln(stderr, "gantry keyring:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: keyring ready\n", path)
	return 0
}

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return fmt.Sprint(*m) }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// sortedCounts lists a count map as "key: n" lines in key order.
func sortedCounts(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = fmt.Sprintf("%s: %d", k, m[k])
	}
	return out
}
