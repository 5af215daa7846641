package secrets

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

func TestStoreGrants(t *testing.T) {
	ctx := context.Background()
	st := newTestStore(t)
	g := NewStoreGrants(st, logtest.New(t))
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	g.now = func() time.Time { return t0 }

	if ok, err := g.Allowed(ctx, "billing"); ok || err != nil {
		t.Errorf("Allowed before any grant = %v, %v; want false, nil", ok, err)
	}
	if st, err := g.Grants(ctx, kms.AliasAuth, "billing"); st != (kms.GrantState{}) || err != nil {
		t.Errorf("Grants before any grant = %+v, %v; want none, nil", st, err)
	}
	for i := range 2 {
		st, err := g.EnsureGrants(ctx, kms.AliasAuth, "billing")
		if err != nil || st != (kms.GrantState{Encrypt: true, Decrypt: true}) {
			t.Fatalf("EnsureGrants #%d = %+v, %v", i+1, st, err)
		}
		g.now = func() time.Time { return t0.Add(time.Hour) }
	}
	if rec, err := st.Grants(ctx, "billing"); err != nil || !rec.Created.Equal(t0) {
		t.Errorf("stored record = %+v, %v; want both grants created at %s (kept by the second EnsureGrants)", rec, err, t0)
	}
	tests := []struct {
		service string
		want    kms.GrantState
	}{
		{"billing", kms.GrantState{Encrypt: true, Decrypt: true}},
		{"unknown", kms.GrantState{}},
		{"", kms.GrantState{}},
	}
	for _, tt := range tests {
		// The auth key is ignored: one keyring is one trust domain.
		for _, key := range []string{kms.AliasAuth, "", "another-key"} {
			if st, err := g.Grants(ctx, key, tt.service); err != nil || st != tt.want {
				t.Errorf("Grants(%q, %q) = %+v, %v; want %+v", key, tt.service, st, err, tt.want)
			}
		}
		if ok, err := g.Allowed(ctx, tt.service); err != nil || ok != tt.want.Encrypt {
			t.Errorf("Allowed(%q) = %v, %v; want %v", tt.service, ok, err, tt.want.Encrypt)
		}
	}

	// A record with only the decrypt grant does not let the service make tokens; EnsureGrants
	// completes it and keeps its creation time.
	if err := st.PutGrants(ctx, "payroll", store.GrantsRecord{Decrypt: true, Created: t0}); err != nil {
		t.Fatal(err)
	}
	if ok, err := g.Allowed(ctx, "payroll"); ok || err != nil {
		t.Errorf("Allowed with the decrypt grant only = %v, %v; want false", ok, err)
	}
	if _, err := g.EnsureGrants(ctx, "", "payroll"); err != nil {
		t.Fatal(err)
	}
	if rec, err := st.Grants(ctx, "payroll"); err != nil || !rec.Encrypt || !rec.Decrypt || !rec.Created.Equal(t0) {
		t.Errorf("completed record = %+v, %v; want both grants created at %s", rec, err, t0)
	}

	if _, err := g.EnsureGrants(ctx, "", ""); err == nil {
		t.Error("EnsureGrants of an empty service id succeeded")
	}
}

