package boltdb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
)

// ErrDamaged is returned (wrapped, with what was found) for a database file that is not whole: empty,
// truncated, with a damaged meta page, or failing bbolt's consistency check.
var ErrDamaged = errors.New("database file is damaged")

// bbolt's on-disk format (version 2), which bbolt does not export: every page starts with a 16-byte
// header; pages 0 and 1 hold the two meta records it alternates between at each commit.
const (
	boltMagic       = 0xED0CDAED
	boltVersion     = 2
	pageHeaderSize  = 16
	metaSize        = 64 // magic, version, page size, flags, root bucket (16), freelist, pgid, txid, checksum
	metaChecksumEnd = 56 // the checksum covers the meta record up to the checksum field
	minPageSize     = 1 << 10
	maxPageSize     = 1 << 16
	// Page flags, and the freelist page id of a database that does not keep its freelist on disk.
	branchPageFlag   = 0x01
	leafPageFlag     = 0x02
	freelistPageFlag = 0x10
	noFreelist       = ^uint64(0)
)

// meta is what CheckFile reads of one meta page.
type meta struct {
	pageSize uint32
	root     uint64 // page of the root bucket
	freelist uint64 // page of the freelist, or noFreelist
	pgid     uint64 // high-water mark: pages [0, pgid) exist
	txid     uint64
}

// CheckFile runs the quick checks of a database file before bbolt opens it, none of which bbolt does
// itself: bbolt initialises an empty file as a new database, and when one meta page is damaged it
// silently uses the other, older one, dropping the last committed transaction. CheckFile refuses an
// empty file, a file whose meta pages do not both verify (magic, version, checksum) and a file
// shorter than the pages its newest meta page says exist. It reads only the two meta pages. A file
// that does not exist is not checked (nil): creating it is the caller's decision.
func CheckFile(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("boltdb: check %s: %w", path, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("boltdb: check %s: %w", path, err)
	}
	size := info.Size()
	if size == 0 {
		return fmt.Errorf("boltdb: %s: %w: the file is empty (0 bytes)", path, ErrDamaged)
	}
	m0, err0 := readMeta(f, 0)
	pageSize := int64(m0.pageSize)
	if err0 != nil {
		// The first meta page tells the page size; without it, try every size bbolt may use.
		for ps := int64(minPageSize); ps <= maxPageSize; ps *= 2 {
			if m1, err := readMeta(f, ps); err == nil && int64(m1.pageSize) == ps {
				return fmt.Errorf("boltdb: %s: %w: meta page 0: %v (bbolt would fall back to the older meta page 1, losing the last commit)", path, ErrDamaged, err0)
			}
		}
		return fmt.Errorf("boltdb: %s: %w: no valid meta page (%v); not a bbolt file, or its header is destroyed", path, ErrDamaged, err0)
	}
	m1, err1 := readMeta(f, pageSize)
	if err1 != nil {
		return fmt.Errorf("boltdb: %s: %w: meta page 1: %v (bbolt would fall back to the older meta page 0, losing the last commit)", path, ErrDamaged, err1)
	}
	if m1.pageSize != m0.pageSize {
		return fmt.Errorf("boltdb: %s: %w: the meta pages disagree on the page size (%d, %d)", path, ErrDamaged, m0.pageSize, m1.pageSize)
	}
	newest := m0
	if m1.txid > m0.txid {
		newest = m1
	}
	if need := int64(newest.pgid) * pageSize; size < need {
		return fmt.Errorf("boltdb: %s: %w: truncated: %d bytes, but the last commit uses %d", path, ErrDamaged, size, need)
	}
	// The two pages bbolt reads first: a damaged freelist page panics inside bbolt while it opens
	// (or, read-only, inside its consistency check, on a goroutine nothing can recover), a damaged
	// root page at the first read.
	if err := checkPage(f, newest, newest.root, branchPageFlag|leafPageFlag); err != nil {
		return fmt.Errorf("boltdb: %s: %w: root bucket page: %v", path, ErrDamaged, err)
	}
	if newest.freelist != noFreelist {
		if err := checkPage(f, newest, newest.freelist, freelistPageFlag); err != nil {
			return fmt.Errorf("boltdb: %s: %w: freelist page: %v", path, ErrDamaged, err)
		}
	}
	return nil
}

