package boltdb

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gantry-dev/gantry/pkg/logging/logtest"
)

var testMeta = []byte("meta")

func openTemp(t *testing.T, opts Options) (*bolt.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.db")
	db, err := Open(path, opts, logtest.New(t))
	if err != nil {
		t.Fatalf("Open(%s) error = %v", path, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, path
}

func TestBoltOpenFileMode(t *testing.T) {
	_, path := openTemp(t, Options{})
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := info.Mode().Perm(), os.FileMode(0o600); got != want {
		t.Errorf("file mode = %v, want %v", got, want)
	}
}

func TestBoltOpenOptions(t *testing.T) {
	tests := []struct {
		name   string
		opts   Options
		noSync bool
	}{
		{"defaults", Options{}, false},
		{"no sync", Options{NoSync: true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db, _ := openTemp(t, tt.opts)
			if db.NoSync != tt.noSync {
				t.Errorf("db.NoSync = %v, want %v", db.NoSync, tt.noSync)
			}
		})
	}
}

func TestBoltOpenErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		path    string
		opts    Options
		wantSub string
	}{
		{"empty path", "", Options{}, "empty path"},
		{"negative timeout", filepath.Join(dir, "a.db"), Options{Timeout: -time.Second}, "negative lock timeout"},
		{"missing parent directory", filepath.Join(dir, "missing", "a.db"), Options{}, filepath.Join(dir, "missing", "a.db")},
		{"path is a directory", dir, Options{}, dir},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db, err := Open(tt.path, tt.opts, nil)
			if err == nil {
				_ = db.Close()
				t.Fatalf("Open(%q) error = nil, want an error", tt.path)
			}
			if !strings.Contains(err.Error(), tt.wantSub) {
				t.Errorf("Open(%q) error = %q, want it to contain %q", tt.path, err, tt.wantSub)
			}
		})
	}
}

func TestBoltOpenLockedFileFailsWithinTimeout(t *testing.T) {
	_, path := openTemp(t, Options{})
	const timeout = 100 * time.Millisecond

	type result struct {
		db  *bolt.DB
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		db, err := Open(path, Options{Timeout: timeout}, logtest.New(t))
		done <- result{db, err}
	}()
	select {
	case r := <-done:
		if r.err == nil {
			_ = r.db.Close()
			t.Fatal("second Open of a locked file succeeded, want an error")
		}
		if !errors.Is(r.err, ErrLocked) {
			t.Errorf("error = %v, want errors.Is(err, ErrLocked)", r.err)
		}
		if !strings.Contains(r.err.Error(), path) {
			t.Errorf("error = %q, want it to name the file %s", r.err, path)
		}
		if !strings.Contains(r.err.Error(), timeout.String()) {
			t.Errorf("error = %q, want it to say how long it waited (%s)", r.err, timeout)
		}
		t.Logf("gave up after %s", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("second Open of a locked file still blocked after 10s")
	}
}

func TestBoltEnsureSchema(t *testing.T) {
	tests := []struct {
		name    string
		stored  int // 0: fresh database
		want    int
		wantErr error  // nil: success
		wantSub string // substring of the error message
	}{
		{name: "fresh database gets the version", stored: 0, want: 3},
		{name: "same version", stored: 3, want: 3},
		{name: "older version", stored: 2, want: 3, wantErr: ErrNeedsMigration, wantSub: "needs migration"},
		{name: "newer version", stored: 4, want: 3, wantErr: ErrNewerSchema, wantSub: "written by a newer gantry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db, path := openTemp(t, Options{NoSync: true})
			if tt.stored != 0 {
				if err := WriteSchemaVersion(db, testMeta, tt.stored); err != nil {
					t.Fatalf("WriteSchemaVersion(%d) error = %v", tt.stored, err)
				}
			}
			err := EnsureSchema(db, testMeta, tt.want)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("EnsureSchema(%d) error = %v, want nil", tt.want, err)
				}
				got, err := ReadSchemaVersion(db, testMeta)
				if err != nil || got != tt.want {
					t.Errorf("ReadSchemaVersion() = %d, %v; want %d, nil", got, err, tt.want)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("EnsureSchema(%d) error = %v, want errors.Is %v", tt.want, err, tt.wantErr)
			}
			for _, sub := range []string{tt.wantSub, path} {
				if !strings.Contains(err.Error(), sub) {
					t.Errorf("error = %q, want it to contain %q", err, sub)
				}
			}
			got, err := ReadSchemaVersion(db, testMeta)
			if err != nil || got != tt.stored {
				t.Errorf("after the failed check ReadSchemaVersion() = %d, %v; want %d unchanged", got, err, tt.stored)
			}
		})
	}
}

func TestBoltEnsureSchemaSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "test.db")
	db, err := Open(path, Options{NoSync: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := EnsureSchema(db, testMeta, 2); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(path, Options{NoSync: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := EnsureSchema(db, testMeta, 3); !errors.Is(err, ErrNeedsMigration) {
		t.Errorf("EnsureSchema(3) after reopen error = %v, want ErrNeedsMigration", err)
	}
	if got, err := ReadSchemaVersion(db, testMeta); err != nil || got != 2 {
		t.Errorf("ReadSchemaVersion() = %d, %v; want 2, nil", got, err)
	}
}

func TestBoltEnsureSchemaRejects(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(tx *bolt.Tx) error
		want    int
		wantSub string
	}{
		{
			name:    "version below 1",
			want:    0,
			wantSub: "must be at least 1",
		},
		{
			name: "foreign database without a version",
			setup: func(tx *bolt.Tx) error {
				_, err := tx.CreateBucket([]byte("somebody-elses-data"))
				return err
			},
			want:    1,
			wantSub: "no schema version",
		},
		{
			name: "corrupt version",
			setup: func(tx *bolt.Tx) error {
				b, err := tx.CreateBucket(testMeta)
				if err != nil {
					return err
				}
				return b.Put([]byte(SchemaVersionKey), []byte("one"))
			},
			want:    1,
			wantSub: "corrupt schema version",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db, _ := openTemp(t, Options{NoSync: true})
			if tt.setup != nil {
				if err := db.Update(tt.setup); err != nil {
					t.Fatal(err)
				}
			}
			err := EnsureSchema(db, testMeta, tt.want)
			if err == nil || !strings.Contains(err.Error(), tt.wantSub) {
				t.Errorf("EnsureSchema(%d) error = %v, want one containing %q", tt.want, err, tt.wantSub)
			}
		})
	}
}

func TestBoltWriteSchemaVersionRejectsBelowOne(t *testing.T) {
	db, _ := openTemp(t, Options{NoSync: true})
	if err := WriteSchemaVersion(db, testMeta, 0); err == nil {
		t.Error("WriteSchemaVersion(0) error = nil, want an error")
	}
	if got, err := ReadSchemaVersion(db, testMeta); err != nil || got != 0 {
		t.Errorf("ReadSchemaVersion() = %d, %v; want 0, nil", got, err)
	}
}

func TestBoltCopy(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
	}{
		{"nil", nil},
		{"empty", []byte{}},
		{"bytes", []byte("value")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Copy(tt.in)
			if (got == nil) != (tt.in == nil) {
				t.Fatalf("Copy(%#v) = %#v: nil-ness differs", tt.in, got)
			}
			if !bytes.Equal(got, tt.in) {
				t.Fatalf("Copy(%q) = %q", tt.in, got)
			}
			if len(got) > 0 {
				got[0] ^= 0xff
				if got[0] == tt.in[0] {
					t.Error("Copy shares memory with its input")
				}
			}
		})
	}
}

func TestBoltCopyOutlivesTransaction(t *testing.T) {
	db, _ := openTemp(t, Options{NoSync: true})
	bucket, key, want := []byte("b"), []byte("k"), []byte("the value")
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket(bucket)
		if err != nil {
			return err
		}
		return b.Put(key, want)
	}); err != nil {
		t.Fatal(err)
	}
	var got []byte
	if err := db.View(func(tx *bolt.Tx) error {
		got = Copy(tx.Bucket(bucket).Get(key))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Rewrite the page the value lived on, then check the copy.
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Put(key, bytes.Repeat([]byte("x"), len(want)))
	}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("copied value = %q, want %q", got, want)
	}
}

func TestBoltOpenReportsPermissiveFile(t *testing.T) {
	tests := []struct {
		name     string
		mode     os.FileMode // 0: let Open create the file
		wantLogs int
	}{
		{"created by Open", 0, 0},
		{"existing 0600", 0o600, 0},
		{"existing 0644", 0o644, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "test.db")
			if tt.mode != 0 {
				// A real database (an empty file is refused as damaged), then given the mode.
				db, err := Open(path, Options{NoSync: true}, zap.NewNop())
				if err != nil {
					t.Fatal(err)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path, tt.mode); err != nil {
					t.Fatal(err)
				}
			}
			core, logs := observer.New(zapcore.DebugLevel)
			db, err := Open(path, Options{NoSync: true}, zap.New(core))
			if err != nil {
				t.Fatalf("Open() error = %v", err)
			}
			defer db.Close()
			if got := logs.Len(); got != tt.wantLogs {
				t.Fatalf("logged %d entries, want %d: %v", got, tt.wantLogs, logs.All())
			}
			for _, e := range logs.All() {
				if e.Level != zapcore.ErrorLevel || e.ContextMap()["path"] != path {
					t.Errorf("log entry = %v %q %v, want error level naming %s", e.Level, e.Message, e.ContextMap(), path)
				}
			}
		})
	}
}
