// Package secretfile checks a file that holds key material before gantry trusts it: a key that other
// users of the machine can read may already be copied, so gantry refuses to start on it rather than
// use it (fail closed), and says how to fix it. It also writes such files (WriteNew) so that no one else
// can read them and a crash never leaves half of one.
package secretfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// CheckPrivate returns an error unless path is a regular file that only its owner can read or write.
func CheckPrivate(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s has mode %04o, which lets group or others read a private key; run chmod 600 %s", path, perm, path)
	}
	return nil
}

// WriteNew creates path as a private file (mode 0600) holding what write writes, atomically: write
// fills a temporary file in the same folder, which is synced, then linked to path (and the folder
// synced), so path is either absent or whole even after a crash, and an existing path is never
// replaced: that fails with an error wrapping fs.ErrExist. The temporary file is removed either way.
func WriteNew(path string, write func(w io.Writer) error) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	// CreateTemp makes the file 0600, which is what path gets.
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// A link, unlike a rename, fails when path exists.
	if err := os.Link(tmp.Name(), path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// SyncDir makes the entries of dir (a new file, link or folder in it) durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
