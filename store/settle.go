// This file packs the pages of an out/<stage> bucket once the ids they
// hold can get no more outputs there (they are settled).
//
// Why: a run commits a stage's outputs in waves, not in id order. The
// items a claim's cached answers finish come first, about half the ids
// of a stretch, and the items its paid calls finish come in the next few
// commits, the other half, interleaved. Each wave lands in pages the
// previous one split, and bbolt splits a page only when it outgrows its
// size, at the bucket's FillPercent, and never joins pages that only
// grew: a page the first wave left 0.6 full, doubled by the next, splits
// into two pages 0.6 full, and so on. After a 100,000-item run the leaf
// pages of out/aggregate were a median 0.60 full (7.7 MB of pages for
// 5.1 MB of keys, values and element headers), out/classify the same; no
// FillPercent fixes that (0.5 to 1.0 gave 7.5 to 9.6 MB), since one value
// per bucket and transaction cannot suit a stretch the commit completes
// and a stretch it half fills (bench/RESULTS.md).
//
// What: every commit that puts outputs in out/<stage> walks the state
// bucket from the lowest id it does not yet know to be settled (its
// mark), in key order, while each id is settled for the stage: no longer
// queued or in a batch at the stage or one before it. The keys of
// out/<stage> from the mark up to the first unsettled id get no more
// outputs but by a user's re-run, re-queue or edit, so the commit packs
// their pages full: it deletes each key and puts it back (the same
// bytes), which marks its page for bbolt's rebalance, and sets the
// bucket's FillPercent to repackFill. bbolt's rebalance (node.rebalance,
// v1.5.0) joins a page a transaction deleted from into its left
// neighbour when the page holds at most pageSize*FillPercent/2 bytes,
// reading FillPercent unclamped, and the commit then splits what was
// joined at FillPercent clamped to 1.0: the touched pages and the one
// before them become full pages and one remainder, which the next
// commit's stretch joins again. TestRepack_boltJoinsPagesAboveFullFill
// fails if a bbolt upgrade stops doing so; nothing else depends on it
// (the keys and values are the same either way).
//
// The mark lives in the DB handle, not the file: a process starts at the
// lowest key it puts, so a night does not walk what earlier runs left,
// and moves it down when it puts a key below it (an edited or re-queued
// item). The walk stops at the highest key the process has put and after
// a budget of state records in proportion to the commit's outputs, so a
// commit's cost follows its own work even when its ids are spread over
// a large file (the rest is walked by the next commits). What it
// rewrites is capped too, in bytes: settleWalkPerPut outputs for each
// output the commit put, and more only within settleRepackBytes, so a
// commit of one output does not rewrite thousands of large ones. Ids that do not
// come in key order (random ids) settle only when most of a stage is
// done, and then only as far as the budgets reach: their pages keep
// today's fill.

package store

import (
	"bytes"
	"maps"
	"slices"
	"sync"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// The walk's budget in state records: settleWalkPerPut for each output a
// commit put in the bucket, at least settleWalkMin. A 100,000-item run
// walks each id once per stage; the budget only binds when the walk
// crosses ids the process did not write (a night's ids spread over a
// large file), where it keeps a commit's cost in proportion to its work.
const (
	settleWalkMin    = 4096
	settleWalkPerPut = 8
)

// settleRepackBytes caps what a commit rewrites beyond settleWalkPerPut
// outputs for each output it put, in bytes of keys and values: at a
// run's end, a straggler's commit packs the few thousand small outputs
// its wave left behind (about 40 bytes each), where a floor in outputs
// alone let a commit of one output rewrite 4,096 outputs of 4 KB (17 MB
// of pages, review of feat/bfill).
const settleRepackBytes = 256 << 10

// outSpan is what a transaction put in one out/<stage> bucket: its
// lowest and highest key and how many puts.
type outSpan struct {
	lo, hi []byte
	n      int
}

// settleMark is how far the process has packed one out/<stage> bucket.
type settleMark struct {
	// next is the lowest id not known to be settled: the bucket's keys
	// from the mark's start up to it were packed.
	next []byte
	// high is the highest key the process has put in the bucket: the
	// walk stops past it.
	high []byte
	// mixed is set once a transaction of the process put a key in the
	// bucket that did not sort after all it held. Until then every put
	// was an append, packed at appendFill (fill.go), so the walk only
	// moves the mark: touching those keys would rewrite full pages
	// (a night of new ids in order).
	mixed bool
	// txid is the transaction that set the mark, so a later one's mark
	// is never replaced by an earlier one's (commit handlers run after
	// bbolt lets the next writer in).
	txid int
}

// settleMarks holds the DB handle's marks, by stage index.
type settleMarks struct {
	mu    sync.Mutex
	marks map[int]settleMark
}

func (m *settleMarks) get(si int) settleMark {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.marks[si]
}

func (m *settleMarks) set(si int, mark settleMark) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.marks == nil {
		m.marks = map[int]settleMark{}
	}
	if mark.txid > m.marks[si].txid {
		m.marks[si] = mark
	}
}

