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
	"time"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kmsauth"
)

func envOr(name, fallback string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return fallback
}

// tokenFlags say who a kmsauth token authenticates and how to mint it with the local keyring of a
// data folder. gantry token and the client commands (creds, services, env, certs) register the same
// flags, so a token minted by either is the same token.
type tokenFlags struct {
	from     string
	to       string
	userType string
	lifetime time.Duration
	dataDir  string
	key      string
	version  int
}

// addTokenFlags registers the token flags on fs. defaultFrom and defaultUserType differ between gantry
// token (a service by default) and the client commands (the local user by default).
func addTokenFlags(fs *flag.FlagSet, defaultFrom, defaultUserType string) *tokenFlags {
	f := &tokenFlags{}
	fs.StringVar(&f.from, "from", defaultFrom, "who the token authenticates: a service name or a user name")
	fs.StringVar(&f.to, "to", envOr("AUTH_CONTEXT", "gantry"), "the server's kmsauth name (its AUTH_CONTEXT)")
	fs.StringVar(&f.userType, "user-type", defaultUserType, "service or user")
	fs.DurationVar(&f.lifetime, "lifetime", 10*time.Minute, "validity of the token (at most the server's AUTH_TOKEN_MAX_LIFETIME)")
	fs.StringVar(&f.dataDir, "data-dir", envOr("GANTRY_DATA_DIR", "gantry-data"), "data folder holding the server's keyring.json")
	fs.StringVar(&f.key, "key", "", "KMS key to encrypt with (default AUTH_KEY for services, USER_AUTH_KEY for users)")
	fs.IntVar(&f.version, "token-version", 2, "kmsauth token version (1 or 2)")
	return f
}

// username is the kmsauth username the token is minted for; version 1 knows only services. A bad
// --from or --user-type is a usage error.
func (f *tokenFlags) username() (kmsauth.Username, error) {
	if f.from == "" {
		return kmsauth.Username{}, errors.New("--from is required (a user or service name)")
	}
	if f.userType != "service" && f.userType != "user" {
		return kmsauth.Username{}, fmt.Errorf("--user-type %q is not service or user", f.userType)
	}
	u := kmsauth.Username{Version: f.version, UserType: f.userType, From: f.from}
	if f.version < 2 {
		u = kmsauth.Username{Version: 1, UserType: "service", From: f.from}
	}
	if _, err := kmsauth.ParseUsername(u.String()); err != nil {
		return kmsauth.Username{}, err
	}
	return u, nil
}

// errNoKeyring is returned by mint when the data folder has no keyring: the wrong --data-dir, or a
// server that never ran there. Minting never creates a keyring, since the server would not know its
// keys and would refuse the token.
var errNoKeyring = errors.New("no keyring")

// mint mints a token for u with the keyring of the data folder.
func (f *tokenFlags) mint(ctx context.Context, u kmsauth.Username) (string, error) {
	path := filepath.Join(f.dataDir, "keyring.json")
	ring, err := kms.LoadKeyring(path, nil)
	if errors.Is(err, iofs.ErrNotExist) {
		abs, absErr := filepath.Abs(path)
		if absErr != nil {
			abs = path
		}
		return "", fmt.Errorf("%w at %s: pass the server's data folder with --data-dir (or GANTRY_DATA_DIR); the server creates the keyring on its first start",
			errNoKeyring, abs)
	}
	if err != nil {
		return "", err
	}
	key := f.key
	if key == "" {
		key = envOr("AUTH_KEY", kms.AliasAuth)
		if u.UserType == "user" {
			key = envOr("USER_AUTH_KEY", kms.AliasUserAuth)
		}
	}
	return kmsauth.Generate(ctx, ring, key, u, f.to, f.lifetime, time.Now())
}

// runToken mints a kmsauth token with the local keyring of a data folder, so a user of the default
// local stack can authenticate with nothing but curl:
//
//	curl -u "2/user/alice:$(gantry token --from alice --user-type user)" localhost:8080/v1/credentials
func runToken(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gantry token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tf := addTokenFlags(fs, "", "service")
	basic := fs.Bool("basic", false, "print <username>:<token>, ready for curl -u")
	fs.Usage = func() {
		fmt.Fprintln(stderr, `usage: gantry token --from NAME [--user-type service|user] [--lifetime 10m] [--data-dir DIR] [--basic]

Mints a kmsauth token with the keyring of the server's data folder (never creates one).

examples:
  curl -u "2/user/alice:$(gantry token --from alice --user-type user)" localhost:8080/v1/credentials
  curl -u "$(gantry token --from orders --basic)" localhost:8080/v1/services/orders

flags:`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return exitCodeOfParse(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gantry token: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	u, err := tf.username()
	if err != nil {
		fmt.Fprintln(stderr, "gantry token:", err)
		return 2
	}
	token, err := tf.mint(context.Background(), u)
	if err != nil {
		fmt.Fprintln(stderr, "gantry token:", err)
		return 1
	}
	if *basic {
		fmt.Fprintf(stdout, "%s:%s\n", u, token)
	} else {
		fmt.Fprintln(stdout, token)
	}
	return 0
}

// exitCodeOfParse is the exit code of a flag parse error: 0 for -h (the user asked for help and got
// it), 2 for anything else (the flag package has already printed the problem and the usage).
func exitCodeOfParse(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}
