package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"path/filepath"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kmsauth"
	"github.com/gantry-dev/gantry/pkg/settings"
)

// tokenFlags say who a kmsauth token authenticates and how to mint it with the local keyring of a
// data folder. gantry token and the client commands (creds, services, env, certs) register the same
// flags, so a token minted by either is the same token; each registers its own -from.
type tokenFlags struct {
	from     string
	to       string
	userType string
	lifetime time.Duration
	key      string
	version  int
	// server holds serve's -data-dir (a flag here too) and the token settings the server runs with
	// (-auth-context, -auth-key, -user-auth-key), read from its variables: the defaults of -to and -key.
	server   stack.Config
	settings []*settings.Table
}

// addTokenFlags registers the token flags on fs; defaultUserType differs between gantry token (a
// service) and the client commands (the local user). Its tables are loaded by parseFlags.
func addTokenFlags(fs *flag.FlagSet, defaultUserType string) *tokenFlags {
	f := &tokenFlags{server: stack.DefaultConfig()}
	fs.StringVar(&f.to, "to", "", "the server's kmsauth name (default: its -auth-context, from GANTRY_AUTH_CONTEXT or AUTH_CONTEXT, else gantry)")
	fs.StringVar(&f.userType, "user-type", defaultUserType, "service or user")
	fs.DurationVar(&f.lifetime, "lifetime", 10*time.Minute, "validity of the token (at most the server's AUTH_TOKEN_MAX_LIFETIME)")
	fs.StringVar(&f.key, "key", "", "KMS key to encrypt with (default: the server's -auth-key for services, -user-auth-key for users)")
	fs.IntVar(&f.version, "token-version", 2, "kmsauth token version (1 or 2)")
	f.settings = []*settings.Table{
		serverSettings(&f.server, fs, "data-dir"),
		serverSettings(&f.server, nil, "auth-context", "auth-key", "user-auth-key"),
	}
	describe(fs, "data-dir", "data folder holding the server's keyring.json")
	return f
}

// audience is -to, else the server's -auth-context.
func (f *tokenFlags) audience() string {
	if f.to != "" {
		return f.to
	}
	return f.server.Secrets.Auth.AuthContext
}

// username is the kmsauth username the token is minted for; version 1 knows only services. A bad
// -from or -user-type is a usage error.
func (f *tokenFlags) username() (kmsauth.Username, error) {
	if f.from == "" {
		return kmsauth.Username{}, errors.New("-from is required (a user or service name)")
	}
	if f.userType != "service" && f.userType != "user" {
		return kmsauth.Username{}, fmt.Errorf("-user-type %q is not service or user", f.userType)
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

// errNoKeyring is returned by mint when the data folder has no keyring: the wrong -data-dir, or a
// server that never ran there. Minting never creates a keyring, since the server would not know its
// keys and would refuse the token.
var errNoKeyring = errors.New("no keyring")

// mint mints a token for u with the keyring of the data folder.
func (f *tokenFlags) mint(ctx context.Context, u kmsauth.Username) (string, error) {
	path := filepath.Join(f.server.DataDir, "keyring.json")
	ring, err := kms.LoadKeyring(path, nil)
	if errors.Is(err, iofs.ErrNotExist) {
		abs, absErr := filepath.Abs(path)
		if absErr != nil {
			abs = path
		}
		return "", fmt.Errorf("%w at %s: pass the server's data folder with -data-dir (or GANTRY_DATA_DIR); the server creates the keyring on its first start",
			errNoKeyring, abs)
	}
	if err != nil {
		return "", err
	}
	key := f.key
	if key == "" {
		key = f.server.Secrets.Auth.AuthKey
		if u.UserType == "user" {
			key = f.server.Secrets.Auth.UserAuthKey
		}
	}
	return kmsauth.Generate(ctx, ring, key, u, f.audience(), f.lifetime, time.Now())
}

// tokenHelp is gantry token's -h.
var tokenHelp = helpText{
	name:        "gantry token",
	description: "mint a kmsauth token with the keyring of a data folder (for curl -u)",
	usage:       []string{"gantry token -from NAME [-user-type service|user] [-lifetime 10m] [-data-dir DIR] [-basic]"},
	details:     "Mints a kmsauth token with the keyring of the server's data folder (never creates one).",
	examples: []string{
		`curl -u "2/user/alice:$(gantry token -from alice -user-type user)" localhost:8080/v1/credentials`,
		`curl -u "$(gantry token -from orders -basic)" localhost:8080/v1/services/orders`,
	},
}

// runToken mints a kmsauth token with the local keyring of a data folder, so a user of the default
// local stack can authenticate with nothing but curl (see tokenHelp).
func runToken(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gantry token", flag.ContinueOnError)
	tf := addTokenFlags(fs, "service")
	fs.StringVar(&tf.from, "from", "", "who the token authenticates: a service name or a user name")
	basic := fs.Bool("basic", false, "print <username>:<token>, ready for curl -u")
	help := func(w io.Writer) { tokenHelp.print(w, fs) }
	if code, ok := parseFlags(fs, args, help, stdout, stderr, tf.settings...); !ok {
		return code
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
