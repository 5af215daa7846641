// Command gendocs writes the reference part of docs/configuration.md from the settings table, below
// the hand-written introduction (everything above settings.GeneratedMarker is kept). With -check it
// writes nothing and fails when the file is not what it would write (make check-docs-config).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/settings"
)

func main() {
	path := flag.String("file", "docs/configuration.md", "the file to update")
	check := flag.Bool("check", false, "fail when the file is stale instead of writing it")
	flag.Parse()
	if err := run(*path, *check); err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
}

func run(path string, check bool) error {
	current, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	intro, _, found := strings.Cut(string(current), settings.GeneratedMarker)
	if !found {
		return fmt.Errorf("%s has no marker line %q: add it below the introduction", path, settings.GeneratedMarker)
	}
	cfg := stack.DefaultConfig()
	var out bytes.Buffer
	out.WriteString(intro)
	cfg.Settings().WriteMarkdown(&out)
	if bytes.Equal(out.Bytes(), current) {
		return nil
	}
	if check {
		return fmt.Errorf("%s is stale: run go run ./scripts/gendocs (or make docs-config) and commit it", path)
	}
	return os.WriteFile(path, out.Bytes(), 0o644)
}
