package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/internal/stack"
)

// The docs check reads README.md, SECURITY.md, CONTRIBUTING.md and every docs/*.md (a file added
// later is read too) and fails on a flag that no gantry command has. To stay clear of other tools'
// flags (curl -u, jq -r, go test -race, docker --rm, helm --set, kubectl -n gantry) it looks at two
// places only:
//
//   - a command that runs gantry, in a fenced block or a code span: "gantry COMMAND" with COMMAND
//     one of gantry's and followed by a blank (so "gantry serve: unknown flag -x", gantry's own
//     output, is none), or "gantry -flag" (the server) where gantry starts the
//     command (the line, after $(, (, |, ;, && or VAR=value). Its flags run up to the end of the
//     command: a pipe, ;, &, a closing parenthesis, " -- " (what follows is another program's) or the
//     end of the line; a line ending in a backslash goes on, and a $(...) inside is a command of its
//     own;
//   - a code span holding nothing but one flag spelled with one dash, as gantry's docs spell theirs
//     ("`-tls-cert-file`", "`-store=etcd`", "`-addr URL`"), whose name has a dash and starts with the
//     first word of some gantry flag (tls, etcd, chat, data...). Lone flags of other tools that fit
//     this shape are listed in otherToolsFlags.
//
// Either spelling, -flag or --flag, passes in a gantry command (Go's flag package takes both); the
// name must be a flag of some command (the union of every command's -h, serve's whole table
// included).

var (
	fence        = regexp.MustCompile("^\\s*```")
	codeSpan     = regexp.MustCompile("`([^`\n]+)`")
	gantryWord   = regexp.MustCompile(`(^|[\s("'=/])gantry\s+(-?)([a-z][a-z-]*)`)
	commandEnd   = regexp.MustCompile(`[|;&)]| -- `)
	substitution = regexp.MustCompile(`\$\([^)]*\)`)
	flagWord     = regexp.MustCompile(`(?:^|\s)--?([a-z][a-z0-9]*(?:-[a-z0-9]+)*)(?:[=\s]|$)`)
	loneFlagSpan = regexp.MustCompile(`^-([a-z][a-z0-9]*(?:-[a-z0-9]+)+)(?:[= ].*)?$`)
	envAssign    = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=\S*$`)
)

// otherToolsFlags are flags of other tools that the docs name alone in a code span and that look
// like gantry's: the import benchmark's go test flag.
var otherToolsFlags = []string{"kms-latency"}

// documentedFlag is a flag named in a document, with where.
type documentedFlag struct {
	file string
	line int
	name string
	text string
}

// flagsInDocument finds the gantry flags a markdown document names (the rule above); commandNames
// are gantry's commands, firstWords the first words of its flags.
func flagsInDocument(file, text string, commandNames, firstWords map[string]bool) []documentedFlag {
	var found []documentedFlag
	inFence := false
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		line, number := lines[i], i+1
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		var commands []string
		if inFence {
			for strings.HasSuffix(strings.TrimSpace(line), "\\") && i+1 < len(lines) {
				i++
				line = strings.TrimSuffix(strings.TrimSpace(line), "\\") + " " + lines[i]
			}
			commands = append(commands, line)
		} else {
			for _, span := range codeSpan.FindAllStringSubmatch(line, -1) {
				commands = append(commands, span[1])
				m := loneFlagSpan.FindStringSubmatch(span[1])
				if m != nil && firstWords[strings.SplitN(m[1], "-", 2)[0]] && !slices.Contains(otherToolsFlags, m[1]) {
					found = append(found, documentedFlag{file, number, m[1], span[0]})
				}
			}
		}
		for _, command := range commands {
			for _, run := range gantryRuns(command, commandNames) {
				for _, f := range flagWord.FindAllStringSubmatch(run, -1) {
					found = append(found, documentedFlag{file, number, f[1], strings.TrimSpace(run)})
				}
			}
		}
	}
	return found
}

// gantryRuns returns, for each gantry command in text, what follows "gantry [COMMAND]" up to the end
// of that command.
func gantryRuns(text string, commandNames map[string]bool) []string {
	var runs []string
	for _, sub := range substitution.FindAllString(text, -1) {
		runs = append(runs, gantryRuns(sub[2:len(sub)-1], commandNames)...)
	}
	text = substitution.ReplaceAllString(text, "")
	for _, m := range gantryWord.FindAllStringSubmatchIndex(text, -1) {
		before, dash, word := text[:m[2]]+text[m[2]:m[3]], text[m[4]:m[5]], text[m[6]:m[7]]
		if next := text[m[7]:]; dash == "" && next != "" && !strings.ContainsAny(next[:1], " \t\"'`") {
			continue // "gantry serve: unknown flag -x" is gantry's output, not a command
		}
		var rest string
		switch {
		case dash == "" && commandNames[word]:
			rest = text[m[7]:]
		case dash == "-" && startsCommand(before):
			rest = text[m[4]:]
		default:
			continue
		}
		if end := commandEnd.FindStringIndex(rest); end != nil {
			rest = rest[:end[0]]
		}
		runs = append(runs, rest)
	}
	return runs
}

