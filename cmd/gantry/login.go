package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/loginlink"
	"github.com/gantry-dev/gantry/pkg/settings"
)

// loginHelp is gantry login's -h.
var loginHelp = helpText{
	name:        "gantry login",
	description: "print a one-time link that opens a web UI session as a user",
	usage:       []string{"gantry login -user EMAIL [-data-dir gantry-data] [-url http://127.0.0.1:8080] [-lifetime 5m]"},
	details: `For the default configuration (no USER_AUTH_MODULE), where a browser has no other way in. Like
gantry token it needs the keyring of the data folder, so only who may read that folder can mint a
link. -data-dir is serve's; -url, -to and -key default to what serve runs with (-url-root,
-auth-context, -user-auth-key and their variables).`,
	examples: []string{"gantry login -user alice@example.com", "gantry login -user alice@example.com -url https://gantry.example.com -lifetime 2m"},
}

// runLogin prints a one-time, short-lived link that logs a browser into the web UI as a user (see
// loginHelp).
func runLogin(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gantry login", flag.ContinueOnError)
	cfg := stack.DefaultConfig()
	server := []*settings.Table{serverSettings(&cfg, fs, "data-dir"), serverSettings(&cfg, nil, "url-root", "auth-context", "user-auth-key")}
	describe(fs, "data-dir", "data folder holding keyring.json")
	user := fs.String("user", "", "email of the user to log in (required)")
	urlRoot := fs.String("url", "", "public URL of the gateway (default: the server's -url-root, else http://127.0.0.1:8080)")
	to := fs.String("to", "", "the server's kmsauth name (default: its -auth-context)")
	key := fs.String("key", "", "the KMS key of user tokens (default: the server's -user-auth-key)")
	lifetime := fs.Duration("lifetime", loginlink.DefaultLifetime, fmt.Sprintf("how long the link may be opened (at most %s)", loginlink.MaxLifetime))
	help := func(w io.Writer) { loginHelp.print(w, fs) }
	if code, ok := parseFlags(fs, args, help, stdout, stderr, server...); !ok {
		return code
	}
	if *user == "" || !strings.Contains(*user, "@") {
		fmt.Fprintf(stderr, "gantry login: -user must be an email\n%s\n", whereTheFlagsAre(fs.Name()))
		return 2
	}
	dataDir := &cfg.DataDir
	*urlRoot = cmp.Or(*urlRoot, cfg.Secrets.Auth.SAMLURLRoot, "http://127.0.0.1:8080")
	*to = cmp.Or(*to, cfg.Secrets.Auth.AuthContext)
	*key = cmp.Or(*key, cfg.Secrets.Auth.UserAuthKey)
	keyring := filepath.Join(*dataDir, "keyring.json")
	if _, err := os.Stat(keyring); err != nil {
		// Never create a keyring here: a link made with a new one would not open on the server.
		fmt.Fprintf(stderr, "gantry login: %v (run it where the server's data folder is, or pass -data-dir)\n", err)
		return 1
	}
	ring, err := kms.OpenKeyring(keyring, zap.NewNop())
	if err != nil {
		fmt.Fprintln(stderr, "gantry login:", err)
		return 1
	}
	code, err := loginlink.Mint(context.Background(), ring, *key, *to, *user, *lifetime, time.Now())
	if err != nil {
		fmt.Fprintln(stderr, "gantry login:", err)
		return 1
	}
	fmt.Fprintf(stderr, "Open this link in your browser within %s; it works once:\n", *lifetime)
	fmt.Fprintf(stdout, "%s/v1/login?code=%s\n", strings.TrimRight(*urlRoot, "/"), code)
	return 0
}
