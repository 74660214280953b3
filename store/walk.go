package store

import (
	"time"

	bolt "go.etcd.io/bbolt"
)

// A read that walks the whole file (an export, a report's pass over the
// done items, verify) touches every page of bbolt's mapping of the file,
// and a touched page of a mapped file counts in the process's resident
// memory until the kernel reclaims it: at a million items that was the
// whole file, ~500 MB. walk is view for such reads: every releaseEvery
// items the walker calls release when the process's resident file pages
// pass releaseAbove, which tells the kernel the mapping's pages are not
// needed (releasePages). The mapping is a read-only shared
// mapping of the file, so nothing is lost: a page touched again is read
// back from the page cache, and the bytes of the open transaction stay
// the same since bbolt does not reuse a page while a read holds it. The
// walk stays one read transaction, so it is one snapshot of the file.

// releaseEvery is how many items a walk reads between two looks at the
// process's resident file pages, and releases when they pass
// releaseAbove: the pages of 256 items are about a MB, or some tens of
// MB when the file is cached in large folios.
var releaseEvery = 256

// releaseAbove is the process's file-backed resident memory (its
// binary's pages and the mapping's) at or under which a walk does not
// release. A release drops every page of the mapping, the other walks'
// too (FieldNames runs three at once), and each page touched again is a
// fault; where the leaves lie apart, each fault maps the cached pages
// around the one touched, which a release every few thousand items
// dropped mostly unused. An export holds its heap under 96 MB
// (internal/cli's exportMemoryLimit), so with this bound it stays under
// 200 MB. It also bounds a walk over a file the kernel caches in large
// folios, where one fault maps a whole folio and a count of items bounded
// nothing. Tests set it to 0 (release on the count alone).
var releaseAbove int64 = 64 << 20

// residentFile is the process's file-backed resident memory in bytes
// (residentShared; -1 when not known, and a walk then releases on its
// count alone); tests replace it.
var residentFile = residentShared

// release is releasePages; tests count its calls.
var release = releasePages

// walker counts a walk's items and releases the pages they touched.
type walker struct {
	db *DB
	tx *bolt.Tx
	n  int
	// every is how many items go between two releases when not
	// releaseEvery (0): a walk whose every item is a lookup somewhere
	// else in the file (lookupWalk) touches a page there each time.
	every int
	// tables is the memory of the answer tables the walk holds
	// (answertable.go): every stage's count against one tableBytes.
	tables int
}

// lookupWalk makes w look every releaseEvery/8 items: for a walk of
// entries whose every item is looked up elsewhere in the file, as the
// dead letters' records are. Each such lookup maps 30-40 KB of the file
// (the kernel maps the cached pages around the one touched), so 4,096 of
// them kept 150 MB resident in a report of 7,922 dead letters at 1M
// items; a walk along one bucket maps its pages once in order.
func (w *walker) lookupWalk() { w.every = max(releaseEvery/8, 1) }

// alongWalk makes w look every releaseEvery items again, after a
// lookupWalk: for a walk along a bucket.
func (w *walker) alongWalk() { w.every = 0 }

// step counts one item; every releaseEvery items (or w.every) it
// releases the pages touched so far when they pass releaseAbove.
func (w *walker) step() {
	w.n++
	every := w.every
	if every == 0 {
		every = releaseEvery
	}
	if w.n%every == 0 {
		w.releaseIfResident()
	}
}

// releaseIfResident releases the pages when the process's file pages
// resident pass releaseAbove.
func (w *walker) releaseIfResident() {
	if r := residentFile(); releaseAbove <= 0 || r < 0 || r > releaseAbove {
		w.release()
	}
}

// release drops the mapping's resident pages, up to the file's size as
// this transaction sees it (the mapping is at least that large, and the
// open read keeps bbolt from remapping it meanwhile).
func (w *walker) release() {
	release(w.db.bolt.Info().Data, uintptr(w.tx.Size()))
}

// walk runs fn in one read transaction, as view does, with a walker fn
// calls step on for each item it reads; the pages are released once more
// when fn returns.
func (db *DB) walk(fn func(tx *bolt.Tx, w *walker) error) error {
	return db.view(func(tx *bolt.Tx) error {
		w := &walker{db: db, tx: tx}
		defer w.release()
		return fn(tx, w)
	})
}

// releaseTick is how often releaseWhile releases: bbolt's page check
// reads some tens of MB in that time.
const releaseTick = 10 * time.Millisecond

// releaseWhile releases the pages every releaseTick until the returned
// stop is called, and once more then: for a read inside bbolt that calls
// back nothing per item (its page check). Releasing while it reads is
// safe for the reasons above.
func (w *walker) releaseWhile() (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(releaseTick)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				w.release()
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		w.release()
	}
}

// checkPages runs read, a read inside bbolt that calls back nothing per
// item, releasing the pages meanwhile (releaseWhile); the releases stop
// when read returns or panics (a damaged file: view recovers it), never
// later, when the transaction they read through is closed.
func (w *walker) checkPages(read func()) {
	stop := w.releaseWhile()
	defer stop()
	read()
}

// releaseMapped releases every page of the mapping, in a read transaction
// of its own (which keeps bbolt from remapping meanwhile). A writable
// handle calls it once open and after its write transactions: a night's
// lookups and commits touch pages all over a large file (the B-tree
// paths to the ids, the queues, the counts, the opening checks), each of
// which would otherwise stay resident until the process ends. Pages a
// later transaction needs come back from the page cache, a minor fault
// each, so after a write it releases at most once every
// releaseWritesEvery: a busy run's commits would otherwise refault
// their hot pages hundreds of times a second.
func (db *DB) releaseMapped() {
	_ = db.bolt.View(func(tx *bolt.Tx) error {
		release(db.bolt.Info().Data, uintptr(tx.Size()))
		return nil
	})
	db.released.Store(time.Now().UnixNano())
}

// releaseWritesEvery is how often writes release the mapping's pages at
// most; tests set it to zero.
var releaseWritesEvery = 100 * time.Millisecond

// A write also releases sooner, once releaseWritesSoonest has passed,
// when the process's resident pages of mapped files are over
// releaseSharedAbove. A large file's writes touch pages all over it (a
// commit of a few hundred items at a million: their records, states
// and outputs, each fault mapping 64-128 KiB around it), and in 100 ms
// a run of a million items held up to 140 MB of the file resident on
// top of a heap of 45-97 MB. Under the threshold (any night, a run of a
// hundred thousand) nothing changes; over it the releases come as often
// as the pages pile up, at most every releaseWritesSoonest: should the
// executable's pages alone be over it, commits do not refault their hot
// pages each time. 96 MB is the executable's ~20 MB and about 75 MB of
// the file's.
var releaseSharedAbove int64 = 96 << 20

const releaseWritesSoonest = 10 * time.Millisecond

// releaseAfterWrite is releaseMapped after a write, unless the last
// release was less than releaseWritesEvery ago and the mapped pages are
// within releaseSharedAbove.
func (db *DB) releaseAfterWrite() {
	since := time.Since(time.Unix(0, db.released.Load()))
	if since >= releaseWritesEvery || since >= releaseWritesSoonest && residentShared() > releaseSharedAbove {
		db.releaseMapped()
	}
}