// startsCommand reports whether text, what precedes a word, leaves that word at the start of a
// command: nothing, a prompt, a subshell, a pipe or list operator, or variable assignments.
func startsCommand(text string) bool {
	fields := strings.Fields(text)
	for len(fields) > 0 && envAssign.MatchString(fields[len(fields)-1]) {
		fields = fields[:len(fields)-1]
	}
	if len(fields) == 0 {
		return true
	}
	last := fields[len(fields)-1]
	return slices.Contains([]string{"$", "(", "$(", "|", ";", "&&", "||", "exec"}, last) || strings.HasSuffix(last, "(")
}

// allGantryFlags is every flag of every command: the flags each -h lists, serve's table included.
func allGantryFlags(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{"h": true, "help": true}
	cfg := stack.DefaultConfig()
	for _, s := range cfg.Settings().Settings() {
		known[s.Name] = true
	}
	helps := [][]string{{"keyring", "create", "-h"}, {"keyring", "list", "-h"}, {"keyring", "rotate", "-h"}, {"keyring", "activate", "-h"},
		{"keyring", "rewrap", "-h"}, {"keyring", "retire", "-h"}, {"keyring", "restore", "-h"}, {"keyring", "destroy", "-h"},
		{"queue", "list", "-h"}, {"tls", "init", "-h"}, {"import", "confidant", "-h"}}
	for _, c := range commands() {
		helps = append(helps, []string{c.name, "-h"})
		if c.name == "creds" || c.name == "services" || c.name == "changes" || c.name == "certs" {
			for _, a := range groupActions(c.name) {
				helps = append(helps, []string{c.name, a, "-h"})
			}
		}
	}
	for _, args := range helps {
		var out bytes.Buffer
		if code := dispatch(args, &out, &bytes.Buffer{}); code != 0 {
			t.Fatalf("gantry %v: exit %d", args, code)
		}
		for _, m := range helpFlag.FindAllStringSubmatch(out.String(), -1) {
			known[m[1]] = true
		}
	}
	return known
}

// TestDocumentedFlagsExist: every gantry flag the documents name is a flag of some command.
func TestDocumentedFlagsExist(t *testing.T) {
	known := allGantryFlags(t)
	firstWords, commandNames := map[string]bool{}, map[string]bool{}
	for name := range known {
		firstWords[strings.SplitN(name, "-", 2)[0]] = true
	}
	for _, c := range commands() {
		commandNames[c.name] = true
	}
	root := filepath.Join("..", "..")
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := append([]string{filepath.Join(root, "README.md"), filepath.Join(root, "SECURITY.md"), filepath.Join(root, "CONTRIBUTING.md")}, docs...)
	checked := 0
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, path)
		for _, f := range flagsInDocument(filepath.ToSlash(rel), string(data), commandNames, firstWords) {
			checked++
			if !known[f.name] {
				t.Errorf("%s:%d names -%s, which no gantry command has (in %q)", f.file, f.line, f.name, f.text)
			}
		}
	}
	if checked < 100 {
		t.Errorf("only %d flags found in the documents: the scan has gone blind", checked)
	}
}

// TestFlagsInDocumentRule: what the docs check counts as a gantry flag, and what it leaves to other
// tools.
func TestFlagsInDocumentRule(t *testing.T) {
	words := map[string]bool{"tls": true, "gateway": true, "data": true, "kms": true}
	commandNames := map[string]bool{"serve": true, "token": true, "check": true, "env": true}
	doc := "Run `gantry serve -gateway-tls-cert x` or `-tls-cert-file`, not `--data-binary`.\n" +
		"```sh\ncurl -u \"2/user/a:$(gantry token --from alice -user-type user)\" --data-binary @x localhost\n" +
		"gantry check \\\n  -data-dir \"$(mktemp -d)\" | jq -r .x\ngo test -race ./... -kms-latency 5ms\n" +
		"GANTRY_KMS=aws gantry -tls-key-file=k\ngantry serve: unknown flag -tls-crt\nkubectl -n gantry exec pod -c secrets -- /gantry check -store etcd\n" +
		"helm install gantry ./charts/gantry -n gantry --create-namespace\ngantry env -service s -- sh -c 'x'\n```\n" +
		"Prose `-race`, `--rm`, `-kms-latency 20ms`, `-etcd PATH` and `kubectl -n gantry get pods -o yaml` are other tools'.\n"
	var got []string
	for _, f := range flagsInDocument("x.md", doc, commandNames, words) {
		got = append(got, f.name)
	}
	slices.Sort(got)
	want := []string{"data-dir", "from", "gateway-tls-cert", "service", "store", "tls-cert-file", "tls-key-file", "user-type"}
	if !slices.Equal(got, want) {
		t.Errorf("found %q, want %q", got, want)
	}
}

// groupActions names the actions of a command group.
func groupActions(group string) []string {
	actions := map[string]func() []subcommand{"creds": credsActions, "services": servicesActions, "changes": changesActions, "certs": certsActions}[group]()
	names := make([]string, len(actions))
	for i, a := range actions {
		names[i] = a.name
	}
	return names
}
