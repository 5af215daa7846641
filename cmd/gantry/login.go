package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/loginlink"
)

// runLogin prints a one-time, short-lived link that logs a browser into the web UI as a user, for the
// default configuration (no USER_AUTH_MODULE), where a browser has no other way in. Like `gantry
// token` it needs the keyring of the data folder, so only who may read that folder can mint one:
//
//	gantry login --user alice@example.com
func runLogin(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gantry login", flag.ContinueOnError)
	fs.SetOutput(stderr)
	user := fs.String("user", "", "email of the user to log in (required)")
	dataDir := fs.String("data-dir", envOr("GANTRY_DATA_DIR", "gantry-data"), "data folder holding keyring.json")
	urlRoot := fs.String("url", envOr("GANTRY_URL_ROOT", "http://127.0.0.1:8080"), "public URL of the gateway")
	to := fs.String("to", envOr("AUTH_CONTEXT", "gantry"), "the server's kmsauth name (its AUTH_CONTEXT)")
	key := fs.String("key", envOr("USER_AUTH_KEY", kms.AliasUserAuth), "the server's USER_AUTH_KEY")
	lifetime := fs.Duration("lifetime", loginlink.DefaultLifetime, fmt.Sprintf("how long the link may be opened (at most %s)", loginlink.MaxLifetime))
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gantry login --user EMAIL [--data-dir gantry-data] [--url http://127.0.0.1:8080] [--lifetime 5m]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *user == "" || !strings.Contains(*user, "@") {
		fmt.Fprintln(stderr, "gantry login: --user must be an email")
		fs.Usage()
		return 2
	}
	keyring := filepath.Join(*dataDir, "keyring.json")
	if _, err := os.Stat(keyring); err != nil {
		// Never create a keyring here: a link made with a new one would not open on the server.
		fmt.Fprintf(stderr, "gantry login: %v (run it where the server's data folder is, or pass --data-dir)\n", err)
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
