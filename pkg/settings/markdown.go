package settings

import (
	"fmt"
	"io"
	"strings"
)

// GeneratedMarker separates the hand-written introduction of docs/configuration.md from the part
// WriteMarkdown generates; everything below it is replaced.
const GeneratedMarker = "<!-- Everything below is generated from the settings table by `go run ./scripts/gendocs`; edit the declarations, not this file. -->"

// WriteMarkdown writes the reference part of docs/configuration.md: one table per group, then the
// families.
func (t *Table) WriteMarkdown(w io.Writer) {
	fmt.Fprintf(w, "%s\n\n## Every setting\n\nBooleans under Confidant's names read `\"\"`, `false`, `False` and `0` as false and anything else as true; numbers, durations and JSON given as an empty string keep the default.\n", GeneratedMarker)
	for _, group := range t.groups() {
		fmt.Fprintf(w, "\n### %s\n\n| flag | environment | default | meaning |\n|---|---|---|---|\n", group)
		for _, s := range t.settings {
			if s.Group != group {
				continue
			}
			env := make([]string, 0, len(s.EnvNames()))
			for _, e := range s.EnvNames() {
				env = append(env, code(e))
			}
			fmt.Fprintf(w, "| %s %s | %s | %s | %s |\n", code("-"+s.Name), s.Value.Kind(), strings.Join(env, ", "),
				code(t.defaults[s.Name]), cell(s.Usage))
		}
		for _, f := range t.families {
			if f.Group == group {
				fmt.Fprintf(w, "| (environment only) %s | %s | | %s |\n", f.Kind, code(f.Pattern), cell(f.Usage))
			}
		}
	}
}

// code quotes a value for a table cell; empty stays empty.
func code(s string) string {
	if s == "" {
		return ""
	}
	return "`" + strings.ReplaceAll(s, "|", `\|`) + "`"
}

// cell escapes the one character a table cell cannot hold.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
