// Package settings is gantry's one table of settings. Each package declares its settings next to its
// Config (a flag name, the GANTRY_* variable derived from it, the Confidant or Omnibot names it also
// answers to, a group, a description and a Value pointing into the Config); the process merges them
// into a Table, which registers the flags, reads the environment, names a bad setting the way the user
// wrote it, prints -h and generates docs/configuration.md. Nothing else in gantry reads the
// environment, so a setting missing from the table cannot exist. A Config's Validate reports a bad
// value with Invalid (or CheckHostPort), by flag name; Table.Explain names it as the user set it.
//
// A setting's value comes from the first of: its flag, its GANTRY_* variable, its legacy names in the
// order declared, the Config's default.
package settings

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Setting is one plain setting: a flag and its environment variables.
type Setting struct {
	// Name is the flag name (-name); the variable is GANTRY_<NAME> with dashes as underscores.
	Name string
	// Legacy are further variables read when neither the flag nor the GANTRY_* variable is set, the
	// first set one winning: Confidant's and Omnibot's names, so their env files keep working.
	Legacy []string
	// Group is the part of gantry the setting belongs to; -h and the docs list settings by group.
	Group string
	// Usage says what the setting does, in one line.
	Usage string
	// Value parses into the Config and shows the default.
	Value Value
	// Secret settings never show their value: a default or dump shows "(set)".
	Secret bool
	// Default replaces the shown default when the Config's zero value stands for something computed
	// at start (e.g. "<data-dir>/tls") or depends on the machine.
	Default string
}

// Env is the setting's GANTRY_* variable.
func (s Setting) Env() string { return EnvName(Prefix, s.Name) }

// EnvNames are every variable the setting is read from, in order of precedence.
func (s Setting) EnvNames() []string { return append([]string{s.Env()}, s.Legacy...) }

// Family is a set of variables with an instance name in them, such as the per-CA
// ACM_PRIVATE_CA_ARN_<CA> or Omnibot's per-app CREDENTIALS_SLACK_OAUTH_BOT_TOKEN_<APP>. Families have
// no flags.
type Family struct {
	// Pattern is the variable name with the instance as a <PLACEHOLDER> at the end.
	Pattern string
	Group   string
	Usage   string
	// Kind names the accepted syntax (string, int, bool...).
	Kind   string
	Secret bool
	// Instances lists the instance names once the plain settings are loaded (the CA names); nil means
	// the owner reads the variables on demand with Getenv (the Slack apps of a configuration file).
	Instances func() []string
	// Set stores the value of one instance.
	Set func(instance, value string) error
}

// prefix is the pattern without its placeholder.
func (f Family) prefix() string {
	if i := strings.IndexByte(f.Pattern, '<'); i >= 0 {
		return f.Pattern[:i]
	}
	return f.Pattern
}

// EnvNames are the variables of one instance: the name upper-cased, and, when the name holds
// characters a shell cannot put in a variable (my-ca), the same with those turned into "_".
func (f Family) EnvNames(instance string) []string {
	upper := strings.ToUpper(instance)
	safe := strings.Map(func(r rune) rune {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') || r == '_' {
			return r
		}
		return '_'
	}, upper)
	if safe == upper {
		return []string{f.prefix() + upper}
	}
	return []string{f.prefix() + upper, f.prefix() + safe}
}

// Table is the merged table of one process. Build it with New from a Config holding its defaults.
type Table struct {
	settings []Setting
	families []Family
	byName   map[string]int
	// defaults are the shown defaults, captured before anything is loaded.
	defaults map[string]string
	// flags holds what the command line gave, parsed by Load like the environment so both share one
	// error style.
	flags map[string]*rawFlag
	// sources names, for each setting or family variable that was set, how the user wrote it.
	sources map[string]string
	// familyValues keeps what each family variable was set to, for Changed.
	familyValues map[string]string
}

// Part is what one package contributes to the table.
type Part struct {
	Settings []Setting
	Families []Family
}

// New merges parts into a table and records the current values as the defaults. It panics on a
// name declared twice: that is a programming error the tests catch.
func New(parts ...Part) *Table {
	t := &Table{byName: map[string]int{}, defaults: map[string]string{}, flags: map[string]*rawFlag{}, sources: map[string]string{}, familyValues: map[string]string{}}
	for _, p := range parts {
		for _, s := range p.Settings {
			if _, dup := t.byName[s.Name]; dup {
				panic("settings: " + s.Name + " declared twice")
			}
			t.byName[s.Name] = len(t.settings)
			t.settings = append(t.settings, s)
			t.defaults[s.Name] = shown(s.Secret, s.Default, s.Value.String())
		}
		t.families = append(t.families, p.Families...)
	}
	return t
}

// shown is a value as -h, the docs and dumps may show it.
func shown(secret bool, override, value string) string {
	switch {
	case override != "":
		return override
	case secret && value != "":
		return "(set)"
	}
	return value
}