// checkPage verifies that page id of the database m describes exists, carries its own id and has
// one of the flags in want.
func checkPage(f *os.File, m meta, id uint64, want uint16) error {
	if id < 2 || id >= m.pgid {
		return fmt.Errorf("page %d is out of range [2, %d)", id, m.pgid)
	}
	hdr := make([]byte, pageHeaderSize)
	if _, err := f.ReadAt(hdr, int64(id)*int64(m.pageSize)); err != nil {
		return fmt.Errorf("page %d: %v", id, err)
	}
	le := binary.LittleEndian
	if got := le.Uint64(hdr[0:]); got != id {
		return fmt.Errorf("page %d says it is page %d", id, got)
	}
	if flags := le.Uint16(hdr[8:]); flags&want == 0 || flags&^want != 0 {
		return fmt.Errorf("page %d has flags %#x, want %#x", id, flags, want)
	}
	return nil
}

// readMeta reads and verifies the meta page at offset.
func readMeta(f *os.File, offset int64) (meta, error) {
	buf := make([]byte, pageHeaderSize+metaSize)
	if _, err := f.ReadAt(buf, offset); err != nil {
		if errors.Is(err, io.EOF) {
			return meta{}, errors.New("missing (file too short)")
		}
		return meta{}, err
	}
	rec := buf[pageHeaderSize:]
	le := binary.LittleEndian
	if le.Uint32(rec[0:]) != boltMagic {
		return meta{}, errors.New("bad magic number")
	}
	if v := le.Uint32(rec[4:]); v != boltVersion {
		return meta{}, fmt.Errorf("unknown format version %d", v)
	}
	h := fnv.New64a()
	_, _ = h.Write(rec[:metaChecksumEnd])
	if h.Sum64() != le.Uint64(rec[metaChecksumEnd:]) {
		return meta{}, errors.New("checksum mismatch")
	}
	m := meta{pageSize: le.Uint32(rec[8:]), root: le.Uint64(rec[16:]), freelist: le.Uint64(rec[32:]), pgid: le.Uint64(rec[40:]), txid: le.Uint64(rec[48:])}
	if m.pageSize < minPageSize || m.pageSize > maxPageSize || m.pageSize&(m.pageSize-1) != 0 {
		return meta{}, fmt.Errorf("impossible page size %d", m.pageSize)
	}
	return m, nil
}

// maxCheckErrors bounds what CheckConsistency collects: one error is enough to refuse the file, a few
// help to judge the damage.
const maxCheckErrors = 10

// CheckConsistency walks the file's tree in plain Go (walkFile: every page, element, key and nested
// bucket bounds-checked, never a panic), reads every key and value of every bucket through bbolt,
// then runs bbolt's consistency check (every page reachable once, no page both used and free, keys
// in order), in read transactions, and returns ErrDamaged with the first problems found. It reads
// the whole file. bbolt panics (or faults) on some damaged pages; the first two passes find those
// pages without bbolt or with the panic contained, so that bbolt's check, which runs on a goroutine
// of its own where nothing could contain it (a key pointing outside the file there ended the
// process with a raw "fatal error: fault"), only ever sees pages that read.
func CheckConsistency(db *bolt.DB) error {
	if err := walkPath(db.Path()); err != nil {
		return fmt.Errorf("boltdb: %s: %w: %w", db.Path(), ErrDamaged, err)
	}
	if err := walkAll(db); err != nil {
		return err
	}
	var problems []error
	err := db.View(func(tx *bolt.Tx) error {
		for e := range tx.Check() {
			if len(problems) < maxCheckErrors {
				problems = append(problems, e)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("boltdb: check %s: %w", db.Path(), err)
	}
	if len(problems) > 0 {
		return fmt.Errorf("boltdb: %s: %w: %w", db.Path(), ErrDamaged, errors.Join(problems...))
	}
	return nil
}

// walkAll visits every key of every bucket, nested ones included, containing a panic or memory
// fault of bbolt.
func walkAll(db *bolt.DB) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("boltdb: %s: %w: reading it fails: %v", db.Path(), ErrDamaged, r)
		}
	}()
	var walk func(b *bolt.Bucket) error
	walk = func(b *bolt.Bucket) error {
		return b.ForEach(func(k, v []byte) error {
			if v == nil {
				if child := b.Bucket(k); child != nil {
					return walk(child)
				}
			}
			return nil
		})
	}
	return db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(_ []byte, b *bolt.Bucket) error { return walk(b) })
	})
}
