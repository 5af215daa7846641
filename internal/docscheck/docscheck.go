// Package docscheck finds the shell examples of gantry's Markdown documentation and turns each file's
// examples into one bash script, so that `make docs-check` can run them, in order, against a fresh
// stack and name the file and line of the first command that fails.
//
// Which blocks run: every fenced block whose info string is sh, bash or console. A console block
// runs only its "$ " lines (the rest is output). A block preceded by the comment
//
//	<!-- docs-check: skip (why) -->
//
// (blank lines between are allowed) is not run; the reason is required. Skips are for what cannot run
// against a local stack in a test (Docker, the full test suite, a long-running server); the same
// commands must then run elsewhere in CI.
//
// TestDocLinks, which runs in every go test, checks that each relative link and #anchor of README.md,
// SECURITY.md, CONTRIBUTING.md and docs/*.md names a file and a heading that exist.
package docscheck

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strings"
)

// Block is one fenced shell block of a Markdown file.
type Block struct {
	// Line is the line number of the block's first line of code (after the fence), 1-based.
	Line int
	// Lang is the fence's info string: sh, bash or console.
	Lang string
	// Code is the block's text, one entry per line.
	Code []string
	// Skip is the reason given by a docs-check skip comment; empty for a block that runs.
	Skip string
}

var (
	shellLangs  = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}
	skipComment = regexp.MustCompile(`^<!--\s*docs-check:\s*skip\s*(?:\((.*)\))?\s*-->$`)
)

// Extract returns the shell blocks of a Markdown document in order. A skip comment without a reason
// or not followed by a shell block is an error: skips must stay deliberate.
func Extract(md []byte) ([]Block, error) {
	var (
		blocks  []Block
		cur     *Block
		fence   string
		skip    string
		skipAt  int
		lineNo  int
		scanner = bufio.NewScanner(bytes.NewReader(md))
	)
	scanner.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for scanner.Scan() {
		lineNo++
		line := scanner.Text()
		trimmed := strings.TrimSpace(line)
		if fence != "" { // inside a fenced block
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, "`~") == "" {
				if cur != nil {
					blocks = append(blocks, *cur)
					cur = nil
				}
				fence = ""
				continue
			}
			if cur != nil {
				cur.Code = append(cur.Code, line)
			}
			continue
		}
		if m := skipComment.FindStringSubmatch(trimmed); m != nil {
			if strings.TrimSpace(m[1]) == "" {
				return nil, fmt.Errorf("line %d: a docs-check skip needs a reason: <!-- docs-check: skip (why) -->", lineNo)
			}
			skip, skipAt = strings.TrimSpace(m[1]), lineNo
			continue
		}
		if f := fenceOf(trimmed); f != "" {
			fence = f
			lang := strings.Fields(strings.TrimLeft(trimmed, "`~") + " ")
			if len(lang) > 0 && shellLangs[lang[0]] {
				cur = &Block{Line: lineNo + 1, Lang: lang[0], Skip: skip}
			} else if skip != "" {
				return nil, fmt.Errorf("line %d: the docs-check skip is not followed by a shell block", skipAt)
			}
			skip = ""
			continue
		}
		if trimmed != "" && skip != "" {
			return nil, fmt.Errorf("line %d: the docs-check skip is not followed by a shell block", skipAt)
		}
	}
	if err := scanner.Err(); err != nil {
		return nil, err
	}
	if fence != "" {
		return nil, fmt.Errorf("unterminated code fence %s", fence)
	}
	if skip != "" {
		return nil, fmt.Errorf("line %d: the docs-check skip is not followed by a shell block", skipAt)
	}
	return blocks, nil
}

// fenceOf returns the fence a line opens (``` or ~~~, possibly longer), or "".
func fenceOf(line string) string {
	for _, c := range []string{"`", "~"} {
		n := len(line) - len(strings.TrimLeft(line, c))
		if n >= 3 {
			return strings.Repeat(c, n)
		}
	}
	return ""
}

// commands returns the lines of a block to run, each with its Markdown line number: console blocks
// keep only their "$ " lines, without the prompt.
func (b Block) commands() (lines []string, mdLines []int) {
	for i, l := range b.Code {
		if b.Lang == "console" {
			rest, ok := strings.CutPrefix(strings.TrimLeft(l, " "), "$ ")
			if !ok {
				continue
			}
			l = rest
		}
		lines = append(lines, l)
		mdLines = append(mdLines, b.Line+i)
	}
	return lines, mdLines
}

// Script is a bash script of one file's runnable blocks.
type Script struct {
	Text string
	// MDLine maps a script line (1-based) to the Markdown line it came from; 0 for prelude lines.
	MDLine []int
	// BlockLines are the Markdown lines of the blocks' first lines, in the order they run.
	BlockLines []int
}

// BlockMarker starts the output of each block on stdout, followed by the block's Markdown line, so
// the output of the failing block can be shown alone.
const BlockMarker = "\x1edocs-check block "

// prelude makes the examples strict and curl honest. A curl that fails on an HTTP error status is
// what a reader would notice: docs-check adds --fail-with-body, except to a curl with -i (--include),
// which prints the status line because the example shows an error answer on purpose. -sS hides the
// progress meter and keeps errors. The wrapper returns curl's status rather than failing inside
// itself, so the ERR trap names the example's line, not the wrapper's.
const prelude = `set -Eeuo pipefail
trap 'echo "$LINENO $?" >> "$DOCSCHECK_FAILURES"' ERR
curl() {
  local status=0
  case " $* " in
    *" -i "*|*" --include "*) command curl -sS "$@" || status=$? ;;
    *) command curl -sS --fail-with-body "$@" || status=$? ;;
  esac
  return $status
}
`

// BuildScript joins the runnable blocks of a file into one script, rewriting each address of the
// default local stack to the one the check started: rewrite maps "localhost:8080" and the like to
// the real addresses.
func BuildScript(blocks []Block, rewrite *strings.Replacer) Script {
	var sb strings.Builder
	s := Script{}
	add := func(line string, md int) {
		sb.WriteString(line)
		sb.WriteByte('\n')
		s.MDLine = append(s.MDLine, md)
	}
	for _, l := range strings.Split(strings.TrimSuffix(prelude, "\n"), "\n") {
		add(l, 0)
	}
	for _, b := range blocks {
		if b.Skip != "" {
			continue
		}
		lines, mdLines := b.commands()
		if len(lines) == 0 {
			continue
		}
		s.BlockLines = append(s.BlockLines, b.Line)
		add(fmt.Sprintf(`printf '\036docs-check block %d\n'`, b.Line), b.Line)
		for i, l := range lines {
			add(rewrite.Replace(l), mdLines[i])
		}
	}
	s.Text = sb.String()
	return s
}
