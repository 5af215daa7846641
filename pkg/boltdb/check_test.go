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

// TestCheckConsistencyDamagedElements: a leaf or branch element whose key points outside the file, a
// child page id out of range, a page reached twice and keys out of order are each ErrDamaged from
// Open with Check, read-only or not, never a panic or memory fault: bbolt's Tx.Check, which runs on a
// goroutine nothing can recover, faulted on the first of these and ended the process.
func TestCheckConsistencyDamagedElements(t *testing.T) {
	le := binary.LittleEndian
	// pages returns the leaf root of bucket b, and the branch root of a bucket big enough to have one.
	pages := func(t *testing.T, path string) (leaf, branch uint64, ps int64) {
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.Update(func(tx *bolt.Tx) error {
			big, err := tx.CreateBucketIfNotExists([]byte("big"))
			if err != nil {
				return err
			}
			for i := range 500 {
				if err := big.Put(binary.BigEndian.AppendUint32(nil, uint32(i)), make([]byte, 100)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		_ = db.View(func(tx *bolt.Tx) error {
			leaf, branch = uint64(tx.Bucket([]byte("b")).Root()), uint64(tx.Bucket([]byte("big")).Root())
			return nil
		})
		return leaf, branch, int64(db.Info().PageSize)
	}
	tests := []struct {
		name   string
		damage func(t *testing.T, path string, leaf, branch uint64, ps int64)
		want   string
	}{
		{"leaf key outside the file", func(t *testing.T, path string, leaf, _ uint64, ps int64) {
			overwrite(t, path, int64(leaf)*ps+pageHeaderSize+4, le.AppendUint32(nil, 0xfffffff))
		}, "points outside the page"},
		{"branch key outside the file", func(t *testing.T, path string, _, branch uint64, ps int64) {
			overwrite(t, path, int64(branch)*ps+pageHeaderSize, le.AppendUint32(nil, 0xfffffff))
		}, "points outside the page"},
		{"branch child out of range", func(t *testing.T, path string, _, branch uint64, ps int64) {
			overwrite(t, path, int64(branch)*ps+pageHeaderSize+8, le.AppendUint64(nil, 1<<40))
		}, "outside the file's pages"},
		{"branch child reached twice", func(t *testing.T, path string, _, branch uint64, ps int64) {
			f, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			first := f[int64(branch)*ps+pageHeaderSize+8 : int64(branch)*ps+pageHeaderSize+16]
			overwrite(t, path, int64(branch)*ps+pageHeaderSize+elementSize+8, first)
		}, "reached twice"},
		{"leaf keys out of order", func(t *testing.T, path string, _, branch uint64, ps int64) {
			f, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			child := int64(le.Uint64(f[int64(branch)*ps+pageHeaderSize+8:])) * ps
			// The first element's key position moved onto the second's key.
			pos1 := le.Uint32(f[child+pageHeaderSize+elementSize+4:])
			overwrite(t, path, child+pageHeaderSize+4, le.AppendUint32(nil, pos1+elementSize))
		}, "out of order"},
	}
	for _, tt := range tests {
		for _, readOnly := range []bool{false, true} {
			t.Run(tt.name+map[bool]string{false: "", true: " read-only"}[readOnly], func(t *testing.T) {
				path := writeTestDB(t)
				leaf, branch, ps := pages(t, path)
				if leaf == 0 || branch == 0 {
					t.Fatal("a bucket is inline")
				}
				tt.damage(t, path, leaf, branch, ps)
				db, err := Open(path, Options{ReadOnly: readOnly, Check: true}, nil)
				if err == nil {
					_ = db.Close()
					t.Fatal("Open accepted a damaged file")
				}
				if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
					t.Fatalf("Open = %v, want ErrDamaged naming the file and %q", err, tt.want)
				}
			})
		}
	}
}