// Settings returns the plain settings in declaration order.
func (t *Table) Settings() []Setting { return slices.Clone(t.settings) }

// Families returns the families in declaration order.
func (t *Table) Families() []Family { return slices.Clone(t.families) }

// Default is the shown default of a setting ("(set)" for a secret with a default).
func (t *Table) Default(name string) string { return t.defaults[name] }

// Reads reports whether the table reads the variable: a setting's GANTRY_* or legacy name, or a
// member of a family.
func (t *Table) Reads(env string) bool {
	for _, s := range t.settings {
		if slices.Contains(s.EnvNames(), env) {
			return true
		}
	}
	for _, f := range t.families {
		if p := f.prefix(); env == f.Pattern || (strings.HasPrefix(env, p) && len(env) > len(p)) {
			return true
		}
	}
	return false
}

// rawFlag keeps the text of a flag for Load, which parses it like a variable: a bad flag then gets
// the same one-line message as a bad variable instead of the flag package's error and full usage.
type rawFlag struct {
	text   string
	given  bool
	isBool bool
	shown  string
	kind   string
	env    []string
}

func (f *rawFlag) Set(s string) error { f.text, f.given = s, true; return nil }
func (f *rawFlag) String() string {
	if f == nil {
		return ""
	}
	return f.shown
}
func (f *rawFlag) IsBoolFlag() bool { return f.isBool }

// Kind names the syntax the flag accepts (string, duration, list...), for a command's flag list.
func (f *rawFlag) Kind() string { return f.kind }

// EnvNames are the variables the flag's setting is also read from, for a command's flag list.
func (f *rawFlag) EnvNames() []string { return f.env }

// Register declares every setting as a flag of fs and makes -h print the table (PrintUsage).
func (t *Table) Register(fs *flag.FlagSet) {
	t.AddFlags(fs)
	fs.Usage = func() { t.PrintUsage(fs.Output(), fs.Name()) }
}

// AddFlags declares every setting as a flag of fs and leaves fs's usage alone: a command that takes
// a few of serve's settings (Select) lists them among its own flags. Each flag's Value also has
// Kind() string and EnvNames() []string for that list.
func (t *Table) AddFlags(fs *flag.FlagSet) {
	for _, s := range t.settings {
		raw := &rawFlag{shown: t.defaults[s.Name], kind: s.Value.Kind(), env: s.EnvNames()}
		if b, ok := s.Value.(boolValue); ok {
			raw.isBool = b.IsBoolFlag()
		}
		t.flags[s.Name] = raw
		fs.Var(raw, s.Name, s.Usage)
	}
}

// Select is a table of the settings that patterns name, each a setting's name or a prefix ending in
// "*" ("etcd-*"), in t's order. The settings keep their Values, so loading the selection fills the
// same Config: an operator's command (gantry check, backup, queue) takes exactly serve's flags and
// variables for the settings it needs. A pattern naming nothing panics, a programming error the
// tests catch.
func (t *Table) Select(patterns ...string) *Table {
	var picked []Setting
	for _, p := range patterns {
		n := 0
		for _, s := range t.settings {
			if matches(p, s.Name) && !slices.ContainsFunc(picked, func(q Setting) bool { return q.Name == s.Name }) {
				picked = append(picked, s)
				n++
			}
		}
		if n == 0 {
			panic("settings: Select(" + p + ") names no setting")
		}
	}
	slices.SortStableFunc(picked, func(a, b Setting) int { return t.byName[a.Name] - t.byName[b.Name] })
	sub := New(Part{Settings: picked})
	for _, s := range picked {
		sub.defaults[s.Name] = t.defaults[s.Name]
	}
	return sub
}

func matches(pattern, name string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(name, prefix)
	}
	return pattern == name
}

// Lookup reads one variable; os.LookupEnv in production, a map in tests.
type Lookup func(name string) (string, bool)

// Environment is the process environment.
func Environment(name string) (string, bool) { return os.LookupEnv(name) }

// Getenv reads one member of a family declared with Instances == nil, whose instance names are only
// known later (the Slack apps of the chat configuration file). Plain settings are read by Load.
func Getenv(name string) string { return os.Getenv(name) }

// MapLookup reads variables from a map (tests).
func MapLookup(env map[string]string) Lookup {
	return func(name string) (string, bool) { v, ok := env[name]; return v, ok }
}

// Error is a bad value, naming the setting the way the user gave it: "-kms (flag)",
// "KMS_MASTER_KEY (env)", or its flag and variables when the default is at fault.
type Error struct {
	Setting string
	Err     error
}

