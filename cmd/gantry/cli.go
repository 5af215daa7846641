package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/user"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/gantry-dev/gantry/pkg/gantryclient"
	"github.com/gantry-dev/gantry/pkg/settings"
)

// Exit codes of the client commands (creds, services, changes, env, certs), documented in docs/cli.md.
const (
	exitOK       = 0
	exitFailure  = 1 // the server failed or refused the request, or a local file could not be written
	exitUsage    = 2 // bad flags or arguments; nothing was sent
	exitNotFound = 3 // 401, 403 or 404: no such thing, or not for this caller
	exitHeld     = 4 // an approval rule holds the write: nothing was written yet (a change request was made)
)

// errUsage marks an error of the user's input: the command prints it and exits 2.
var errUsage = errors.New("usage error")

func usageErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

// clientFlags are the flags of every command that talks to the gateway: where it is, who we are, how
// to print answers.
type clientFlags struct {
	addr   string
	caFile string
	// certFile and keyFile authenticate with a service's client certificate instead of a token.
	certFile, keyFile string
	// tokenFile holds a workload token (a projected service-account token, a CI job's OIDC token).
	tokenFile string
	token     string
	output    string
	auth      *tokenFlags
	// retryMaxWait bounds the waits for a server that answers 429 (or 503) with Retry-After, per call.
	retryMaxWait time.Duration
	// stderr is where the commands tell the user that they wait.
	stderr io.Writer
	// settings are the tables parseFlags loads: the client's own and the token's.
	settings []*settings.Table
}

// addClientFlags registers the client flags. The token flags are gantry token's, with the local user
// as the default caller, so `gantry creds list` works as is against `make run`. The client's own
// settings are also read from GANTRY_<FLAG> (GANTRY_ADDR for -addr): c.settings, loaded by parseFlags.
func addClientFlags(fs *flag.FlagSet, stderr io.Writer) *clientFlags {
	c := &clientFlags{stderr: stderr, addr: "http://127.0.0.1:8080", output: "auto", retryMaxWait: gantryclient.DefaultRetryMaxWait}
	c.auth = addTokenFlags(fs, "user")
	c.auth.from = currentUser()
	client := clientSettings(fs,
		settings.Setting{Name: "addr", Value: clientString(&c.addr), Usage: "REST address of the gantry gateway"},
		settings.Setting{Name: "ca-file", Value: clientString(&c.caFile), Usage: "PEM file of a CA to trust, besides the system's, for an https -addr whose certificate a private CA signed"},
		settings.Setting{Name: "cert", Value: clientString(&c.certFile), Usage: "PEM client certificate of a service (its chain may follow it) to authenticate with instead of a token: needs an https -addr"},
		// -key is already gantry token's KMS key: the certificate's key is -cert-key.
		settings.Setting{Name: "cert-key", Value: clientString(&c.keyFile), Usage: "PEM private key of -cert (default: the key in the -cert file itself)"},
		settings.Setting{Name: "token-file", Value: clientString(&c.tokenFile), Usage: "file of a workload JWT to authenticate with (a Kubernetes projected service-account token, a CI job's OIDC token), read at each run"},
		settings.Setting{Name: "token", Value: clientString(&c.token), Secret: true, Usage: "kmsauth token to send instead of minting one, or USERNAME:TOKEN as gantry token -basic prints"},
		settings.Setting{Name: "retry-max-wait", Value: settings.Duration(&c.retryMaxWait), Usage: "how long one call may wait in all when the server answers 429 (a write limit) or 503 with Retry-After, then is sent again; 0 never waits"},
		settings.Setting{Name: "from", Value: clientString(&c.auth.from), Default: "the login user", Usage: "who the token authenticates: a service name or a user name"},
	)
	fs.StringVar(&c.output, "output", "auto", "json, table, or auto: a table on a terminal, JSON otherwise")
	c.settings = append([]*settings.Table{client}, c.auth.settings...)
	return c
}

