// Command importorder checks the import blocks of Go files against the tree's rule (make lint):
// at most three groups, in this order and separated by a blank line: the standard library,
// third-party modules, and gantry's own packages (github.com/gantry-dev/gantry/..., the proto/
// module included). gofmt sorts within a group but cannot know the groups, and goimports puts a
// misplaced import wherever it fits. Generated files (a "Code generated ... DO NOT EDIT." header)
// are skipped. Each offence is printed as file:line; the exit status is 1 when there is one.
//
// Usage: go run ./scripts/importorder [-local prefix] file.go|dir ...
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// class is the group an import belongs in; groups must come in increasing order of class.
type class int

const (
	standard class = iota
	thirdParty
	local
)

func (c class) String() string {
	return [...]string{"standard library", "third-party", "gantry"}[c]
}

func main() {
	localPrefix := flag.String("local", "github.com/gantry-dev/gantry", "import path prefix of this repository's own packages")
	flag.Parse()
	files, err := goFiles(flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "importorder:", err)
		os.Exit(2)
	}
	bad := 0
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "importorder:", err)
			os.Exit(2)
		}
		offences, err := check(path, src, *localPrefix)
		if err != nil {
			fmt.Fprintln(os.Stderr, "importorder:", err)
			os.Exit(2)
		}
		for _, o := range offences {
			fmt.Println(o)
		}
		bad += len(offences)
	}
	if bad > 0 {
		fmt.Fprintf(os.Stderr, "importorder: %d import(s) out of place: standard library, then third-party, then %s/..., one blank line between the groups\n", bad, *localPrefix)
		os.Exit(1)
	}
}

// goFiles expands the arguments: a file is itself, a folder every .go file beneath it, leaving out
// hidden folders, testdata and vendor.
func goFiles(args []string) ([]string, error) {
	var files []string
	for _, arg := range args {
		info, err := os.Stat(arg)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			files = append(files, arg)
			continue
		}
		err = filepath.WalkDir(arg, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			name := d.Name()
			if d.IsDir() {
				if path != arg && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
					return filepath.SkipDir
				}
				return nil
			}
			if strings.HasSuffix(name, ".go") {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}

// check returns the offences of one file as "file:line: why".
func check(path string, src []byte, localPrefix string) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ImportsOnly|parser.ParseComments)
	if err != nil {
		return nil, err
	}
	if ast.IsGenerated(f) {
		return nil, nil
	}
	lines := strings.Split(string(src), "\n")
	var offences []string
	var prevEnd int      // last line of the previous import, 0 before the first
	var groupClass class // class of the current group
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.IMPORT {
			continue
		}
		for i, spec := range gen.Specs {
			imp := spec.(*ast.ImportSpec)
			importPath, err := strconv.Unquote(imp.Path.Value)
			if err != nil || importPath == "C" {
				continue
			}
			c := classify(importPath, localPrefix)
			start := fset.Position(imp.Pos()).Line
			if imp.Doc != nil {
				start = fset.Position(imp.Doc.Pos()).Line
			}
			newGroup := prevEnd == 0 || i == 0 || blankBetween(lines, prevEnd, start)
			at := fmt.Sprintf("%s:%d", path, fset.Position(imp.Path.Pos()).Line)
			switch {
			case newGroup && c <= groupClass && prevEnd != 0:
				offences = append(offences, fmt.Sprintf("%s: %q starts a %s group after a %s group", at, importPath, c, groupClass))
			case newGroup:
			case c != groupClass:
				offences = append(offences, fmt.Sprintf("%s: %q (%s) in a group of %s imports", at, importPath, c, groupClass))
			}
			if newGroup {
				groupClass = c
			}
			prevEnd = fset.Position(imp.End()).Line
		}
	}
	return offences, nil
}

// classify puts an import path in its group: the standard library's paths have no dot in their
// first element (golang.org/x/... is third-party).
func classify(importPath, localPrefix string) class {
	switch first, _, _ := strings.Cut(importPath, "/"); {
	case importPath == localPrefix || strings.HasPrefix(importPath, localPrefix+"/"):
		return local
	case !strings.Contains(first, "."):
		return standard
	default:
		return thirdParty
	}
}

// blankBetween reports whether a blank line separates line after from line before (1-based).
func blankBetween(lines []string, after, before int) bool {
	for n := after + 1; n < before && n <= len(lines); n++ {
		if strings.TrimSpace(lines[n-1]) == "" {
			return true
		}
	}
	return false
}
