package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"syscall"

	bolt "go.etcd.io/bbolt"
)

// view and update are bolt's View and Update for this package: a damaged
// file makes bbolt panic (a failed page assertion) or fault (a page past
// the end of a file that shrank), which would take the whole process down
// with a stack trace; here it becomes an error wrapping ErrCorrupt. Both
// roll the transaction back before the panic leaves bbolt, so recovering
// is safe. A write that fails because the disk or the file size limit is
// full says so.
func (db *DB) view(fn func(*bolt.Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer db.recoverCorrupt(&err)
	return db.bolt.View(fn)
}

func (db *DB) update(fn func(*bolt.Tx) error) (err error) {
	defer func() {
		if err != nil {
			db.confs.forget() // what fn noted was not stored
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer db.recoverCorrupt(&err)
	err = db.bolt.Update(func(tx *bolt.Tx) error {
		db.writing = txAnswers{tx: tx}
		defer func() { db.writing = txAnswers{} }()
		return fn(tx)
	})
	if err != nil {
		return diskError(db.path, err)
	}
	db.releaseAfterWrite()
	return nil
}

// openBolt is bolt.Open with the same protection. The free list is synced
// to disk (Options.NoFreelistSync false) rather than rebuilt at open by a
// page walk in a goroutine of bbolt's own, where a damaged page would panic
// beyond any recover; commits pay a little for that, measured at 100,000
// items as within run-to-run noise.
func openBolt(path string, opt *bolt.Options) (bdb *bolt.DB, err error) {
	// bbolt opens the file, then waits for its lock: a compact or an
	// upgrade holding the lock meanwhile renames its copy over path, and
	// the lock then granted is the replaced file's, whose writes nobody
	// would ever read. Open again until the file locked is path's.
	for try := 0; ; try++ {
		before, statErr := os.Stat(path)
		bdb, err = openBoltOnce(path, opt)
		if lockedHook != nil && err == nil {
			lockedHook(path)
		}
		if err != nil || statErr != nil || try == 3 {
			return bdb, err
		}
		if after, err := os.Stat(path); err == nil && os.SameFile(before, after) {
			return bdb, nil
		}
		bdb.Close()
	}
}

// lockedHook, when set (tests only), runs once bbolt holds a file's lock.
var lockedHook func(path string)

func openBoltOnce(path string, opt *bolt.Options) (bdb *bolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			bdb, err = nil, fmt.Errorf("open %s: the database is damaged (%v): %w (restore it from a backup, or %s)", path, p, ErrCorrupt, AnotherDB)
		}
	}()
	return bolt.Open(path, 0o600, opt)
}

func (db *DB) recoverCorrupt(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("database %s is damaged (%v): %w (restore it from a backup, or %s)", db.path, p, ErrCorrupt, AnotherDB)
	}
}

// ErrDiskFull is wrapped by a write that failed for lack of space: the
// disk is full, a quota is reached, or the file size limit (RLIMIT_FSIZE,
// ulimit -f) is. The transaction was rolled back; earlier commits are
// intact.
var ErrDiskFull = errors.New("no space to grow the database file")

// diskError adds ErrDiskFull and a hint to a write error caused by a full
// disk. bbolt reports a failed grow with %s, so the text is checked too.
func diskError(path string, err error) error {
	if err == nil {
		return nil
	}
	full := noRoom(err) || errors.Is(err, syscall.EFBIG) || strings.Contains(err.Error(), syscall.EFBIG.Error())
	if !full {
		return err
	}
	return fmt.Errorf("%v: %w: the disk is full, a disk quota is spent, or the file size limit (ulimit -f) is reached; free space, then run again (this transaction was rolled back; %s holds everything committed before it)",
		err, ErrDiskFull, path)
}

// bbolt's pages as laid out on disk (native byte order): a 16-byte page
// header (id, flags, count, overflow), then for a meta page the meta
// (magic, version, page size, flags, root bucket, freelist page, high
// water mark, txid, checksum).
const (
	pageHeaderLen = 16
	metaOffset    = pageHeaderLen
	metaMagic     = 0xED0CDAED
	metaVersion   = 2
	metaSumStart  = metaOffset
	metaSumEnd    = metaOffset + 56 // the checksum field
	metaLen       = metaOffset + 64

	branchPageFlag   = 0x01
	leafPageFlag     = 0x02
	freelistPageFlag = 0x10
	noFreelist       = ^uint64(0) // the freelist is not synced to disk
)

type metaInfo struct {
	pageSize uint64
	root     uint64 // page of the root bucket
	freelist uint64 // page of the free list
	pgid     uint64 // high water mark: pages [0, pgid) are in use
	txid     uint64
}

// readMeta decodes the meta page at off. magic reports whether it starts
// like one (a bbolt file); ok whether it also passes its checksum.
func readMeta(f *os.File, off int64) (m metaInfo, magic, ok bool) {
	buf := make([]byte, metaLen)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return metaInfo{}, false, false
	}
	ne := binary.NativeEndian
	if ne.Uint32(buf[metaOffset:]) != metaMagic {
		return metaInfo{}, false, false
	}
	if ne.Uint32(buf[metaOffset+4:]) != metaVersion {
		return metaInfo{}, true, false
	}
	h := fnv.New64a()
	h.Write(buf[metaSumStart:metaSumEnd])
	if h.Sum64() != ne.Uint64(buf[metaSumEnd:]) {
		return metaInfo{}, true, false
	}
	return metaInfo{
		pageSize: uint64(ne.Uint32(buf[metaOffset+8:])),
		root:     ne.Uint64(buf[metaOffset+16:]),
		freelist: ne.Uint64(buf[metaOffset+32:]),
		pgid:     ne.Uint64(buf[metaOffset+40:]),
		txid:     ne.Uint64(buf[metaOffset+48:]),
	}, true, true
}

