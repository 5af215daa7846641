package stack

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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

// TestKeyFilesOthersCanReadStopTheStart: a session key or a local CA key that group or others can read
// stops gantry at start (the keyring, JWT keys and internal TLS keys are checked the same way), and so
// does a session key too short to be one gantry wrote.
func TestKeyFilesOthersCanReadStopTheStart(t *testing.T) {
	start := func(dir string) error {
		cfg := DefaultConfig()
		cfg.Target = RoleSecrets
		cfg.DataDir = dir
		cfg.Secrets.Listen = "127.0.0.1:0"
		st, err := Start(context.Background(), cfg, zap.NewNop())
		if err != nil {
			return err
		}
		st.life.stop()
		return st.Wait()
	}
	for _, tc := range []struct {
		name, file string
		damage     func(path string) error
		want       string
	}{
		{"session key readable", sessionKeyFile, func(p string) error { return os.Chmod(p, 0o644) }, "chmod 600"},
		{"session key short", sessionKeyFile, func(p string) error { return os.WriteFile(p, []byte("short"), 0o600) }, "too short"},
		{"local CA key readable", filepath.Join(caFolder, "development", "ca.key"), func(p string) error { return os.Chmod(p, 0o640) }, "chmod 600"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if err := start(dir); err != nil {
				t.Fatalf("first start: %v", err)
			}
			if err := tc.damage(filepath.Join(dir, tc.file)); err != nil {
				t.Fatal(err)
			}
			if err := start(dir); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("start with a damaged %s: %v, want an error saying %q", tc.file, err, tc.want)
			}
		})
	}
}
