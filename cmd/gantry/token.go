package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kmsauth"
)

func envOr(name, fallback string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return fallback
}

// runToken mints a kmsauth token with the local keyring of a data folder, so a user of the default
// local stack can authenticate with nothing but curl:
//
//	curl -u "2/user/alice:$(gantry token --from alice --user-type user)" localhost:8080/v1/credentials
func runToken(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gantry token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "", "who the token authenticates: a service name or a user name (required)")
	to := fs.String("to", envOr("AUTH_CONTEXT", "gantry"), "the server's kmsauth name (its AUTH_CONTEXT)")
	userType := fs.String("user-type", "service", "service or user")
	lifetime := fs.Duration("lifetime", 10*time.Minute, "validity of the token (at most the server's AUTH_TOKEN_MAX_LIFETIME)")
	dataDir := fs.String("data-dir", envOr("GANTRY_DATA_DIR", "gantry-data"), "data folder holding keyring.json")
	key := fs.String("key", "", "KMS key to encrypt with (default AUTH_KEY for services, USER_AUTH_KEY for users)")
	version := fs.Int("token-version", 2, "kmsauth token version (1 or 2)")
	basic := fs.Bool("basic", false, "print <username>:<token>, ready for curl -u")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gantry token --from NAME [--user-type service|user] [--lifetime 10m] [--basic]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *from == "" {
		fmt.Fprintln(stderr, "gantry token: --from is required")
		fs.Usage()
		return 2
	}
	if *userType != "service" && *userType != "user" {
		fmt.Fprintf(stderr, "gantry token: --user-type %q is not service or user\n", *userType)
		return 2
	}
	if *key == "" {
		*key = envOr("AUTH_KEY", kms.AliasAuth)
		if *userType == "user" {
			*key = envOr("USER_AUTH_KEY", kms.AliasUserAuth)
		}
	}
	u := kmsauth.Username{Version: *version, UserType: *userType, From: *from}
	if *version < 2 {
		u = kmsauth.Username{Version: 1, UserType: "service", From: *from}
	}
	if _, err := kmsauth.ParseUsername(u.String()); err != nil {
		fmt.Fprintln(stderr, "gantry token:", err)
		return 2
	}
	if err := os.MkdirAll(*dataDir, 0o700); err != nil {
		fmt.Fprintln(stderr, "gantry token:", err)
		return 1
	}
	ring, err := kms.OpenKeyring(filepath.Join(*dataDir, "keyring.json"), zap.NewNop())
	if err != nil {
		fmt.Fprintln(stderr, "gantry token:", err)
		return 1
	}
	token, err := kmsauth.Generate(context.Background(), ring, *key, u, *to, *lifetime, time.Now())
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
