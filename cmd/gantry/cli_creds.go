package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gantry-dev/gantry/pkg/credpair"
	"github.com/gantry-dev/gantry/pkg/gantryclient"
	"github.com/gantry-dev/gantry/pkg/settings"
)

func runCreds(args []string, stdout, stderr io.Writer) int {
	return runGroup("creds", "Credentials: named sets of secret key/value pairs. Every write is a new revision.", credsActions(), args, stdout, stderr)
}

func credsActions() []subcommand {
	return []subcommand{
		{name: "list", summary: "list current credentials (no values)",
			examples: "  gantry creds list\n  gantry creds list -output json | jq -r '.[].name'\n",
			run:      credsList},
		{name: "get", args: []string{"ID"}, summary: "show one credential with its values",
			examples: "  gantry creds get 3f0c...\n  gantry creds get 3f0c... -output json | jq -r .credential_pairs.db_password\n",
			run:      credsGet},
		{name: "create", summary: "create a credential; pairs from stdin or a file keep values off the command line (and out of ps)",
			examples: "  echo '{\"DB_PASSWORD\":\"hunter2\"}' | gantry creds create -name orders-db -doc 'orders database' -pairs-stdin\n" +
				"  gantry creds create -name orders-db -doc 'orders database' -pairs-file pairs.json -metadata team=orders -tags db,orders\n",
			flags: addCredentialFlags, run: credsCreate},
		{name: "update", args: []string{"ID"}, summary: "write a new revision with the given fields changed (pairs replace all pairs)",
			examples: "  gantry creds update 3f0c... -pairs-stdin < new-pairs.json\n  gantry creds update 3f0c... -enabled=false\n" +
				"  gantry creds update 3f0c... -pairs-file rotated.json -reason 'quarterly rotation'\n",
			details: heldNote,
			flags: func(fs *flag.FlagSet) any {
				return &credentialUpdateFlags{fields: addCredentialFlags(fs).(*credentialFlags), change: addChangeFlags(fs)}
			},
			run: credsUpdate},
		{name: "diff", args: []string{"ID", "OLD", "NEW"}, summary: "fields that differ between two revisions (key names, never values)",
			examples: "  gantry creds diff 3f0c... 1 2\n", run: credsDiff},
		{name: "history", args: []string{"ID"}, summary: "every revision, oldest first (no values)",
			examples: "  gantry creds history 3f0c...\n", run: credsHistory},
		{name: "revert", args: []string{"ID", "REV"}, summary: "write a new revision with the content of revision REV",
			examples: "  gantry creds revert 3f0c... 1\n  gantry creds revert 3f0c... 1 -reason 'bad rotation' -break-glass\n",
			details:  heldNote, flags: func(fs *flag.FlagSet) any { return addChangeFlags(fs) }, run: credsRevert},
		{name: "archive", args: []string{"ID"}, summary: "archive a disabled, unmapped credential and its history (-dry-run only checks)",
			examples: "  gantry creds update 3f0c... -enabled=false\n  gantry creds archive 3f0c... -dry-run\n  gantry creds archive 3f0c... -reason 'service retired'\n",
			details:  heldNote,
			flags: func(fs *flag.FlagSet) any {
				return &archiveFlags{dryRun: fs.Bool("dry-run", false, "only check that the credential could be archived"), change: addChangeFlags(fs)}
			},
			run: credsArchive},
		{name: "due", summary: "credentials whose rotation is overdue or due soon (next_rotation_date), soonest first",
			examples: "  gantry creds due\n  gantry creds due -within-days 30 -output json | jq -r '.[].name'\n",
			flags:    addDueFlags, run: credsDue},
	}
}

// credentialUpdateFlags are gantry creds update's: the fields, and why the change is made.
type credentialUpdateFlags struct {
	fields *credentialFlags
	change *changeFlags
}

// archiveFlags are gantry creds archive's.
type archiveFlags struct {
	dryRun *bool
	change *changeFlags
}

func credsList(ctx context.Context, env *cliEnv, _ []string, _ any) error {
	api, err := env.api(ctx)
	if err != nil {
		return err
	}
	creds, err := api.ListCredentials(ctx)
	if err != nil {
		return err
	}
	return printCredentials(env, creds, false)
}

func credsGet(ctx context.Context, env *cliEnv, args []string, _ any) error {
	api, err := env.api(ctx)
	if err != nil {
		return err
	}
	cred, err := api.GetCredential(ctx, args[0])
	if err != nil {
		return err
	}
	// The one answer that shows values: the user asked for this credential.
	return printCredential(env, cred, true)
}

