package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/gantry-dev/gantry/pkg/settings"
)

// helpText is a command's -h, in the one style of every command: a description line, the usage
// lines, what else to know, examples, then the flags as Go's flag package spells them (-flag).
type helpText struct {
	name        string // "gantry check"
	description string
	usage       []string
	details     string
	examples    []string
	// flagsNote replaces the flag list when the flags belong to subcommands (gantry keyring -h).
	flagsNote string
}

// print writes the help with the flags of fs.
func (h helpText) print(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "%s: %s\n\nUsage:\n", h.name, h.description)
	for _, u := range h.usage {
		fmt.Fprintf(w, "  %s\n", u)
	}
	if h.details != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(h.details))
	}
	fmt.Fprintln(w, "\nExamples:")
	for _, e := range h.examples {
		fmt.Fprintf(w, "  %s\n", e)
	}
	fmt.Fprintln(w, "\nFlags:")
	if h.flagsNote != "" {
		fmt.Fprintf(w, "  %s\n", h.flagsNote)
	}
	if fs != nil {
		printFlags(w, fs)
	}
}

// printFlags lists the flags of fs as flag.PrintDefaults does, with the syntax of a setting's flag
// (string, duration, list) and the variables it is also read from.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		setting, fromTable := f.Value.(interface {
			Kind() string
			EnvNames() []string
			IsBoolFlag() bool
		})
		if fromTable {
			kind = setting.Kind()
			if setting.IsBoolFlag() {
				kind = ""
			}
		}
		fmt.Fprintf(w, "  -%s", f.Name)
		if kind != "" {
			fmt.Fprintf(w, " %s", kind)
		}
		fmt.Fprintf(w, "\n    \t%s", strings.ReplaceAll(usage, "\n", "\n    \t"))
		if !zeroDefault(f.DefValue) {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		if fromTable {
			fmt.Fprintf(w, "\n    \tenv %s", strings.Join(setting.EnvNames(), ", "))
		}
		fmt.Fprintln(w)
	})
}

// zeroDefault reports a default not worth showing, as the flag package leaves it out.
func zeroDefault(value string) bool {
	switch value {
	case "", "0", "false", "0s", "[]":
		return true
	}
	return false
}

// parseFlags reads args into fs, then the settings tables from the environment (a flag wins over its
// variable). -h prints help on stdout (exit 0); a bad flag is one line on stderr, with the nearest
// flag when one is close, and a second saying where the flags are (exit 2), never the whole list.
// ok is false when the command should exit with code.
func parseFlags(fs *flag.FlagSet, args []string, help func(io.Writer), stdout, stderr io.Writer, tables ...*settings.Table) (code int, ok bool) {
	silence(fs)
	if err := fs.Parse(args); err != nil {
		return parseFailure(fs, err, help, stdout, stderr), false
	}
	return loadSettings(fs.Name(), stderr, tables...)
}

// silence stops the flag package from printing its error and the whole usage on a bad flag:
// parseFailure says it in two lines.
func silence(fs *flag.FlagSet) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
}

// parseFailure is the exit code of a failed fs.Parse: 0 after printing the help on -h, 2 after one
// line naming the bad flag (and the nearest good one) and one saying where the flags are.
func parseFailure(fs *flag.FlagSet, err error, help func(io.Writer), stdout, stderr io.Writer) int {
	if errors.Is(err, flag.ErrHelp) {
		help(stdout)
		return 0
	}
	msg := err.Error()
	if name, unknown := strings.CutPrefix(msg, "flag provided but not defined: -"); unknown {
		msg = "unknown flag -" + name
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		if near := nearest(name, names); near != "" {
			msg += ": did you mean -" + near + "?"
		}
	}
	fmt.Fprintf(stderr, "%s: %s\n%s\n", fs.Name(), msg, whereTheFlagsAre(fs.Name()))
	return 2
}

// whereTheFlagsAre is the second line of a flag error: the command's -h, and the document that
// lists the same flags.
func whereTheFlagsAre(command string) string {
	if command == "gantry serve" || command == "gantry" {
		return "Run 'gantry serve -h' (or 'gantry help serve') for every flag; docs/configuration.md lists them too."
	}
	return fmt.Sprintf("Run '%s -h' for its flags; docs/cli.md describes the commands.", command)
}

// loadSettings loads each table from the environment; a bad value is one line and exit 2.
func loadSettings(command string, stderr io.Writer, tables ...*settings.Table) (int, bool) {
	for _, t := range tables {
		if err := t.Load(environment); err != nil {
			fmt.Fprintf(stderr, "%s: bad configuration: %v\n", command, err)
			return 2, false
		}
	}
	return 0, true
}
