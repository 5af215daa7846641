package boltdb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
)

// The parts of bbolt's page format that walkFile reads, beyond those of CheckFile: a branch page's
// elements (pos, ksize uint32; child page id uint64) and a leaf page's (flags, pos, ksize, vsize
// uint32) follow the page header; pos counts from the element itself. A leaf element whose flags
// carry bucketLeafFlag is a nested bucket: its value starts with the bucket header (root page id
// uint64, sequence uint64) and, when the root is 0, holds the bucket's only page inline after it.
const (
	elementSize      = 16
	bucketLeafFlag   = 0x01
	bucketHeaderSize = 16
)

// walkFile reads the tree of the database m describes from the file itself, in plain Go with every
// offset checked against what was read, and returns an error for anything bbolt would read out of
// bounds or loop on: a page id outside the file, a page reached twice, a page whose header names
// another page or has the wrong type, an element whose key or value lies outside its page, keys out
// of order, a bucket header cut short. It never panics, whatever the bytes: this is what lets
// CheckConsistency hand the file to bbolt's own Tx.Check afterwards, which runs on a goroutine of its
// own where a panic or memory fault on a damaged page could not be contained and would end the
// process. It reads every page of the tree once.
func walkFile(f *os.File, m meta) error {
	w := &walker{f: f, m: m, seen: map[uint64]bool{}}
	return w.page(m.root, "the root bucket", 0)
}

type walker struct {
	f    *os.File
	m    meta
	seen map[uint64]bool
}

// maxDepth bounds the nesting of pages and buckets: a B+tree of bbolt's page sizes over any file
// this machine can hold is far shallower, so a deeper walk means damage.
const maxDepth = 64

// page reads page id (with its overflow pages) and walks it.
func (w *walker) page(id uint64, where string, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%s: pages nest deeper than %d levels", where, maxDepth)
	}
	if id < 2 || id >= w.m.pgid {
		return fmt.Errorf("%s: page %d is outside the file's pages [2, %d)", where, id, w.m.pgid)
	}
	if w.seen[id] {
		return fmt.Errorf("%s: page %d is reached twice", where, id)
	}
	w.seen[id] = true
	ps := uint64(w.m.pageSize)
	hdr := make([]byte, pageHeaderSize)
	if _, err := w.f.ReadAt(hdr, int64(id*ps)); err != nil {
		return fmt.Errorf("%s: page %d: %v", where, id, err)
	}
	le := binary.LittleEndian
	if got := le.Uint64(hdr); got != id {
		return fmt.Errorf("%s: page %d says it is page %d", where, id, got)
	}
	overflow := uint64(le.Uint32(hdr[12:]))
	if id+overflow >= w.m.pgid {
		return fmt.Errorf("%s: page %d runs %d pages past the file's end", where, id, id+overflow+1-w.m.pgid)
	}
	buf := make([]byte, (overflow+1)*ps)
	if _, err := w.f.ReadAt(buf, int64(id*ps)); err != nil {
		return fmt.Errorf("%s: page %d: %v", where, id, err)
	}
	for i := uint64(1); i <= overflow; i++ {
		w.seen[id+i] = true
	}
	return w.node(buf, fmt.Sprintf("%s: page %d", where, id), depth)
}

// node walks one branch or leaf page held in buf (a page read from the file, or an inline bucket's).
func (w *walker) node(buf []byte, where string, depth int) error {
	if len(buf) < pageHeaderSize {
		return fmt.Errorf("%s: %d bytes, shorter than a page header", where, len(buf))
	}
	le := binary.LittleEndian
	flags, count := le.Uint16(buf[8:]), int(le.Uint16(buf[10:]))
	if flags != branchPageFlag && flags != leafPageFlag {
		return fmt.Errorf("%s: page type %#x, want a branch or leaf page", where, flags)
	}
	if pageHeaderSize+count*elementSize > len(buf) {
		return fmt.Errorf("%s: %d elements do not fit the page", where, count)
	}
	var prev []byte
	for i := range count {
		off := pageHeaderSize + i*elementSize
		el := buf[off : off+elementSize]
		var pos, ksize, vsize uint64
		if flags == branchPageFlag {
			pos, ksize = uint64(le.Uint32(el)), uint64(le.Uint32(el[4:]))
		} else {
			pos, ksize, vsize = uint64(le.Uint32(el[4:])), uint64(le.Uint32(el[8:])), uint64(le.Uint32(el[12:]))
		}
		start := uint64(off) + pos
		if start+ksize+vsize > uint64(len(buf)) {
			return fmt.Errorf("%s: element %d points outside the page", where, i)
		}
		key := buf[start : start+ksize]
		if i > 0 && bytes.Compare(prev, key) >= 0 {
			return fmt.Errorf("%s: element %d: keys out of order", where, i)
		}
		prev = key
		if flags == branchPageFlag {
			if err := w.page(le.Uint64(el[8:]), where, depth+1); err != nil {
				return err
			}
			continue
		}
		if le.Uint32(el)&bucketLeafFlag == 0 {
			continue
		}
		value := buf[start+ksize : start+ksize+vsize]
		if len(value) < bucketHeaderSize {
			return fmt.Errorf("%s: element %d: a bucket header of %d bytes", where, i, len(value))
		}
		inner := fmt.Sprintf("%s: bucket %q", where, truncateKey(key))
		if root := le.Uint64(value); root != 0 {
			if err := w.page(root, inner, depth+1); err != nil {
				return err
			}
			continue
		}
		if err := w.node(value[bucketHeaderSize:], inner+" (inline)", depth+1); err != nil {
			return err
		}
	}
	return nil
}

// truncateKey keeps messages short: bucket names are short, but a damaged page may make any bytes
// look like one.
func truncateKey(k []byte) []byte {
	if len(k) > 32 {
		return k[:32]
	}
	return k
}

// walkPath runs walkFile on the database file at path, reading its newest meta page again.
func walkPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	m0, err0 := readMeta(f, 0)
	if err0 != nil {
		return err0
	}
	m1, err1 := readMeta(f, int64(m0.pageSize))
	if err1 != nil {
		return err1
	}
	newest := m0
	if m1.txid > m0.txid {
		newest = m1
	}
	if newest.pgid < 2 {
		return errors.New("the meta page counts fewer than two pages")
	}
	return walkFile(f, newest)
}