// checkFile is the cheap consistency check Open runs before bbolt reads
// the file: it reads the two meta pages, the root page's header and the
// free list (a few pages, whatever the file's size), where bbolt would
// panic, fault, or run on with a damaged free list that later hands out
// pages in use. It fails with ErrNotDatabase for a file that is not bbolt
// at all, and with ErrCorrupt for a bbolt file whose meta pages fail their
// checksum, that is shorter than its meta says (a copy cut short), or
// whose root or free list page is not what the meta says. The full check
// (every page, every bucket, every item) is DB.Check, run by `verify`. A
// missing or empty file is left to checkPath.
func checkFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		return nil
	}
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("open %s: the database is damaged: %s: %w (restore it from a backup, or %s)", path, fmt.Sprintf(format, args...), ErrCorrupt, AnotherDB)
	}
	var best metaInfo
	found, anyMagic := false, false
	m0, magic0, ok0 := readMeta(f, 0)
	anyMagic = magic0
	if ok0 {
		best, found = m0, true
	}
	// The second meta page sits one page in; when the first is damaged,
	// try the page sizes bbolt uses.
	sizes := []int64{4096, 8192, 16384, 65536}
	if ok0 {
		sizes = []int64{int64(m0.pageSize)}
	}
	for _, ps := range sizes {
		m1, magic, ok := readMeta(f, ps)
		anyMagic = anyMagic || magic
		if ok && uint64(ps) == m1.pageSize {
			if !found || m1.txid > best.txid {
				best, found = m1, true
			}
			break
		}
	}
	switch {
	case !anyMagic:
		return fmt.Errorf("open %s: %w: it is not a bbolt database (no bbolt meta page; a sawtooth database is one): check the path, or %s", path, ErrNotDatabase, AnotherDB)
	case !found || best.pageSize < 512 || best.pageSize > 1<<20:
		return corrupt("both meta pages fail their checks")
	}
	if need := best.pgid * best.pageSize; uint64(fi.Size()) < need {
		return corrupt("the file is truncated: it holds %d bytes, its pages reach byte %d", fi.Size(), need)
	}
	if best.root < 2 || best.root >= best.pgid {
		return corrupt("the meta page's root bucket is page %d, outside pages 2..%d", best.root, best.pgid-1)
	}
	if id, flags, _, _, ok := readPageHeader(f, best.root, best.pageSize); !ok || id != best.root || flags&(branchPageFlag|leafPageFlag) == 0 {
		return corrupt("the root bucket's page %d is damaged", best.root)
	}
	if best.freelist == noFreelist {
		return nil
	}
	if best.freelist < 2 || best.freelist >= best.pgid {
		return corrupt("the meta page's free list is page %d, outside pages 2..%d", best.freelist, best.pgid-1)
	}
	return checkFreelist(f, best, corrupt)
}

func readPageHeader(f *os.File, id, pageSize uint64) (pid uint64, flags, count uint16, overflow uint32, ok bool) {
	var h [pageHeaderLen]byte
	if _, err := f.ReadAt(h[:], int64(id*pageSize)); err != nil {
		return 0, 0, 0, 0, false
	}
	ne := binary.NativeEndian
	return ne.Uint64(h[:]), ne.Uint16(h[8:]), ne.Uint16(h[10:]), ne.Uint32(h[12:]), true
}

// checkFreelist reads the free list page (and its overflow) and checks
// that every free page id is a real page, in increasing order.
func checkFreelist(f *os.File, m metaInfo, corrupt func(string, ...any) error) error {
	id, flags, count, overflow, ok := readPageHeader(f, m.freelist, m.pageSize)
	if !ok || id != m.freelist || flags&freelistPageFlag == 0 {
		return corrupt("the free list page %d is damaged", m.freelist)
	}
	if m.freelist+uint64(overflow) >= m.pgid {
		return corrupt("the free list page %d overflows past the last page", m.freelist)
	}
	buf := make([]byte, (uint64(overflow)+1)*m.pageSize-pageHeaderLen)
	if _, err := f.ReadAt(buf, int64(m.freelist*m.pageSize+pageHeaderLen)); err != nil {
		return corrupt("the free list page %d cannot be read: %v", m.freelist, err)
	}
	ne := binary.NativeEndian
	n := uint64(count)
	if count == 0xFFFF { // the real count is the first element
		n, buf = ne.Uint64(buf), buf[8:]
	}
	if n*8 > uint64(len(buf)) {
		return corrupt("the free list page %d claims %d entries, more than it holds", m.freelist, n)
	}
	var prev uint64
	for i := uint64(0); i < n; i++ {
		p := ne.Uint64(buf[i*8:])
		if p < 2 || p >= m.pgid || (i > 0 && p <= prev) {
			return corrupt("the free list page %d lists page %d, not a free page of this file", m.freelist, p)
		}
		prev = p
	}
	return nil
}
