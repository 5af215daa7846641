package docscheck

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestLinksAndAnchors(t *testing.T) {
	md := "# Key rotation\n\n## Stored record format and `gantry check -upgrade`\n\n## A (frozen) member\n\n## A (frozen) member\n\n" +
		"See [a](#key-rotation), [b](other.md#x-y), [c](https://example.com/a#b), `[d](skipped.md)`.\n\n" +
		"```sh\necho [e](not-a-link.md)\n```\n\n[f]: ../SECURITY.md\n<a id=\"kept\"></a>\n"
	links := Links([]byte(md))
	want := []Link{{Line: 9, Anchor: "key-rotation"}, {Line: 9, File: "other.md", Anchor: "x-y"}, {Line: 15, File: "../SECURITY.md"}}
	if !reflect.DeepEqual(links, want) {
		t.Errorf("Links:\n got %+v\nwant %+v", links, want)
	}
	anchors := Anchors([]byte(md))
	for _, a := range []string{"key-rotation", "stored-record-format-and-gantry-check--upgrade", "a-frozen-member", "a-frozen-member-1", "kept"} {
		if !anchors[a] {
			t.Errorf("anchor %q missing from %v", a, anchors)
		}
	}
}

// TestDocLinks checks that every relative link of README.md, SECURITY.md, CONTRIBUTING.md and
// docs/*.md names a file that exists and, for a Markdown file, an anchor it has.
func TestDocLinks(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	files := []string{filepath.Join(root, "README.md"), filepath.Join(root, "SECURITY.md"), filepath.Join(root, "CONTRIBUTING.md")}
	files = append(files, docs...)
	anchorsOf := map[string]map[string]bool{}
	anchors := func(path string) map[string]bool {
		if a, ok := anchorsOf[path]; ok {
			return a
		}
		md, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		anchorsOf[path] = Anchors(md)
		return anchorsOf[path]
	}
	for _, file := range files {
		md, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, file)
		for _, l := range Links(md) {
			target := file
			if l.File != "" {
				target = filepath.Join(filepath.Dir(file), filepath.FromSlash(l.File))
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s:%d: link to %s: no such file", rel, l.Line, l.File)
					continue
				}
			}
			if l.Anchor != "" && strings.HasSuffix(target, ".md") && !anchors(target)[l.Anchor] {
				t.Errorf("%s:%d: link to %s#%s: no such heading", rel, l.Line, l.File, l.Anchor)
			}
		}
	}
}
