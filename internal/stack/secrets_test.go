package stack

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestWarnOpenDataDir(t *testing.T) {
	for mode, wantWarn := range map[os.FileMode]bool{0o700: false, 0o750: true, 0o755: true} {
		dir := filepath.Join(t.TempDir(), "data")
		if err := os.Mkdir(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil { // umask may have cut the mode
			t.Fatal(err)
		}
		core, logs := observer.New(zap.WarnLevel)
		warnOpenDataDir(dir, zap.New(core))
		if got := logs.Len() == 1; got != wantWarn {
			t.Errorf("mode %v: warned %v, want %v", mode, got, wantWarn)
		}
	}
}
