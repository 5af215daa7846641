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

// runKeyring administers the local keyring of a data folder:
//
//	gantry keyring rotate [--data-dir gantry-data] [--key alias/gantry-master ...]
//
// rotate adds a new version to each key (by default the master, auth and user-auth keys). New
// encryptions use the new version once gantry restarts; every older version is kept, so existing
// ciphertexts (wrapped data keys, tokens in flight) still decrypt.
func runKeyring(args []string, stdout, stderr io.Writer) int {
	const usage = "usage: gantry keyring rotate [--data-dir DIR] [--key ALIAS_OR_ID ...]\n\nexample:\n  gantry keyring rotate --data-dir gantry-data   # then restart gantry"
	if len(args) == 1 && isHelpFlag(args[0]) {
		fmt.Fprintln(stdout, usage)
		return 0
	}
	if len(args) == 0 || args[0] != "rotate" {
		fmt.Fprintln(stderr, usage)
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

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return fmt.Sprint(*m) }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
