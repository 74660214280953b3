// This file moves ForEachItem's cursors, and decodes the items'
// records, in a goroutine of their own.

package store

import (
	"runtime/debug"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// ForEachItem's walk does three kinds of work per item: moving the
// cursors of state, items and every out/<stage> one entry on (and
// faulting in their leaf pages, each a page fault when the leaves lie
// apart in the file), decoding the record, and decoding the outputs. In
// an export the walk was one goroutine of two (the rows are written in
// the other, see report's overlapped) and took twice the writer's CPU:
// the export's row pass went as fast as that one goroutine. itemScan
// moves the cursors in a goroutine of its own and hands the entries'
// bytes over in small batches, so the three share two cores. The bytes
// are the transaction's (the mapping's), valid while it is open; the
// scan is stopped and waited for before the walk's transaction ends.
//
// The scan also decodes each item's record: with the cursors alone it
// had little to do, and the decoding was still the goroutine an export
// waited on (bench/RESULTS.md has the figures). Moving the record over
// gives the three goroutines about as much work each.
//
// Reading one read transaction from two goroutines goes against bbolt's
// documented contract (a transaction and what it creates are for one
// goroutine at a time). It holds because of how bbolt v1.5 is written,
// which this relies on and TestDB_ForEachItem_recordsInTheScan runs
// under -race: a read transaction's buckets keep no cache of child
// buckets or nodes (newBucket makes them only when writable), so
// Bucket, Get and cursors only read the mapping; TxStats counts
// atomically; and a read transaction has no page cache. A second read
// transaction would not do: it could see another snapshot. The dict's
// cache takes entries under its own lock.

// scanBatchItems is how many items go in one batch, and scanBatches how
// many batches there are: the scan runs at most that many items ahead
// of the outputs' decoding (itemState), whose walker releases the
// mapping (walk.go), so a release drops the pages of at most that many
// items scanned but not yet decoded, which the decoding faults back in
// (about a tenth of the pages at 128 x 3 against a releaseEvery of
// 4,096). It is also how many decoded records the heap holds at most.
const (
	scanBatchItems = 128
	scanBatches    = 3
)

// scannedItem is one item as the scan found it: its id, its state, its
// record (nil when items has none) and its entry in each stage's
// out/<stage> (nil where it has none), all the transaction's bytes; and
// the record decoded (itemRecord), or the error decoding it gave.
type scannedItem struct {
	id, state, record []byte
	outs              [][]byte
	rec               pipeline.Record
	recErr            error
}

// scanBatch is some items in id order, and the error the scan stopped
// at after them (a damaged page: bbolt panics, recovered as in view).
type scanBatch struct {
	items []scannedItem
	err   error
}

// itemScan is the scan's goroutine and the batches it fills.
type itemScan struct {
	full, free chan *scanBatch
	quit       chan struct{}
	finished   chan struct{}
}

// scanItems starts the scan of every state in tx, each item with its
// record and outputs' entries, and its record decoded. The caller takes the batches in order
// (next), gives each back when done with its bytes (done), and calls stop
// before tx ends.
func (db *DB) scanItems(tx *bolt.Tx) *itemScan {
	s := &itemScan{
		full:     make(chan *scanBatch, scanBatches),
		free:     make(chan *scanBatch, scanBatches),
		quit:     make(chan struct{}),
		finished: make(chan struct{}),
	}
	n := len(db.stages)
	for range scanBatches {
		b := &scanBatch{items: make([]scannedItem, 0, scanBatchItems)}
		outs := make([][]byte, scanBatchItems*n)
		for i := range scanBatchItems {
			b.items = append(b.items, scannedItem{outs: outs[i*n : (i+1)*n : (i+1)*n]})
		}
		b.items = b.items[:0]
		s.free <- b
	}
	go func() {
		defer close(s.finished)
		defer close(s.full)
		db.scan(tx, s)
	}()
	return s
}

// scan fills the batches, sending each when full and the last when the
// states end or a page is damaged.
func (db *DB) scan(tx *bolt.Tx, s *itemScan) {
	var b *scanBatch
	send := func() bool {
		select {
		case s.full <- b:
			b = nil
			return true
		case <-s.quit:
			return false
		}
	}
	take := func() bool {
		select {
		case b = <-s.free:
			b.items, b.err = b.items[:0], nil
			return true
		case <-s.quit:
			return false
		}
	}
	if !take() {
		return
	}
	err := func() (err error) {
		// A damaged page faults or panics in bbolt: this goroutine is
		// not view's, so it recovers as view does.
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer db.recoverCorrupt(&err)
		items := follow(tx.Bucket(bucketItems))
		outs := make([]*follower, len(db.stages))
		for i, st := range db.stages {
			outs[i] = follow(tx.Bucket(outBucket(st.Name)))
		}
		c := tx.Bucket(bucketState).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(b.items) == cap(b.items) {
				if !send() || !take() {
					return nil
				}
			}
			// The batch takes the item once it is whole: a damaged page
			// panics part way, and the items before it still go out.
			n := len(b.items)
			it := &b.items[:n+1][n]
			it.id, it.state, it.record = k, v, items.at(k)
			for i, f := range outs {
				it.outs[i] = f.at(k)
			}
			it.rec, it.recErr = db.itemRecord(tx, k, it.record)
			b.items = b.items[:n+1]
		}
		return nil
	}()
	if b != nil {
		b.err = err
		send()
	}
}

// next is the next batch, false when the scan has ended.
func (s *itemScan) next() (*scanBatch, bool) {
	b, ok := <-s.full
	return b, ok
}

// done gives b back to the scan to fill again.
func (s *itemScan) done(b *scanBatch) {
	// The records fn was handed are its own now: the batch lets go of
	// them, so a free batch holds no texts.
	for i := range b.items {
		b.items[i].rec, b.items[i].recErr = pipeline.Record{}, nil
	}
	s.free <- b
}

// stop ends the scan and waits for its goroutine.
func (s *itemScan) stop() {
	close(s.quit)
	<-s.finished
}
