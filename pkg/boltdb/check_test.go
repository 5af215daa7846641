package boltdb

import (
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// metaOf reads the newest meta record of a healthy file.
func metaOf(t *testing.T, path string) meta {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m0, err := readMeta(f, 0)
	if err != nil {
		t.Fatal(err)
	}
	m1, err := readMeta(f, int64(m0.pageSize))
	if err != nil {
		t.Fatal(err)
	}
	if m1.txid > m0.txid {
		return m1
	}
	return m0
}

func overwrite(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestCheckFile: each kind of damage the quick checks look for is refused with ErrDamaged and a
// message naming it, both by CheckFile and by Open (which must not panic or start afresh), read-only
// or not; a healthy file passes.
func TestCheckFile(t *testing.T) {
	flags := func(v uint16) []byte { return binary.LittleEndian.AppendUint16(nil, v) }
	tests := []struct {
		name   string
		damage func(t *testing.T, path string, m meta)
		want   string // "" for a healthy file
		// withFreelist makes the file as bbolt's defaults (and gantry before it stopped syncing the
		// freelist) write it, with a freelist page.
		withFreelist bool
	}{
		{"healthy", func(*testing.T, string, meta) {}, "", false},
		{"empty", func(t *testing.T, path string, _ meta) { _ = os.Truncate(path, 0) }, "empty", false},
		{"truncated", func(t *testing.T, path string, m meta) {
			_ = os.Truncate(path, int64(m.pgid-1)*int64(m.pageSize))
		}, "truncated", false},
		{"meta page 0", func(t *testing.T, path string, _ meta) { overwrite(t, path, pageHeaderSize+20, []byte{0xAA}) }, "meta page 0", false},
		{"meta page 1", func(t *testing.T, path string, m meta) {
			overwrite(t, path, int64(m.pageSize)+pageHeaderSize+20, []byte{0xAA})
		}, "meta page 1", false},
		{"freelist page flags", func(t *testing.T, path string, m meta) {
			overwrite(t, path, int64(m.freelist)*int64(m.pageSize)+8, flags(leafPageFlag))
		}, "freelist page", true},
		{"healthy with a freelist page", func(*testing.T, string, meta) {}, "", true},
		{"root page flags", func(t *testing.T, path string, m meta) {
			overwrite(t, path, int64(m.root)*int64(m.pageSize)+8, flags(0xffff))
		}, "root bucket page", false},
		{"root page id", func(t *testing.T, path string, m meta) {
			overwrite(t, path, int64(m.root)*int64(m.pageSize), binary.LittleEndian.AppendUint64(nil, 999))
		}, "root bucket page", false},
	}
	for _, tt := range tests {
		for _, readOnly := range []bool{false, true} {
			t.Run(tt.name+map[bool]string{false: "", true: " read-only"}[readOnly], func(t *testing.T) {
				path := writeTestDB(t)
				if tt.withFreelist {
					path = writeTestDBWithFreelist(t)
				}
				tt.damage(t, path, metaOf(t, path))
				err := CheckFile(path)
				if tt.want == "" {
					if err != nil {
						t.Fatalf("CheckFile of a healthy file: %v", err)
					}
				} else if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("CheckFile = %v, want ErrDamaged mentioning %q", err, tt.want)
				}
				db, err := Open(path, Options{ReadOnly: readOnly, Check: true}, nil)
				if tt.want == "" {
					if err != nil {
						t.Fatalf("Open of a healthy file: %v", err)
					}
					_ = db.Close()
					return
				}
				if err == nil {
					_ = db.Close()
					t.Fatal("Open accepted a damaged file")
				}
				if !errors.Is(err, ErrDamaged) {
					t.Fatalf("Open = %v, want ErrDamaged", err)
				}
			})
		}
	}
}

// TestCheckConsistencyFindsDamagedDataPage: damage below the root (a leaf of a bucket) passes the
// quick checks and is found by the consistency check, without a panic.
func TestCheckConsistencyFindsDamagedDataPage(t *testing.T) {
	path := writeTestDB(t)
	db, err := Open(path, Options{ReadOnly: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var leaf uint64
	_ = db.View(func(tx *bolt.Tx) error {
		leaf = uint64(tx.Bucket([]byte("b")).Root())
		return nil
	})
	ps := int64(db.Info().PageSize)
	_ = db.Close()
	if leaf == 0 {
		t.Fatal("bucket b is inline")
	}
	overwrite(t, path, int64(leaf)*ps+8, []byte{0xff, 0xff})
	if err := CheckFile(path); err != nil {
		t.Fatalf("CheckFile (quick checks) = %v; the damage is below the root", err)
	}
	if _, err := Open(path, Options{Check: true}, nil); !errors.Is(err, ErrDamaged) {
		t.Fatalf("Open with Check = %v, want ErrDamaged", err)
	}
}