func credsCreate(ctx context.Context, env *cliEnv, _ []string, flags any) error {
	in, err := flags.(*credentialFlags).input(env.stdin)
	if err != nil {
		return err
	}
	if in.Name == nil || in.Documentation == nil || in.CredentialPairs == nil {
		return usageErrorf("create needs -name, -doc and pairs (-pairs-stdin, -pairs-file or -pair)")
	}
	api, err := env.api(ctx)
	if err != nil {
		return err
	}
	cred, err := api.CreateCredential(ctx, in)
	if err != nil {
		return err
	}
	return printCredential(env, cred, false)
}

func credsUpdate(ctx context.Context, env *cliEnv, args []string, flags any) error {
	f := flags.(*credentialUpdateFlags)
	in, err := f.fields.input(env.stdin)
	if err != nil {
		return err
	}
	if in.Name == nil && in.Documentation == nil && in.Enabled == nil && in.CredentialPairs == nil && in.Metadata == nil && in.Tags == nil {
		return usageErrorf("nothing to update: give -name, -doc, pairs, -metadata, -tags or -enabled")
	}
	change, err := f.change.change()
	if err != nil {
		return err
	}
	api, err := env.api(ctx)
	if err != nil {
		return err
	}
	cred, err := api.UpdateCredential(ctx, args[0], in, change)
	if err != nil {
		return reportHeld(env, err)
	}
	return printCredential(env, cred, false)
}

func credsDiff(ctx context.Context, env *cliEnv, args []string, _ any) error {
	oldRev, newRev, err := revisionArgs(args[1], args[2])
	if err != nil {
		return err
	}
	api, err := env.api(ctx)
	if err != nil {
		return err
	}
	changes, err := api.DiffCredential(ctx, args[0], oldRev, newRev)
	if err != nil {
		return err
	}
	return printDiff(env, changes)
}

func credsHistory(ctx context.Context, env *cliEnv, args []string, _ any) error {
	api, err := env.api(ctx)
	if err != nil {
		return err
	}
	revisions, err := api.CredentialHistory(ctx, args[0])
	if err != nil {
		return err
	}
	return printCredentials(env, revisions, true)
}

func credsRevert(ctx context.Context, env *cliEnv, args []string, flags any) error {
	rev, _, err := revisionArgs(args[1], args[1])
	if err != nil {
		return err
	}
	change, err := flags.(*changeFlags).change()
	if err != nil {
		return err
	}
	api, err := env.api(ctx)
	if err != nil {
		return err
	}
	cred, err := api.RevertCredential(ctx, args[0], rev, change)
	if err != nil {
		return reportHeld(env, err)
	}
	return printCredential(env, cred, false)
}

func credsArchive(ctx context.Context, env *cliEnv, args []string, flags any) error {
	f := flags.(*archiveFlags)
	change, err := f.change.change()
	if err != nil {
		return err
	}
	api, err := env.api(ctx)
	if err != nil {
		return err
	}
	result, err := api.ArchiveCredential(ctx, args[0], *f.dryRun, change)
	if err != nil {
		return reportHeld(env, err)
	}
	if env.json {
		return printJSON(env.stdout, map[string]any{"id": args[0], "result": result})
	}
	_, err = fmt.Fprintf(env.stdout, "%s: %s\n", args[0], result)
	return err
}

// credsDue lists the credentials due for rotation (gantry creds due).
func credsDue(ctx context.Context, env *cliEnv, _ []string, flags any) error {
	within := flags.(*dueFlags).withinDays
	if within != nil && *within < 0 {
		return usageErrorf("-within-days %d is negative", *within)
	}
	api, err := env.api(ctx)
	if err != nil {
		return err
	}
	due, err := api.ListDueCredentials(ctx, within)
	if err != nil {
		return err
	}
	if env.json {
		if due == nil {
			due = []gantryclient.DueCredential{}
		}
		return printJSON(env.stdout, due)
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATE\tNEXT ROTATION\tLAST ROTATION\tSERVICES")
	for _, c := range due {
		last := "never"
		if c.LastRotationDate != nil {
			last = *c.LastRotationDate
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.ID, c.Name, c.State, c.NextRotationDate, last, strings.Join(c.Services, ","))
	}
	if len(due) == 0 {
		fmt.Fprintln(tw, "(no credential is due for rotation)")
	}
	return tw.Flush()
}

// dueFlags is gantry creds due's -within-days; nil asks for the server's window.
type dueFlags struct{ withinDays *int }

func addDueFlags(fs *flag.FlagSet) any {
	f := &dueFlags{}
	fs.Func("within-days", "also list credentials due within `N` days (default: the server's reminder window, else 7)", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return errors.New("want a number of days")
		}
		f.withinDays = &n
		return nil
	})
	return f
}