// retryPolicy waits out 429 and 503 answers with Retry-After up to -retry-max-wait, and says so on
// stderr the first time, so a script over the write limit is slower rather than failing or silent.
func (c *clientFlags) retryPolicy() gantryclient.RetryPolicy {
	maxWait := c.retryMaxWait
	if maxWait <= 0 {
		maxWait = -1 // the client's 0 is its default; the flag's 0 means never wait
	}
	var once sync.Once
	return gantryclient.RetryPolicy{MaxWait: maxWait, Notify: func(err error, wait time.Duration) {
		once.Do(func() {
			if c.stderr != nil {
				fmt.Fprintf(c.stderr, "gantry: the server asked to come back later (%v); waiting %v and retrying, up to %v in all per call (-retry-max-wait)\n", err, wait, c.retryMaxWait)
			}
		})
	}}
}

func currentUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return loginNameFromEnvironment()
}

// validate checks the flags that need no keyring and no server, so a usage error is reported as one.
func (c *clientFlags) validate() error {
	if c.output != "auto" && c.output != "json" && c.output != "table" {
		return usageErrorf("-output %q is not json, table or auto", c.output)
	}
	if !strings.HasPrefix(c.addr, "http://") && !strings.HasPrefix(c.addr, "https://") {
		return usageErrorf("-addr %q must start with http:// or https://", c.addr)
	}
	if c.keyFile != "" && c.certFile == "" {
		return usageErrorf("-cert-key needs -cert")
	}
	if c.certFile != "" && c.tokenFile != "" {
		return usageErrorf("-cert and -token-file are two credentials: give one")
	}
	if c.certFile != "" && !strings.HasPrefix(c.addr, "https://") {
		return usageErrorf("-cert needs an https -addr: a client certificate is presented on the TLS handshake")
	}
	return nil
}

// client builds the API client: with the given token, or one minted from the local keyring. Its error
// is a usage error for bad flags and a plain one when the keyring is missing.
func (c *clientFlags) client(ctx context.Context) (*gantryclient.Client, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	httpClient, err := c.httpClient()
	if err != nil {
		return nil, err
	}
	if c.certFile != "" {
		// The certificate is the credential: no token, no keyring.
		return &gantryclient.Client{BaseURL: c.addr, HTTP: httpClient, Retry: c.retryPolicy()}, nil
	}
	if c.tokenFile != "" {
		// Projected tokens are rotated in place by the kubelet: read the current one.
		data, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, usageErrorf("-token-file: %v", err)
		}
		token := strings.TrimSpace(string(data))
		if strings.Count(token, ".") != 2 {
			return nil, usageErrorf("-token-file %s does not hold a JWT", c.tokenFile)
		}
		return &gantryclient.Client{BaseURL: c.addr, Authorization: "Bearer " + token, HTTP: httpClient, Retry: c.retryPolicy()}, nil
	}
	basic, err := c.basicCredentials(ctx)
	if err != nil {
		return nil, err
	}
	return &gantryclient.Client{
		BaseURL:       c.addr,
		Authorization: "Basic " + base64.StdEncoding.EncodeToString([]byte(basic)),
		HTTP:          httpClient,
		Retry:         c.retryPolicy(),
	}, nil
}

