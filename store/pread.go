package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// A night's lookups of cached answers land anywhere in a large file: the
// answers are keyed by a hash, so each lookup is a leaf page (and the
// branch pages above it) that no other lookup of the night shares.
// Through bbolt's mapping each such page is a page fault, and the kernel
// maps the cached pages around it (fault-around; on kernels that cache
// files in large folios, the whole folio): at a million items, 1,000
// random touches of a synced copy left 110 MB of the file resident and
// took 25-140 ms, against 3 ms for 1,000 reads of a page with pread.
// A 1,000-item night looks each answer up three or four times (the
// cache, the commit that refers the output to it, the aggregate stage's
// queue, the cube's fold), most after the mapping was released
// (walk.go): on a 1M file, most of its page faults and resident set.
//
// pageReader reads those B-trees with pread instead, into memory of its
// own, so nothing of them stays mapped. It reads the pages bbolt would
// read, as a transaction sees them: a page reachable from a committed
// root is never rewritten while a transaction that sees that root is
// open (bbolt frees it only after), and bbolt writes with pwrite, so the
// page cache pread reads is the one the mapping shows. A write
// transaction's own changes are not on disk yet: its callers read only
// keys it has not written (answerByRef). Any page that does not read as
// the page asked for (a damaged file, a short read) makes the lookup
// report !ok, and the caller reads through bbolt as before.
//
// Every lookup goes through the same few branch pages at the top of the
// tree, so those are kept (branches) for as long as no commit can have
// replaced them: the pages a transaction reads are those of the commit
// it started from (its snapshot), and bbolt never rewrites a page in
// place, so a branch page read at one snapshot is that page at that
// snapshot. A lookup at a newer snapshot empties them.
type pageReader struct {
	f        *os.File
	pageSize int
	bufs     sync.Pool // *[]byte of pageSize

	mu       sync.Mutex
	snapshot uint64            // the commit branches were read at
	branches map[uint64][]byte // page id -> a branch page of that commit
	kept     int               // bytes in branches
}

// A branch or leaf page (see safe.go for the header) holds count 16-byte
// elements after its header: a branch element is pos u32, ksize u32,
// pgid u64, a leaf element flags u32, pos u32, ksize u32, vsize u32, pos
// counting from the element itself
// (go.etcd.io/bbolt/internal/common/page.go).
const (
	pageElemSize   = 16
	bucketLeafFlag = 0x01
	// maxReadPages bounds a page's overflow: a larger one is read
	// through bbolt.
	maxReadPages = 256
	// maxReadDepth bounds the tree's depth (a million keys take 4).
	maxReadDepth = 16
	// maxKeptBranches bounds the branch pages kept, in bytes: a million
	// answers have 258 of 4 KiB, of which a lookup reads three.
	maxKeptBranches = 1 << 20
)

// newPageReader opens path for reading the pages of db, the bbolt handle
// open on it; nil when it cannot, or when what it reads is not db's
// file (the path replaced between the two opens): lookups then read
// through bbolt.
func newPageReader(path string, db *bolt.DB) *pageReader {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	r := &pageReader{f: f, pageSize: db.Info().PageSize, branches: map[uint64][]byte{}}
	r.bufs.New = func() any { b := make([]byte, r.pageSize); return &b }
	same := true
	_ = db.View(func(tx *bolt.Tx) error {
		// The root page of a bucket that has one, as bbolt's mapping
		// and pread see it (a file of inline buckets only has nothing
		// to compare, and nothing pread would read yet).
		return tx.ForEach(func(_ []byte, b *bolt.Bucket) error {
			id := b.Root()
			if id == 0 {
				return nil
			}
			info, err := tx.Page(int(id))
			p, ok := r.page(new([]byte), uint64(id))
			same = err == nil && info != nil && ok && pageCount(p) == info.Count &&
				binary.NativeEndian.Uint32(p[12:]) == uint32(info.OverflowCount)
			return errStopWalk
		})
	})
	if !same {
		f.Close()
		return nil
	}
	return r
}

func (r *pageReader) close() {
	if r != nil {
		r.f.Close()
	}
}