// revisionArgs parses two revision numbers.
func revisionArgs(a, b string) (int, int, error) {
	var revs [2]int
	for i, s := range []string{a, b} {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return 0, 0, usageErrorf("revision %q is not a number of 1 or more", s)
		}
		revs[i] = n
	}
	return revs[0], revs[1], nil
}

// credentialFlags are the fields of a credential create or update. Pairs come preferably from stdin
// or a file: a value on the command line is visible to every user of the machine in ps.
type credentialFlags struct {
	name, doc  *string
	pairs      keyValueFlag
	pairsFile  string
	pairsStdin bool
	metadata   keyValueFlag
	tags       []string
	tagsSet    bool
	enabled    optionalBool
}

func addCredentialFlags(fs *flag.FlagSet) any {
	f := &credentialFlags{}
	fs.Func("name", "friendly `name` (unique among current credentials)", func(v string) error { f.name = &v; return nil })
	fs.Func("doc", "documentation: `text` saying what the credential is for and how to rotate it", func(v string) error { f.doc = &v; return nil })
	fs.BoolVar(&f.pairsStdin, "pairs-stdin", false, `read the pairs from stdin as a JSON object {"KEY": "value", "PORT": 5432, ...}, each value keeping its JSON type (preferred)`)
	fs.StringVar(&f.pairsFile, "pairs-file", "", `read the pairs from a file holding a JSON object {"KEY": "value", "PORT": 5432, ...}`)
	fs.Var(&f.pairs, "pair", "a pair `KEY=VALUE` (repeatable; visible in ps: prefer -pairs-stdin)")
	fs.Var(&f.metadata, "metadata", "clear-text metadata `KEY=VALUE` (repeatable; replaces all metadata)")
	fs.Func("tags", "comma-separated `tags` (replaces all tags)", func(v string) error {
		f.tags, f.tagsSet = settings.SplitList(v), true
		return nil
	})
	fs.Var(&f.enabled, "enabled", "enable (true) or disable (false) the credential")
	return f
}

// input is the request body the flags describe.
func (f *credentialFlags) input(stdin io.Reader) (gantryclient.CredentialInput, error) {
	in := gantryclient.CredentialInput{Name: f.name, Documentation: f.doc, Enabled: f.enabled.value}
	sources := 0
	for _, given := range []bool{f.pairsStdin, f.pairsFile != "", len(f.pairs) > 0} {
		if given {
			sources++
		}
	}
	if sources > 1 {
		return in, usageErrorf("give the pairs one way: -pairs-stdin, -pairs-file or -pair")
	}
	var err error
	switch {
	case f.pairsStdin:
		in.CredentialPairs, err = readPairsJSON("stdin", stdin)
	case f.pairsFile != "":
		var file *os.File
		if file, err = os.Open(f.pairsFile); err != nil {
			return in, usageErrorf("-pairs-file: %v", err)
		}
		defer file.Close()
		in.CredentialPairs, err = readPairsJSON(f.pairsFile, file)
	case len(f.pairs) > 0:
		in.CredentialPairs = credpair.Strings(f.pairs) // -pair values are strings
	}
	if err != nil {
		return in, err
	}
	if len(f.metadata) > 0 {
		in.Metadata = f.metadata
	}
	if f.tagsSet {
		in.Tags = f.tags
		if in.Tags == nil {
			in.Tags = []string{}
		}
	}
	return in, nil
}

// readPairsJSON reads a JSON object of string values. Its errors name keys, never values.
func readPairsJSON(source string, r io.Reader) (credpair.Map, error) {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(io.LimitReader(r, 64<<20))
	if err := dec.Decode(&raw); err != nil {
		// The decoder's message can quote the input, which holds secrets: name only the position.
		var syntaxErr *json.SyntaxError
		if errors.As(err, &syntaxErr) {
			return nil, usageErrorf("pairs from %s are not a JSON object (syntax error at byte %d)", source, syntaxErr.Offset)
		}
		return nil, usageErrorf(`pairs from %s are not a JSON object {"KEY": "value", ...}`, source)
	}
	if len(raw) == 0 {
		return nil, usageErrorf("pairs from %s: no pairs", source)
	}
	pairs := make(credpair.Map, len(raw))
	for key, value := range raw {
		// A value keeps its JSON type (5432 stays a number), as Confidant keeps it.
		var v credpair.Value
		if err := v.UnmarshalJSON(value); err != nil {
			return nil, usageErrorf("pairs from %s: the value of %q is not a JSON string, number, boolean or null", source, key)
		}
		pairs[key] = v
	}
	return pairs, nil
}

