package stack

import (
	"bytes"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/settings"
)

// TestHelpListsEverySetting: gantry -h (the usage Register installs) shows every setting with its
// flag, every variable it is read from and its default, and every family, so nothing is configurable
// that -h does not show.
func TestHelpListsEverySetting(t *testing.T) {
	cfg := DefaultConfig()
	table := cfg.Settings()
	fs := flag.NewFlagSet("gantry", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	table.Register(fs)
	if err := fs.Parse([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	help := out.String()
	registered := 0
	fs.VisitAll(func(*flag.Flag) { registered++ })
	if registered != len(table.Settings()) {
		t.Errorf("%d flags for %d settings", registered, len(table.Settings()))
	}
	for _, s := range table.Settings() {
		entry := "\n  -" + s.Name + " " + s.Value.Kind() + "\n        " + s.Usage + "\n        env " + strings.Join(s.EnvNames(), ", ")
		if d := table.Default(s.Name); d != "" {
			entry += "; default " + d
		}
		if !strings.Contains(help, entry+"\n") {
			t.Errorf("-h lacks %q", entry)
		}
	}
	for _, f := range table.Families() {
		if !strings.Contains(help, "\n  "+f.Pattern+" ") {
			t.Errorf("-h lacks the family %s", f.Pattern)
		}
	}
	// The Confidant names a migration relies on are all there.
	for _, env := range []string{"KMS_MASTER_KEY", "USE_AUTH", "SESSION_SECRET", "ACM_PRIVATE_CAS", "CA_TYPE", "GANTRY_ROLES",
		"GANTRY_URL_ROOT", "GANTRY_ACL_POLICY_FILE", "GOOGLE_OAUTH_CLIENT_ID", "SAML_SP_KEY_FILE", "ACM_PRIVATE_CA_ARN_PROD",
		"CREDENTIALS_SLACK_OAUTH_BOT_TOKEN_A0123"} {
		if !table.Reads(env) {
			t.Errorf("the table does not read %s", env)
		}
	}
}

// TestSecretDefaultsNeverShow: -h shows a secret's default as "(set)" or a description, never a value.
func TestSecretDefaultsNeverShow(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Secrets.Auth.SessionSecret = "Zq8vN3tL0pR6wY1xC4bM7kD2fH5jG9sA"
	cfg.Secrets.WebhookPassword = "pw-Xy7kQ"
	var out bytes.Buffer
	cfg.Settings().PrintUsage(&out, "gantry")
	for _, secret := range []string{cfg.Secrets.Auth.SessionSecret, cfg.Secrets.WebhookPassword} {
		if strings.Contains(out.String(), secret) {
			t.Errorf("-h shows %q", secret)
		}
	}
}

// envRead finds a read of the process environment, and the literal variable name when there is one.
var (
	envCall    = regexp.MustCompile(`\b(os\.Getenv|os\.LookupEnv|os\.Environ|syscall\.Getenv|syscall\.Environ)\(`)
	envLiteral = regexp.MustCompile(`\b(?:Getenv|LookupEnv|envOr)\("([A-Za-z_][A-Za-z0-9_]*)"`)
	// envComputed is a read whose variable name is not a literal: a name built at run time, which no
	// test could check against the table.
	envComputed = regexp.MustCompile(`\b(?:os|syscall)\.(?:Getenv|LookupEnv)\([^"]`)
	// envHelper is a helper of the kind that once read variables beside the table.
	envHelper = regexp.MustCompile(`\benvOr\(`)
)

// envReaders are the only files that may read the process environment: the table's package, and
// cmd/gantry/environment.go, whose reads are not settings (notSettings, and the whole environment
// gantry env hands on to its command). Every other variable of a command is a setting of a table:
// serve's, or the client commands' own (cmd/gantry's TestEveryVariableACommandReadsIsInATable).
var envReaders = []string{"pkg/settings/settings.go", "cmd/gantry/environment.go"}

// notSettings are the variables gantry reads that configure no part of it: the login name the client
// commands fall back on, and Go's GOGC, which gantry serve's default only yields to.
var notSettings = []string{"USER", "GOGC"}

// TestEveryEnvironmentReadIsInTheTable: outside pkg/settings and cmd/gantry/environment.go no code,
// server or command, reads the environment itself (so no setting escapes -h and the docs), no
// envOr-style helper exists, no read builds its variable's name at run time, and every variable
// named in code is in the table or notSettings.
func TestEveryEnvironmentReadIsInTheTable(t *testing.T) {
	cfg := DefaultConfig()
	table := cfg.Settings()
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if name := d.Name(); rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "third_party") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checkEnvironmentReads(t, table, rel, string(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkEnvironmentReads reports the reads of the environment in one source file that escape the table.
func checkEnvironmentReads(t *testing.T, table *settings.Table, rel, src string) {
	t.Helper()
	if call := envCall.FindString(src); call != "" && !slices.Contains(envReaders, rel) {
		t.Errorf("%s reads the environment itself (%s...): declare a setting in the package's Settings, or read it through a table (cmd/gantry/environment.go)", rel, call)
	}
	if envHelper.MatchString(src) {
		t.Errorf("%s has an envOr helper: a command reads serve's settings from the table (serverSettings) and its own through clientSettings", rel)
	}
	if call := envComputed.FindString(src); call != "" && rel != "pkg/settings/settings.go" {
		t.Errorf("%s reads a variable whose name is computed (%s...): no test can check it against the table", rel, call)
	}
	for _, m := range envLiteral.FindAllStringSubmatch(src, -1) {
		if !table.Reads(m[1]) && !slices.Contains(notSettings, m[1]) {
			t.Errorf("%s reads %s, which is not in the settings table", rel, m[1])
		}
	}
}

// TestConfidantEnvFile: a Confidant env file configures gantry through the table alone, and a bad
// value is named as the variable it came from.
func TestConfidantEnvFile(t *testing.T) {
	cfg := DefaultConfig()
	table := cfg.Settings()
	env := map[string]string{
		"USE_AUTH": "true", "AUTH_CONTEXT": "confidant-prod", "AUTH_TOKEN_MAX_LIFETIME": "30", "KMS_AUTH_USER_TYPES": "service,user,bot",
		"USER_AUTH_MODULE": "google", "GOOGLE_OAUTH_CLIENT_ID": "id", "OIDC_CLIENT_ID": "wins", "SAML_CONFIDANT_URL_ROOT": "https://old",
		"GANTRY_URL_ROOT": "https://new", "ACL_MODULE": "confidant.authnz.rbac:default_acl", "BACKGROUND_CACHE_IAM_ROLES_REFRESH_RATE": "5",
		"GANTRY_ROLES": "a, b", "CUSTOM_CA_MAX_VALIDITY_DAYS": "30",
	}
	if err := table.Load(settings.MapLookup(env)); err != nil {
		t.Fatal(err)
	}
	s := cfg.Secrets
	if s.Auth.AuthContext != "confidant-prod" || s.Auth.AuthTokenMaxLifetime.Minutes() != 30 || len(s.Auth.UserTypes) != 3 ||
		s.Auth.UserAuthModule != "oidc" || s.Auth.OIDCClientID != "wins" || s.Auth.SAMLURLRoot != "https://new" ||
		s.ACLModule != "default" || s.RolesRefresh.Seconds() != 60 || strings.Join(s.Roles, "|") != "a|b" ||
		s.Certs.Settings("development").MaxValidityDays != 30 {
		t.Errorf("loaded %+v", s)
	}
	if err := table.Explain(cfg.Validate()); err != nil {
		t.Fatal(err)
	}

	cfg = DefaultConfig()
	table = cfg.Settings()
	if err := table.Load(settings.MapLookup(map[string]string{"SESSION_SECRET": "short"})); err != nil {
		t.Fatal(err)
	}
	err := table.Explain(cfg.Validate())
	if err == nil || !strings.HasPrefix(err.Error(), "SESSION_SECRET (env): must be at least 32 bytes") || strings.Contains(err.Error(), "short,") {
		t.Errorf("short SESSION_SECRET: %v", err)
	}
}
