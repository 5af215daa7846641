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

	"github.com/gantry-dev/gantry/pkg/kms"
)

// keyringUsage is the usage of gantry keyring.
const keyringUsage = `usage: gantry keyring create [--data-dir DIR]
       gantry keyring rotate [--data-dir DIR] [--key ALIAS_OR_ID ...]

create makes the keyring of a data folder if it has none (the server also does on its first start);
it is what a deployment runs once before several replicas share the folder. rotate adds a key version.

examples:
  gantry keyring create --data-dir /data
  gantry keyring rotate --data-dir gantry-data   # then restart gantry`

// runKeyring administers the local keyring of a data folder:
//
//	gantry keyring create [--data-dir gantry-data]
//	gantry keyring rotate [--data-dir gantry-data] [--key alias/gantry-master ...]
//
// rotate adds a new version to each key (by default the master, auth and user-auth keys). New
// encryptions use the new version once gantry restarts; every older version is kept, so existing
// ciphertexts (wrapped data keys, tokens in flight) still decrypt.
func runKeyring(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && isHelpFlag(args[0]) {
		fmt.Fprintln(stdout, keyringUsage)
		return 0
	}
	if len(args) > 0 && args[0] == "create" {
		return runKeyringCreate(args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "rotate" {
		fmt.Fprintln(stderr, keyringUsage)
		return 2
	}
	fs := flag.NewFlagSet("gantry keyring rotate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", envOr("GANTRY_DATA_DIR", "gantry-data"), "data folder holding keyring.json")
	var keys multiFlag
	fs.Var(&keys, "key", "key alias or id to rotate (repeatable; default: the master, auth and user-auth keys)")
	if err := fs.Parse(args[1:]); err != nil {
		return exitCodeOfParse(err)
	}
	if len(keys) == 0 {
		keys = multiFlag{kms.AliasMaster, kms.AliasAuth, kms.AliasUserAuth}
	}
	path := filepath.Join(*dataDir, "keyring.json")
	// Never create a keyring here: a rotation of a keyring that is not there is a wrong --data-dir.
	if _, err := os.Stat(path); errors.Is(err, iofs.ErrNotExist) {
		fmt.Fprintf(stderr, "gantry keyring: no keyring at %s (wrong --data-dir?)\n", path)
		return 1
	}
	ring, err := kms.LoadKeyring(path, nil)
	if err != nil {
		fmt.Fprintln(stderr, "gantry keyring:", err)
		return 1
	}
	for _, key := range keys {
		version, err := ring.RotateKey(context.Background(), key)
		if err != nil {
			fmt.Fprintln(stderr, "gantry keyring:", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: now at version %d\n", key, version)
	}
	fmt.Fprintln(stdout, "restart gantry to encrypt with the new versions; older versions stay for decryption")
	return 0
}

// runKeyringCreate creates the keyring of a data folder, the one explicit way besides the server's
// first start. An existing keyring is kept as it is (exit 0), so a deployment's init step can run on
// every start.
func runKeyringCreate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gantry keyring create", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", envOr("GANTRY_DATA_DIR", "gantry-data"), "data folder to hold keyring.json (created 0700 if missing)")
	if err := fs.Parse(args); err != nil {
		return exitCodeOfParse(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(stderr, keyringUsage)
		return 2
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