// httpClient is the HTTP client of the API calls: the default one, or with -ca-file one that also
// trusts that CA (the system's CAs stay trusted, so a public -addr keeps working). A -ca-file that
// cannot be read or holds no certificate is a usage error: nothing is sent.
func (c *clientFlags) httpClient() (*http.Client, error) {
	if c.caFile == "" && c.certFile == "" {
		return nil, nil
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.caFile != "" {
		pemData, err := os.ReadFile(c.caFile)
		if err != nil {
			return nil, usageErrorf("-ca-file: %v", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pemData) {
			return nil, usageErrorf("-ca-file %s holds no PEM certificate", c.caFile)
		}
		tlsCfg.RootCAs = pool
	}
	if c.certFile != "" {
		keyFile := c.keyFile
		if keyFile == "" {
			keyFile = c.certFile
		}
		pair, err := tls.LoadX509KeyPair(c.certFile, keyFile)
		if err != nil {
			return nil, usageErrorf("-cert/-cert-key: %v", err)
		}
		tlsCfg.Certificates = []tls.Certificate{pair}
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = tlsCfg
	return &http.Client{Transport: transport, Timeout: gantryclient.DefaultTimeout}, nil
}

// basicCredentials is USERNAME:TOKEN, the HTTP Basic credentials kmsauth callers send (as curl -u in
// the README does).
func (c *clientFlags) basicCredentials(ctx context.Context) (string, error) {
	token := c.token
	// A base64 token has no colon: one with a colon is gantry token -basic's USERNAME:TOKEN.
	if strings.Contains(token, ":") {
		return token, nil
	}
	u, err := c.auth.username()
	if err != nil {
		return "", usageErrorf("%v", err)
	}
	if token == "" {
		if token, err = c.auth.mint(ctx, u); err != nil {
			return "", fmt.Errorf("cannot mint a token (or pass one with -token / GANTRY_TOKEN): %w", err)
		}
	}
	return u.String() + ":" + token, nil
}

// asJSON says whether answers are printed as JSON: asked for, or stdout is not a terminal (a pipe or a
// file, where a program reads it).
func (c *clientFlags) asJSON(stdout io.Writer) bool {
	switch c.output {
	case "json":
		return true
	case "table":
		return false
	}
	f, ok := stdout.(*os.File)
	if !ok {
		return true
	}
	info, err := f.Stat()
	return err != nil || info.Mode()&os.ModeCharDevice == 0
}

// exitCode prints err for the command and returns its exit code. Errors never hold secret values:
// the API client quotes only the server's message, and the commands never put a value in an error.
func exitCode(stderr io.Writer, name string, err error) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	var apiErr *gantryclient.APIError
	if req, held := gantryclient.HeldForApproval(err); held {
		fmt.Fprintf(stderr, "Follow it with 'gantry changes show %s'; approvers decide with 'gantry changes approve|reject %s', you may withdraw it with 'gantry changes cancel %s'.\n",
			req.ID, req.ID, req.ID)
		return exitHeld
	}
	switch {
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "Run '%s -h' for usage and examples.\n", name)
		return exitUsage
	case errors.As(err, &apiErr):
		printConflicts(stderr, apiErr)
		if gantryclient.IsStatus(err, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound) {
			return exitNotFound
		}
	}
	return exitFailure
}

// printConflicts explains a credential-key conflict: which keys, exposed by which credentials.
func printConflicts(w io.Writer, apiErr *gantryclient.APIError) {
	if len(apiErr.Conflicts) == 0 {
		return
	}
	fmt.Fprintln(w, "Two credentials of the service would expose the same keys (each key becomes one environment variable):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  KEY\tCREDENTIALS")
	for _, key := range sortedKeys(apiErr.Conflicts) {
		fmt.Fprintf(tw, "  %s\t%s\n", key, strings.Join(apiErr.Conflicts[key], ", "))
	}
	_ = tw.Flush()
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// parseCommandLine parses flags placed before, between or after the positional arguments, so
// `gantry creds get ID -output json` works as well as `gantry creds get -output json ID`.
func parseCommandLine(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		// "--" ends the flags: everything after it is positional, as is.
		if len(args) >= len(rest)+1 && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// subcommand is one action of a command group such as gantry creds.
type subcommand struct {
	name string
	// args names the positional arguments; a last name ending in "..." takes one or more.
	args     []string
	summary  string
	examples string
	// details is what else its -h says (how a held write answers).
	details string
	// flags registers the action's own flags; run gets them back with the positional arguments.
	flags func(fs *flag.FlagSet) any
	run   func(ctx context.Context, env *cliEnv, positional []string, flags any) error
}

// cliEnv is what an action works with: the API client, where to print, and how.
type cliEnv struct {
	flags  *clientFlags
	stdout io.Writer
	stdin  io.Reader
	json   bool
}

// api builds the API client. Actions call it after checking their own input, so a usage error is
// reported before any token is minted.
func (e *cliEnv) api(ctx context.Context) (*gantryclient.Client, error) { return e.flags.client(ctx) }

// runGroup dispatches a command group (gantry creds, gantry services) to its action, parses the
// action's flags with the client flags, and maps its error to an exit code.
func runGroup(group, summary string, actions []subcommand, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		groupHelp(group, summary, actions).print(stderr, nil)
		return exitUsage
	}
	if isHelpFlag(args[0]) || args[0] == "help" {
		groupHelp(group, summary, actions).print(stdout, nil)
		return exitOK
	}
	var action *subcommand
	for i := range actions {
		if actions[i].name == args[0] {
			action = &actions[i]
		}
	}
	if action == nil {
		fmt.Fprintf(stderr, "gantry %s: unknown action %q\nRun 'gantry %s -h' for its actions.\n", group, args[0], group)
		return exitUsage
	}
	name := "gantry " + group + " " + action.name
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var own any
	if action.flags != nil {
		own = action.flags(fs)
	}
	client := addClientFlags(fs, stderr)
	silence(fs)
	positional, err := parseCommandLine(fs, args[1:])
	if err != nil {
		return parseFailure(fs, err, func(w io.Writer) { actionHelp(name, action).print(w, fs) }, stdout, stderr)
	}
	if code, ok := loadSettings(name, stderr, client.settings...); !ok {
		return code
	}
	if err := client.validate(); err != nil {
		return exitCode(stderr, name, err)
	}
	if err := checkArgs(positional, action.args); err != nil {
		return exitCode(stderr, name, err)
	}
	env := &cliEnv{flags: client, stdout: stdout, stdin: os.Stdin, json: client.asJSON(stdout)}
	return exitCode(stderr, name, action.run(context.Background(), env, positional, own))
}

// groupHelp is the -h of a command group: its actions, and where each action's flags are.
func groupHelp(group, summary string, actions []subcommand) helpText {
	var list strings.Builder
	fmt.Fprintln(&list, "Actions:")
	tw := tabwriter.NewWriter(&list, 0, 4, 2, ' ', 0)
	var examples []string
	for _, a := range actions {
		fmt.Fprintf(tw, "  %s %s\t%s\n", a.name, strings.Join(a.args, " "), a.summary)
		if lines := exampleLines(a.examples); len(lines) > 0 {
			examples = append(examples, lines[0])
		}
	}
	_ = tw.Flush()
	return helpText{
		name: "gantry " + group, description: summary,
		usage:     []string{"gantry " + group + " ACTION [arguments] [flags]"},
		details:   list.String() + "\ndocs/cli.md has more.",
		examples:  examples,
		flagsNote: "each action's, with the client flags: gantry " + group + " ACTION -h",
	}
}

// actionHelp is the -h of one action of a command group.
func actionHelp(name string, action *subcommand) helpText {
	return helpText{
		name: name, description: action.summary,
		usage:    []string{strings.Join(append([]string{name}, append(action.args, "[flags]")...), " ")},
		details:  action.details,
		examples: exampleLines(action.examples),
	}
}

// exampleLines splits an action's examples into commands; a line ending in a backslash goes on
// with the next.
func exampleLines(examples string) []string {
	var out []string
	continued := false
	for _, line := range strings.Split(examples, "\n") {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		if continued {
			out[len(out)-1] += "\n    " + line
		} else {
			out = append(out, line)
		}
		continued = strings.HasSuffix(line, "\\")
	}
	return out
}

// checkArgs checks the number of positional arguments against their names.
func checkArgs(positional, names []string) error {
	variadic := len(names) > 0 && strings.HasSuffix(names[len(names)-1], "...")
	switch {
	case variadic && len(positional) < len(names):
		return usageErrorf("want at least %d arguments (%s), got %d", len(names), strings.Join(names, " "), len(positional))
	case !variadic && len(positional) != len(names):
		if len(names) == 0 {
			return usageErrorf("unexpected argument %q", positional[0])
		}
		return usageErrorf("want %d argument(s) (%s), got %d", len(names), strings.Join(names, " "), len(positional))
	}
	return nil
}
