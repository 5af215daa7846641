package benchload

import (
	"os"
	"syscall"
)

// datasync is fdatasync(2), the call bbolt commits with on Linux.
func datasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
