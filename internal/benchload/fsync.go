package benchload

import (
	"os"
	"path/filepath"
	"time"
)

// FsyncRate is the disk's limit for durable writes in dir, the reference of the write workloads:
// 4 KiB written at the start of a file and fdatasync, one after the other, for d. A store that syncs
// every write alone cannot go faster; group commit goes past it by syncing many writes at once.
// (internal/e2e's BenchmarkFsyncLimit measures the same.)
func FsyncRate(dir string, d time.Duration) (float64, error) {
	f, err := os.CreateTemp(dir, "fsync-limit-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(filepath.Clean(f.Name()))
	defer f.Close()
	block := make([]byte, 4096)
	if _, err := f.WriteAt(block, 0); err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	start := time.Now()
	n := 0
	for ; time.Since(start) < d; n++ {
		block[0] = byte(n)
		if _, err := f.WriteAt(block, 0); err != nil {
			return 0, err
		}
		if err := datasync(f); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