// showValue is a value as the text view prints it: a string as it is, any other type as its JSON
// text with the type named, so the number 5432 and the string "5432" read differently.
func showValue(v credpair.Value) string {
	if v.Kind() == credpair.String {
		return v.Text()
	}
	if v.IsNull() {
		return "null"
	}
	return v.JSON() + " (" + v.Kind().String() + ")"
}

// keyValueFlag is a repeatable KEY=VALUE flag. Its String never shows values (flag prints defaults).
type keyValueFlag map[string]string

func (m *keyValueFlag) String() string { return "" }
func (m *keyValueFlag) Set(v string) error {
	key, value, ok := strings.Cut(v, "=")
	if !ok || key == "" {
		return errors.New("want KEY=VALUE")
	}
	if *m == nil {
		*m = keyValueFlag{}
	}
	(*m)[key] = value
	return nil
}

// optionalBool is a boolean flag that knows whether it was given: an update sends enabled only then.
type optionalBool struct{ value *bool }

func (b *optionalBool) IsBoolFlag() bool { return true }
func (b *optionalBool) String() string {
	if b == nil || b.value == nil {
		return ""
	}
	return strconv.FormatBool(*b.value)
}
func (b *optionalBool) Set(v string) error {
	parsed, err := strconv.ParseBool(v)
	if err != nil {
		return errors.New("want true or false")
	}
	b.value = &parsed
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// printCredential prints one credential; its values only when withValues (gantry creds get).
func printCredential(env *cliEnv, cred gantryclient.Credential, withValues bool) error {
	if !withValues {
		cred = cred.WithoutValues()
	}
	if env.json {
		return printJSON(env.stdout, cred)
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\n", cred.ID)
	fmt.Fprintf(tw, "name\t%s\n", cred.Name)
	fmt.Fprintf(tw, "revision\t%d\n", cred.Revision)
	fmt.Fprintf(tw, "enabled\t%t\n", cred.Enabled)
	fmt.Fprintf(tw, "documentation\t%s\n", cred.Documentation)
	fmt.Fprintf(tw, "keys\t%s\n", strings.Join(cred.CredentialKeys, ", "))
	fmt.Fprintf(tw, "metadata\t%s\n", joinPairs(cred.Metadata))
	fmt.Fprintf(tw, "tags\t%s\n", strings.Join(cred.Tags, ", "))
	fmt.Fprintf(tw, "modified\t%s by %s\n", cred.ModifiedDate, cred.ModifiedBy)
	if withValues && len(cred.CredentialPairs) > 0 {
		fmt.Fprintln(tw, "pairs\t")
		for _, key := range sortedKeys(cred.CredentialPairs) {
			fmt.Fprintf(tw, "  %s\t%s\n", key, showValue(cred.CredentialPairs[key]))
		}
	}
	return tw.Flush()
}

// printCredentials prints a listing (history: one line per revision). Listings never carry values.
func printCredentials(env *cliEnv, creds []gantryclient.Credential, history bool) error {
	for i := range creds {
		creds[i] = creds[i].WithoutValues()
	}
	if env.json {
		if creds == nil {
			creds = []gantryclient.Credential{}
		}
		return printJSON(env.stdout, creds)
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tREV\tENABLED\tKEYS\tMODIFIED\tBY")
	for _, c := range creds {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%t\t%s\t%s\t%s\n", c.ID, c.Name, c.Revision, c.Enabled, strings.Join(c.CredentialKeys, ","), c.ModifiedDate, c.ModifiedBy)
	}
	if len(creds) == 0 && !history {
		fmt.Fprintln(tw, "(no credentials yet: gantry creds create -h)")
	}
	return tw.Flush()
}

// printDiff prints the fields that differ, older value first.
func printDiff(env *cliEnv, changes map[string]gantryclient.FieldChange) error {
	if env.json {
		if changes == nil {
			changes = map[string]gantryclient.FieldChange{}
		}
		return printJSON(env.stdout, changes)
	}
	if len(changes) == 0 {
		_, err := fmt.Fprintln(env.stdout, "no differences")
		return err
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FIELD\tREMOVED (older)\tADDED (newer)")
	for _, field := range sortedKeys(changes) {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", field, diffValue(changes[field].Removed), diffValue(changes[field].Added))
	}
	return tw.Flush()
}

func diffValue(v any) string {
	switch v := v.(type) {
	case nil:
		return "-"
	case string:
		return v
	case []any:
		parts := make([]string, len(v))
		for i, p := range v {
			parts[i] = fmt.Sprint(p)
		}
		return strings.Join(parts, ", ")
	}
	return fmt.Sprint(v)
}

func joinPairs(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ", ")
}
