package secrets

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzCheckName: any name is either refused (a 400) or printable, valid UTF-8 of at most 1024 bytes.
func FuzzCheckName(f *testing.F) {
	for _, seed := range []string{"orders-db", "a\x00b", "line\nbreak", "\u0085", "tab\there", " ", "\xff", strings.Repeat("n", 1025), "名前"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if err := checkName(name); err != nil {
			if _, ok := err.(*invalidError); !ok {
				t.Fatalf("checkName(%q) = %v, want an invalid-input error", name, err)
			}
			return
		}
		if !utf8.ValidString(name) || len(name) > 1024 || strings.ContainsFunc(name, unicode.IsControl) || strings.TrimSpace(name) == "" {
			t.Fatalf("checkName accepted %q", name)
		}
	})
}
