package secretfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckPrivate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	if err := os.WriteFile(path, []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckPrivate(path); err != nil {
		t.Errorf("0600: %v", err)
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if err := CheckPrivate(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("mode %04o: %v", mode, err)
		}
	}
	if err := CheckPrivate(dir); err == nil {
		t.Error("a folder passed")
	}
	if err := CheckPrivate(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("missing file: %v", err)
	}
}

func TestWriteNew(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	write := func(s string) func(io.Writer) error {
		return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
	}
	if err := WriteNew(path, write("first")); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "first" {
		t.Fatalf("content %q, %v", got, err)
	}
	if err := CheckPrivate(path); err != nil {
		t.Errorf("mode: %v", err)
	}
	if err := WriteNew(path, write("second")); !errors.Is(err, fs.ErrExist) {
		t.Errorf("over an existing file: %v, want fs.ErrExist", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "first" {
		t.Errorf("the existing file was replaced: %q", got)
	}
	failed := filepath.Join(dir, "failed")
	if err := WriteNew(failed, func(io.Writer) error { return errors.New("boom") }); err == nil {
		t.Error("a failing write succeeded")
	}
	if _, err := os.Stat(failed); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a failed write left the file: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d entries in the folder, want 1: a temporary file left behind", len(entries))
	}
}