// page reads page id, with its overflow pages, into *buf (grown when
// needed); ok is false when it is not a branch or leaf page with that id.
func (r *pageReader) page(buf *[]byte, id uint64) (p []byte, ok bool) {
	if cap(*buf) < r.pageSize {
		*buf = make([]byte, r.pageSize)
	}
	p = (*buf)[:r.pageSize]
	if _, err := r.f.ReadAt(p, int64(id)*int64(r.pageSize)); err != nil {
		return nil, false
	}
	if binary.NativeEndian.Uint64(p) != id {
		return nil, false
	}
	if flags := binary.NativeEndian.Uint16(p[8:]); flags != branchPageFlag && flags != leafPageFlag {
		return nil, false
	}
	if over := binary.NativeEndian.Uint32(p[12:]); over > 0 {
		if over >= maxReadPages {
			return nil, false
		}
		n := int(over+1) * r.pageSize
		if cap(*buf) < n {
			nb := make([]byte, n)
			copy(nb, p)
			*buf = nb
		}
		p = (*buf)[:n]
		if _, err := r.f.ReadAt(p[r.pageSize:], int64(id)*int64(r.pageSize)+int64(r.pageSize)); err != nil {
			return nil, false
		}
	}
	return p, true
}

// snapshotOf is the commit tx reads the file as: a read transaction's
// own id, a write transaction's predecessor (what it has not written).
func snapshotOf(tx *bolt.Tx) uint64 {
	if tx.Writable() {
		return uint64(tx.ID()) - 1
	}
	return uint64(tx.ID())
}

