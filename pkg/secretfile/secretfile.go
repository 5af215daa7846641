// Package secretfile checks a file that holds key material before gantry trusts it: a key that other
// users of the machine can read may already be copied, so gantry refuses to start on it rather than
// use it (fail closed), and says how to fix it.
package secretfile

import (
	"fmt"
	"os"
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
