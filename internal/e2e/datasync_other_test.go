//go:build !linux

package e2e

import "os"

// datasync is fsync where there is no fdatasync.
func datasync(f *os.File) error { return f.Sync() }
