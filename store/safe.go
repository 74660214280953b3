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
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer db.recoverCorrupt(&err)
	return diskError(db.path, db.bolt.Update(fn))
}

// openBolt is bolt.Open with the same protection. The free list is synced
// to disk (Options.NoFreelistSync false) rather than rebuilt at open by a
// page walk in a goroutine of bbolt's own, where a damaged page would panic
// beyond any recover; commits pay a little for that, measured at 100,000
// items as within run-to-run noise.
func openBolt(path string, opt *bolt.Options) (bdb *bolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			bdb, err = nil, fmt.Errorf("open %s: the database is damaged (%v): %w (restore it from a backup, or choose another --db)", path, p, ErrCorrupt)
		}
	}()
	return bolt.Open(path, 0o600, opt)
}

func (db *DB) recoverCorrupt(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("database %s is damaged (%v): %w (restore it from a backup, or choose another --db)", db.path, p, ErrCorrupt)
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
	full := errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EFBIG) || errors.Is(err, syscall.EDQUOT)
	if !full {
		msg := err.Error()
		for _, s := range []string{syscall.ENOSPC.Error(), syscall.EFBIG.Error(), syscall.EDQUOT.Error()} {
			full = full || strings.Contains(msg, s)
		}
	}
	if !full {
		return err
	}
	return fmt.Errorf("%v: %w: the disk is full or the file size limit (ulimit -f) is reached; free space, then run again (this transaction was rolled back; %s holds everything committed before it)",
		err, ErrDiskFull, path)
}

// bbolt's meta page, as laid out on disk (native byte order) after the
// 16-byte page header.
const (
	metaOffset   = 16
	metaMagic    = 0xED0CDAED
	metaVersion  = 2
	metaSumStart = metaOffset
	metaSumEnd   = metaOffset + 56 // the checksum field
	metaLen      = metaOffset + 64
)

type metaInfo struct {
	pageSize uint64
	pgid     uint64 // high water mark: pages [0, pgid) are in use
	txid     uint64
}

// readMeta decodes the meta page at off, or returns false if it is not a
// valid one.
func readMeta(f *os.File, off int64) (metaInfo, bool) {
	buf := make([]byte, metaLen)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return metaInfo{}, false
	}
	ne := binary.NativeEndian
	if ne.Uint32(buf[metaOffset:]) != metaMagic || ne.Uint32(buf[metaOffset+4:]) != metaVersion {
		return metaInfo{}, false
	}
	h := fnv.New64a()
	h.Write(buf[metaSumStart:metaSumEnd])
	if h.Sum64() != ne.Uint64(buf[metaSumEnd:]) {
		return metaInfo{}, false
	}
	return metaInfo{
		pageSize: uint64(ne.Uint32(buf[metaOffset+8:])),
		pgid:     ne.Uint64(buf[metaOffset+40:]),
		txid:     ne.Uint64(buf[metaOffset+48:]),
	}, true
}

// checkTruncated fails with ErrCorrupt when the file at path is shorter than
// its own meta page says: a copy cut short, or a disk that filled up
// during a copy. bbolt would map the missing pages and panic, or crash
// with a fault, when it reads them (it reads every page when it opens a
// file for writing). Files it cannot judge (missing, empty, no valid meta
// page) are left for bbolt to report.
func checkTruncated(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		return nil
	}
	var best metaInfo
	found := false
	m0, ok0 := readMeta(f, 0)
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
		if m1, ok := readMeta(f, ps); ok && uint64(ps) == m1.pageSize {
			if !found || m1.txid > best.txid {
				best, found = m1, true
			}
			break
		}
	}
	if !found || best.pageSize == 0 {
		return nil
	}
	if need := best.pgid * best.pageSize; uint64(fi.Size()) < need {
		return fmt.Errorf("open %s: the file is truncated: it holds %d bytes, its pages reach byte %d: %w (restore it from a backup, or choose another --db)",
			path, fi.Size(), need, ErrCorrupt)
	}
	return nil
}