func (e *Error) Error() string { return e.Setting + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Load sets every setting from its flag (after fs.Parse of a set Register filled), else its first set
// variable; then the families. The first bad value is an *Error.
func (t *Table) Load(lookup Lookup) error {
	for _, s := range t.settings {
		if raw := t.flags[s.Name]; raw != nil && raw.given {
			if err := t.set(s.Name, "-"+s.Name+" (flag)", raw.text, s.Value.Set); err != nil {
				return err
			}
			continue
		}
		for _, env := range s.EnvNames() {
			if v, ok := lookup(env); ok {
				if err := t.set(s.Name, env+" (env)", v, s.Value.Set); err != nil {
					return err
				}
				break
			}
		}
	}
	for _, f := range t.families {
		if f.Instances == nil {
			continue
		}
		for _, instance := range f.Instances() {
			for _, env := range f.EnvNames(instance) {
				if v, ok := lookup(env); ok {
					t.familyValues[env] = v
					set := func(v string) error { return f.Set(instance, v) }
					if err := t.set(env, env+" (env)", v, set); err != nil {
						return err
					}
					break
				}
			}
		}
	}
	return nil
}

func (t *Table) set(key, source, text string, set func(string) error) error {
	t.sources[key] = source
	if err := set(text); err != nil {
		return &Error{Setting: source, Err: err}
	}
	return nil
}

// Parse is Register, fs.Parse(args) and Load on a fresh flag set that prints nothing: for tests and
// callers that do not need -h.
func (t *Table) Parse(args []string, lookup Lookup) error {
	fs := flag.NewFlagSet("gantry", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	t.Register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	return t.Load(lookup)
}

// Explain rewrites a validation error naming a setting (SettingError, by flag name or family
// variable) into an *Error naming it as the user set it, or by all its names when it kept its default;
// other errors pass unchanged.
func (t *Table) Explain(err error) error {
	var se *SettingError
	if err == nil || !errors.As(err, &se) || err.Error() != se.Error() {
		return err
	}
	if source, ok := t.sources[se.Flag]; ok {
		return &Error{Setting: source, Err: se.Err}
	}
	if i, ok := t.byName[se.Flag]; ok {
		s := t.settings[i]
		return &Error{Setting: "-" + s.Name + " / " + strings.Join(s.EnvNames(), " / ") + " (default)", Err: se.Err}
	}
	return &Error{Setting: se.Flag + " (default)", Err: se.Err}
}

// Source is how the user set a setting ("-kms (flag)", "KMS_MASTER_KEY (env)"), or "" when it has its
// default.
func (t *Table) Source(name string) string { return t.sources[name] }

// Changed lists the settings and family variables given by flag or environment, as "source=value"
// with secrets shown as "(set)": what a startup log may print.
func (t *Table) Changed() []string {
	var out []string
	for _, s := range t.settings {
		if src := t.sources[s.Name]; src != "" {
			out = append(out, src+"="+shown(s.Secret, "", s.Value.String()))
		}
	}
	for _, f := range t.families {
		if f.Instances == nil {
			continue
		}
		for _, instance := range f.Instances() {
			for _, env := range f.EnvNames(instance) {
				if src := t.sources[env]; src != "" {
					out = append(out, src+"="+shown(f.Secret, "", t.familyValues[env]))
				}
			}
		}
	}
	return out
}

// groups returns the group names in order of first appearance.
func (t *Table) groups() []string {
	var out []string
	for _, s := range t.settings {
		if !slices.Contains(out, s.Group) {
			out = append(out, s.Group)
		}
	}
	for _, f := range t.families {
		if !slices.Contains(out, f.Group) {
			out = append(out, f.Group)
		}
	}
	return out
}

// Precedence is the rule every setting follows, for -h and the docs.
const Precedence = "A setting's value comes from the first of: its flag, its GANTRY_* variable, its Confidant or Omnibot names (in the order listed), the default."

// PrintUsage prints every setting by group with its variables and default (gantry serve -h).
func (t *Table) PrintUsage(w io.Writer, command string) {
	fmt.Fprintf(w, "Usage: %s [flags]\n\n", command)
	t.PrintGroups(w)
}

// PrintGroups prints the precedence rule, then every setting by group with its variables and default:
// the settings part of PrintUsage, for a help that has its own usage line.
func (t *Table) PrintGroups(w io.Writer) {
	fmt.Fprintf(w, "%s\nBooleans of Confidant's names read \"\", false, False and 0 as false, anything else as true.\n", Precedence)
	for _, group := range t.groups() {
		fmt.Fprintf(w, "\n%s:\n", group)
		for _, s := range t.settings {
			if s.Group != group {
				continue
			}
			fmt.Fprintf(w, "  -%s %s\n        %s\n        env %s", s.Name, s.Value.Kind(), s.Usage, strings.Join(s.EnvNames(), ", "))
			if d := t.defaults[s.Name]; d != "" {
				fmt.Fprintf(w, "; default %s", d)
			}
			fmt.Fprintln(w)
		}
		for _, f := range t.families {
			if f.Group == group {
				fmt.Fprintf(w, "  %s %s (environment only)\n        %s\n", f.Pattern, f.Kind, f.Usage)
			}
		}
	}
}
