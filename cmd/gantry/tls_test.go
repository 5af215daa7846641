package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTLSInit: gantry tls init writes the CA key into --ca-dir alone and each leaf's ca.crt, tls.crt
// and tls.key (0600) into its own folder; a second run keeps the leaves; bad leaves are usage errors.
func TestTLSInit(t *testing.T) {
	root := t.TempDir()
	ca, gw, svc := filepath.Join(root, "ca"), filepath.Join(root, "gateway"), filepath.Join(root, "secrets")
	var stdout, stderr bytes.Buffer
	if code := dispatch([]string{"tls", "init", "--ca-dir", ca, "--leaf", "gateway:" + gw, "--leaf", "service:" + svc}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(ca, "ca.key")); err != nil {
		t.Fatal(err)
	}
	first := map[string][]byte{}
	for _, dir := range []string{gw, svc} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
			info, _ := e.Info()
			if info.Mode().Perm() != 0o600 {
				t.Errorf("%s/%s has mode %v", dir, e.Name(), info.Mode().Perm())
			}
		}
		if !slices.Equal(names, []string{"ca.crt", "tls.crt", "tls.key"}) {
			t.Errorf("%s holds %v, want ca.crt tls.crt tls.key", dir, names)
		}
		first[dir], _ = os.ReadFile(filepath.Join(dir, "tls.crt"))
	}
	if code := dispatch([]string{"tls", "init", "--ca-dir", ca, "--leaf", "gateway:" + gw, "--leaf", "service:" + svc}, &stdout, &stderr); code != 0 {
		t.Fatalf("second run: exit %d: %s", code, stderr.String())
	}
	for dir, cert := range first {
		if again, _ := os.ReadFile(filepath.Join(dir, "tls.crt")); !bytes.Equal(again, cert) {
			t.Errorf("a second run issued %s again", dir)
		}
	}
	for _, args := range [][]string{
		{"tls", "init", "--ca-dir", ca},
		{"tls", "init", "--leaf", "gateway:" + gw},
		{"tls", "init", "--ca-dir", ca, "--leaf", "admin:" + gw},
		{"tls", "init", "--ca-dir", ca, "--leaf", "gateway"},
		{"tls", "rotate"},
	} {
		stderr.Reset()
		if code := dispatch(args, &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	stderr.Reset()
	if code := dispatch([]string{"tls", "init", "--ca-dir", ca, "--leaf", "service:" + ca}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "ca.key") {
		t.Errorf("a leaf into the CA folder: exit %d %q, want 1 naming ca.key", code, stderr.String())
	}
}
