package docscheck

import (
	"bufio"
	"bytes"
	"regexp"
	"strings"
	"unicode"
)

// Link is a relative link of a Markdown document: a file (possibly empty, for an anchor of the same
// document) and an anchor (possibly empty).
type Link struct {
	// Line is the link's line number, 1-based.
	Line   int
	File   string
	Anchor string
}

var (
	inlineLink    = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	referenceLink = regexp.MustCompile(`^\s*\[[^\]]+\]:\s*(\S+)`)
	codeSpan      = regexp.MustCompile("`+[^`]*`+")
	htmlAnchor    = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	heading       = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// Links returns the relative links of a Markdown document (no scheme: not http, https or mailto),
// outside code blocks and code spans.
func Links(md []byte) []Link {
	var links []Link
	eachProseLine(md, func(n int, line string) {
		line = codeSpan.ReplaceAllString(line, "")
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		if m := referenceLink.FindStringSubmatch(line); m != nil {
			targets = append(targets, m[1])
		}
		for _, t := range targets {
			if strings.Contains(t, ":") && !strings.HasPrefix(t, "#") {
				continue // a scheme: http:, https:, mailto:
			}
			file, anchor, _ := strings.Cut(t, "#")
			links = append(links, Link{Line: n, File: file, Anchor: anchor})
		}
	})
	return links
}

// Anchors returns the anchors a Markdown document defines, as GitHub renders them: one per heading
// (lower case, punctuation dropped, spaces as hyphens, "-1", "-2"... for repeats) and each HTML
// anchor's id or name.
func Anchors(md []byte) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	eachProseLine(md, func(_ int, line string) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			return
		}
		slug := Slug(m[1])
		if n := seen[slug]; n > 0 {
			anchors[slug+"-"+itoa(n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	})
	return anchors
}

// Slug is GitHub's anchor of a heading's text.
func Slug(text string) string {
	// Links and emphasis render as their text.
	text = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func itoa(n int) string {
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// eachProseLine calls f with every line outside fenced code blocks and HTML comments.
func eachProseLine(md []byte, f func(n int, line string)) {
	scanner := bufio.NewScanner(bytes.NewReader(md))
	scanner.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	fence, comment, n := "", false, 0
	for scanner.Scan() {
		n++
		line := scanner.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, "`~") == "" {
				fence = ""
			}
		case comment:
			comment = !strings.Contains(line, "-->")
		case fenceOf(trimmed) != "":
			fence = fenceOf(trimmed)
		case strings.HasPrefix(trimmed, "<!--") && !strings.Contains(trimmed, "-->"):
			comment = true
		default:
			f(n, line)
		}
	}
}