// notePut records, for packSettled, that the transaction put key id in
// out/<stage si>.
func (w *writer) notePut(si int, id []byte) {
	if w.spans == nil {
		w.spans = map[int]*outSpan{}
	}
	sp := w.spans[si]
	if sp == nil {
		w.spans[si] = &outSpan{lo: id, hi: id, n: 1}
		return
	}
	sp.n++
	if bytes.Compare(id, sp.lo) < 0 {
		sp.lo = id
	}
	if bytes.Compare(id, sp.hi) > 0 {
		sp.hi = id
	}
}

// packSettled packs, in each out/<stage> bucket the transaction put
// outputs in, the pages of the ids that became settled (see the file's
// comment). It must run after the transaction's last put in those
// buckets: it sets their FillPercent for the commit. The marks move
// when the transaction commits.
func (w *writer) packSettled() error {
	// In stage order, not the map's: the pages each repack frees and
	// takes then do not vary from run to run.
	for _, si := range slices.Sorted(maps.Keys(w.spans)) {
		sp := w.spans[si]
		b := w.bucket(outBucket(w.stageName(si)))
		if b == nil {
			continue
		}
		m := w.db.settle.get(si)
		if m.next == nil || bytes.Compare(sp.lo, m.next) < 0 {
			m.next = bytes.Clone(sp.lo)
		}
		if bytes.Compare(sp.hi, m.high) > 0 {
			m.high = bytes.Clone(sp.hi)
		}
		m.mixed = m.mixed || !w.ordered[b]
		from := m.next
		m.next = w.settledUpTo(si, from, m.high, max(settleWalkMin, settleWalkPerPut*sp.n))
		m.txid = w.tx.ID()
		if m.mixed {
			var err error
			if m.next, err = repack(b, from, m.next, settleWalkPerPut*sp.n); err != nil {
				return err
			}
		}
		mark := m
		w.tx.OnCommit(func() { w.db.settle.set(si, mark) })
	}
	return nil
}

// settledUpTo walks the state bucket from id from while each id is
// settled for stage si, through at most budget ids and no further than
// high, and returns where it stopped: the first id not settled or not
// walked (a key just past high when it passed it).
func (w *writer) settledUpTo(si int, from, high []byte, budget int) []byte {
	c := w.stateB.Cursor()
	k, v := c.Seek(from)
	for ; k != nil && budget > 0; k, v = c.Next() {
		if bytes.Compare(k, high) > 0 {
			break
		}
		s, ok := decodeState(v)
		if !ok || s.Stage <= si && (s.Status == pipeline.StatusQueued || s.Status == pipeline.StatusInBatch) {
			return bytes.Clone(k)
		}
		budget--
	}
	if k == nil || bytes.Compare(k, high) > 0 {
		return append(bytes.Clone(high), 0)
	}
	return bytes.Clone(k)
}

// repack deletes the keys of b from from on and puts each back with its
// value (every key but a nested bucket's), and sets b to pack at
// repackFill, so bbolt joins and refills their pages when the
// transaction commits (see the file's comment). It stops before to, and
// once it has taken at least least keys, before the key that would take
// it past settleRepackBytes; it returns where it stopped, the first key
// not repacked (to when it got there).
func repack(b *bolt.Bucket, from, to []byte, least int) (end []byte, err error) {
	if bytes.Compare(from, to) >= 0 {
		return to, nil
	}
	end = to
	var kvs [][2][]byte
	size := 0
	c := b.Cursor()
	for k, v := c.Seek(from); k != nil && bytes.Compare(k, to) < 0; k, v = c.Next() {
		// A nil value is a nested bucket, which no output is (a damaged
		// or foreign file): Delete refuses it, failing every commit whose
		// walk crosses it. Check reports it; the repack leaves it be.
		if v == nil {
			continue
		}
		if len(kvs) >= least && size+len(k)+len(v) > settleRepackBytes {
			end = bytes.Clone(k)
			break
		}
		size += len(k) + len(v)
		kvs = append(kvs, [2][]byte{bytes.Clone(k), bytes.Clone(v)})
	}
	if len(kvs) == 0 {
		return end, nil
	}
	for _, kv := range kvs {
		if err := b.Delete(kv[0]); err != nil {
			return nil, err
		}
		if err := b.Put(kv[0], kv[1]); err != nil {
			return nil, err
		}
	}
	b.FillPercent = repackFill
	return end, nil
}