// node is page id as of commit snap: a kept branch page, or read into
// *buf (and kept when it is a branch page of the newest commit asked).
// The page returned must not be written to.
func (r *pageReader) node(buf *[]byte, id, snap uint64) (p []byte, ok bool) {
	r.mu.Lock()
	if snap == r.snapshot {
		if p, ok := r.branches[id]; ok {
			r.mu.Unlock()
			return p, true
		}
	}
	r.mu.Unlock()
	if p, ok = r.page(buf, id); !ok || binary.NativeEndian.Uint16(p[8:]) != branchPageFlag {
		return p, ok
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if snap > r.snapshot {
		clear(r.branches)
		r.snapshot, r.kept = snap, 0
	}
	if snap == r.snapshot && r.kept+len(p) <= maxKeptBranches {
		r.branches[id] = bytes.Clone(p)
		r.kept += len(p)
	}
	return p, true
}

// pageElem is element i of page p: its key, and for a leaf its value
// and flags, for a branch the child's page id; ok is false when the
// element lies outside the page.
func pageElem(p []byte, i int) (key, value []byte, child uint64, flags uint32, ok bool) {
	at := pageHeaderLen + i*pageElemSize
	if at+pageElemSize > len(p) {
		return nil, nil, 0, 0, false
	}
	e := p[at : at+pageElemSize]
	if binary.NativeEndian.Uint16(p[8:]) == branchPageFlag {
		pos, ksize := uint64(binary.NativeEndian.Uint32(e)), uint64(binary.NativeEndian.Uint32(e[4:]))
		if uint64(at)+pos+ksize > uint64(len(p)) {
			return nil, nil, 0, 0, false
		}
		k := uint64(at) + pos
		return p[k : k+ksize], nil, binary.NativeEndian.Uint64(e[8:]), 0, true
	}
	flags = binary.NativeEndian.Uint32(e)
	pos, ksize, vsize := uint64(binary.NativeEndian.Uint32(e[4:])), uint64(binary.NativeEndian.Uint32(e[8:])), uint64(binary.NativeEndian.Uint32(e[12:]))
	if uint64(at)+pos+ksize+vsize > uint64(len(p)) {
		return nil, nil, 0, 0, false
	}
	k := uint64(at) + pos
	return p[k : k+ksize], p[k+ksize : k+ksize+vsize], 0, flags, true
}

// pageCount is how many elements page p holds.
func pageCount(p []byte) int { return int(binary.NativeEndian.Uint16(p[10:])) }

// search is the index bbolt's cursor takes in page p for key: the first
// element whose key is key or after it, and whether it is key; ok is
// false when an element lies outside the page.
func pageSearch(p []byte, key []byte) (i int, exact, ok bool) {
	lo, hi := 0, pageCount(p)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		k, _, _, _, ok := pageElem(p, m)
		if !ok {
			return 0, false, false
		}
		if bytes.Compare(k, key) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < pageCount(p) {
		k, _, _, _, ok := pageElem(p, lo)
		if !ok {
			return 0, false, false
		}
		exact = bytes.Equal(k, key)
	}
	return lo, exact, true
}

// seek is b.Cursor().Seek(key) read with pread from the tree under root:
// the first key at or after key and its value, nil at the end, both
// copies; ok is false when the tree cannot be read this way (see
// pageReader), the value found is a bucket, or root is 0 (an inline
// bucket).
func (r *pageReader) seek(root, snap uint64, key []byte) (k, v []byte, ok bool) {
	k, v, _, ok = r.seekNext(root, snap, key, false)
	return k, v, ok
}

// seekNext is seek, and when withNext the key after the one found (as the
// cursor's Next would read it), nil at the end.
func (r *pageReader) seekNext(root, snap uint64, key []byte, withNext bool) (k, v, next []byte, ok bool) {
	if r == nil || root == 0 {
		return nil, nil, nil, false
	}
	bp := r.bufs.Get().(*[]byte)
	defer r.bufs.Put(bp)
	var path [maxReadDepth]treeStep
	depth := 0
	id := root
	for {
		p, ok := r.node(bp, id, snap)
		if !ok {
			return nil, nil, nil, false
		}
		i, exact, ok := pageSearch(p, key)
		if !ok {
			return nil, nil, nil, false
		}
		if binary.NativeEndian.Uint16(p[8:]) == leafPageFlag {
			return r.leafSeek(bp, snap, p, i, path[:depth], withNext)
		}
		if !exact && i > 0 {
			i--
		}
		if i >= pageCount(p) || depth == maxReadDepth {
			return nil, nil, nil, false
		}
		_, _, child, _, ok := pageElem(p, i)
		if !ok {
			return nil, nil, nil, false
		}
		path[depth] = treeStep{id, i}
		depth++
		id = child
	}
}

// treeStep is a branch page a seek went through and the child it took.
type treeStep struct {
	id    uint64
	index int
}

// errStopWalk ends a ForEach early.
var errStopWalk = errors.New("stop")

// leafSeek is seekNext's answer from element i of leaf p on, path
// leading to p: past a leaf's last element (or an empty leaf) the
// cursor reads on in the next leaf.
func (r *pageReader) leafSeek(bp *[]byte, snap uint64, p []byte, i int, path []treeStep, withNext bool) (k, v, next []byte, ok bool) {
	for i >= pageCount(p) {
		if p, path, ok = r.nextLeaf(bp, snap, path); !ok || p == nil {
			return nil, nil, nil, ok
		}
		i = 0
	}
	if k, v, ok = leafAt(p, i); !ok || !withNext {
		return k, v, nil, ok
	}
	for i++; i >= pageCount(p); i = 0 {
		if p, path, ok = r.nextLeaf(bp, snap, path); !ok || p == nil {
			return k, v, nil, ok
		}
	}
	n, _, _, _, ok := pageElem(p, i)
	return k, v, bytes.Clone(n), ok
}

// leafAt copies out element i of leaf page p.
func leafAt(p []byte, i int) (k, v []byte, ok bool) {
	k, v, _, flags, ok := pageElem(p, i)
	if !ok || flags&bucketLeafFlag != 0 {
		return nil, nil, false
	}
	return bytes.Clone(k), bytes.Clone(v), true
}

// nextLeaf is the leaf after the one path leads to, as a cursor steps
// past a leaf's last element: up to the nearest branch with a later
// child, then down its first children; path is updated to lead to it.
// p is nil past the last leaf.
func (r *pageReader) nextLeaf(bp *[]byte, snap uint64, path []treeStep) (p []byte, _ []treeStep, ok bool) {
	d := len(path) - 1
	for ; d >= 0; d-- {
		if p, ok = r.node(bp, path[d].id, snap); !ok {
			return nil, nil, false
		}
		if path[d].index+1 < pageCount(p) {
			break
		}
	}
	if d < 0 {
		return nil, path, true
	}
	path[d].index++
	path = path[:d+1]
	_, _, id, _, ok := pageElem(p, path[d].index)
	for ok {
		if p, ok = r.node(bp, id, snap); !ok {
			break
		}
		if binary.NativeEndian.Uint16(p[8:]) == leafPageFlag {
			return p, path, true
		}
		if pageCount(p) == 0 || len(path) == maxReadDepth {
			break
		}
		path = append(path, treeStep{id, 0})
		_, _, id, _, ok = pageElem(p, 0)
	}
	return nil, nil, false
}

// txAnswers are the answers the write transaction open through update
// has put (putAnswer): pread reads the file as last committed, so a
// lookup in that transaction reads through bbolt any key that begins
// as one of them does. Only the write transaction reads or writes it.
type txAnswers struct {
	tx *bolt.Tx
	// begun holds the first shortRefLen bytes of each key put (the whole
	// key when shorter): a commit caches thousands of answers, and each
	// looks up others (answerRef).
	begun map[string]struct{}
}

// put records that key was put.
func (w *txAnswers) put(key []byte) {
	if w.begun == nil {
		w.begun = map[string]struct{}{}
	}
	w.begun[string(key[:min(len(key), shortRefLen)])] = struct{}{}
}

// mayBegin reports whether a key put may begin with ref.
func (w *txAnswers) mayBegin(ref []byte) bool {
	if len(w.begun) == 0 {
		return false
	}
	if len(ref) < shortRefLen {
		return true // too short to look up: any key may begin with it
	}
	// A key that begins with ref is at least as long.
	_, ok := w.begun[string(ref[:shortRefLen])]
	return ok
}

// mayPread reports whether a lookup in tx of the answer key ref (or the
// keys it begins) may read the committed file: in a read transaction,
// or in update's write transaction when it has put no such answer.
func (db *DB) mayPread(tx *bolt.Tx, ref []byte) bool {
	if db.pages == nil {
		return false
	}
	if !tx.Writable() {
		return true
	}
	return tx == db.writing.tx && !db.writing.mayBegin(ref)
}

// answerGet is b.Get(k) for b, the answers bucket of a stage in tx.
func (db *DB) answerGet(tx *bolt.Tx, b *bolt.Bucket, k []byte) []byte {
	if db.mayPread(tx, k) {
		if found, v, ok := db.pages.seek(uint64(b.Root()), snapshotOf(tx), k); ok {
			if !bytes.Equal(found, k) {
				return nil
			}
			return v
		}
	}
	return b.Get(k)
}

// answerByRef is referredAnswer(tx.Bucket(answersBucket(stage)), ref).
func (db *DB) answerByRef(tx *bolt.Tx, stage string, ref []byte) []byte {
	b := tx.Bucket(answersBucket(stage))
	if b == nil {
		return nil
	}
	if len(ref) != answerRefLen && len(ref) != shortRefLen {
		return db.answerGet(tx, b, ref)
	}
	if db.mayPread(tx, ref) {
		if k, v, ok := db.pages.seek(uint64(b.Root()), snapshotOf(tx), ref); ok {
			if !bytes.HasPrefix(k, ref) {
				return nil
			}
			return v
		}
	}
	return referredAnswer(b, ref)
}

// answerAndNext is the first key of b, an answers bucket, at or after
// ref and the key after it, read with pread; ok is false when they must
// be read through bbolt.
func (db *DB) answerAndNext(b *bolt.Bucket, ref []byte) (first, next []byte, ok bool) {
	if !db.mayPread(b.Tx(), ref) {
		return nil, nil, false
	}
	first, _, next, ok = db.pages.seekNext(uint64(b.Root()), snapshotOf(b.Tx()), ref, true)
	return first, next, ok
}