// A grants check that cannot read the store is an error, never a yes (nor a silent no).
func TestStoreGrantsStoreFailure(t *testing.T) {
	ctx := context.Background()
	// The test closes the store itself (the second Close at cleanup is harmless).
	store := newTestStoreIn(t, t.TempDir(), logtest.New(t))
	g := NewStoreGrants(store, nil)
	if _, err := g.EnsureGrants(ctx, "", "billing"); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if ok, err := g.Allowed(cancelled, "billing"); ok || !errors.Is(err, context.Canceled) {
		t.Errorf("Allowed with a cancelled context = %v, %v; want false, context.Canceled", ok, err)
	}
	if _, err := g.Grants(cancelled, "", "billing"); !errors.Is(err, context.Canceled) {
		t.Errorf("Grants with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := g.EnsureGrants(cancelled, "", "payroll"); !errors.Is(err, context.Canceled) {
		t.Errorf("EnsureGrants with a cancelled context: %v, want context.Canceled", err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if ok, err := g.Allowed(ctx, "billing"); ok || err == nil {
		t.Errorf("Allowed on a closed store = %v, %v; want false and an error", ok, err)
	}
}

func TestStoreGrantsImportFile(t *testing.T) {
	ctx := context.Background()
	st := newTestStore(t)
	g := NewStoreGrants(st, logtest.New(t))
	dir := t.TempDir()
	path := filepath.Join(dir, "grants.json")

	if n, err := g.ImportFile(ctx, path); n != 0 || err != nil {
		t.Fatalf("ImportFile of a missing file = %d, %v; want 0, nil", n, err)
	}

	// payroll is already in the store with the decrypt grant and a later creation time; the file
	// adds its encrypt grant and the earlier time. idle holds no grant and is skipped.
	if err := st.PutGrants(ctx, "payroll", store.GrantsRecord{Decrypt: true, Created: time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)}); err != nil {
		t.Fatal(err)
	}
	writeGrantsFile(t, path, `{
  "billing": {"encrypt": true, "decrypt": true, "created": "2026-01-01T00:00:00Z"},
  "payroll": {"encrypt": true, "decrypt": false, "created": "2026-02-01T00:00:00+01:00"},
  "idle": {"encrypt": false, "decrypt": false, "created": "2026-01-01T00:00:00Z"}
}`, 0o600)
	if n, err := g.ImportFile(ctx, path); n != 2 || err != nil {
		t.Fatalf("ImportFile = %d, %v; want 2, nil", n, err)
	}
	want := map[string]store.GrantsRecord{
		"billing": {Encrypt: true, Decrypt: true, Created: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		"payroll": {Encrypt: true, Decrypt: true, Created: time.Date(2026, 1, 31, 23, 0, 0, 0, time.UTC)},
	}
	for id, w := range want {
		got, err := st.Grants(ctx, id)
		if err != nil || got.Encrypt != w.Encrypt || got.Decrypt != w.Decrypt || !got.Created.Equal(w.Created) {
			t.Errorf("%s after the import = %+v, %v; want %+v", id, got, err, w)
		}
	}
	if _, err := st.Grants(ctx, "idle"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("idle after the import: %v, want ErrNotFound", err)
	}
	if ok, err := g.Allowed(ctx, "billing"); !ok || err != nil {
		t.Errorf("Allowed(billing) after the import = %v, %v", ok, err)
	}

	// Every start imports again: nothing changes, and a grant the store gained since stays.
	if _, err := g.EnsureGrants(ctx, "", "orders"); err != nil {
		t.Fatal(err)
	}
	if n, err := g.ImportFile(ctx, path); n != 0 || err != nil {
		t.Errorf("second ImportFile = %d, %v; want 0, nil", n, err)
	}
	if ok, err := g.Allowed(ctx, "orders"); !ok || err != nil {
		t.Errorf("Allowed(orders) after a second import = %v, %v", ok, err)
	}

	t.Run("null", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "grants.json")
		writeGrantsFile(t, p, `null`, 0o600)
		if n, err := g.ImportFile(ctx, p); n != 0 || err != nil {
			t.Errorf("ImportFile(null) = %d, %v; want 0, nil", n, err)
		}
	})
}

func TestStoreGrantsImportFileErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, path string)
		want  string
	}{
		{"not-json", func(t *testing.T, path string) { writeGrantsFile(t, path, "{", 0o600) }, "not valid JSON"},
		{"wrong-shape", func(t *testing.T, path string) { writeGrantsFile(t, path, `["billing"]`, 0o600) }, "not valid JSON"},
		{"group-writable", func(t *testing.T, path string) {
			writeGrantsFile(t, path, `{"billing":{"encrypt":true,"decrypt":true}}`, 0o620)
		}, "chmod 600"},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"unstorable id", func(t *testing.T, path string) {
			writeGrantsFile(t, path, `{"":{"encrypt":true,"decrypt":true}}`, 0o600)
		}, "import grants"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newTestStore(t)
			g := NewStoreGrants(store, nil)
			path := filepath.Join(t.TempDir(), "grants.json")
			tt.setup(t, path)
			n, err := g.ImportFile(context.Background(), path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ImportFile = %d, %v; want an error containing %q", n, err, tt.want)
			}
			if ok, _ := g.Allowed(context.Background(), "billing"); ok {
				t.Error("a refused file granted billing")
			}
		})
	}
}

func writeGrantsFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	// WriteFile's mode is filtered by the umask; the test needs the exact bits.
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}
