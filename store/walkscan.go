// This file moves ForEachItem's cursors in a goroutine of their own.

package store

import (
	"runtime/debug"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// ForEachItem's walk does two kinds of work per item: moving the cursors
// of state, items and every out/<stage> one entry on (and faulting in
// their leaf pages, each a page fault when the leaves lie apart in the
// file), then decoding the record and the outputs. In an export the
// walk was one goroutine of two (the rows are written in the other, see
// report's overlapped) and took twice the writer's CPU: the export's
// row pass went as fast as that one goroutine. itemScan moves the
// cursors in a goroutine of its own and hands the entries' bytes over
// in small batches, so the three share two cores. The bytes are the
// transaction's (the mapping's), valid while it is open; the scan is
// stopped and waited for before the walk's transaction ends.
//
// The scan also decodes each item's record. With the cursors alone it
// took a tenth of the CPU the decoding took, and the decoding was still
// the goroutine an export waited on: at a million items 10 s of CPU
// against the writer's 7-8 s and the scan's 1 s. The record is a third
// of the decoding, so each goroutine now has about as much to do. A
// read transaction's pages, buckets and cursors can be read from two
// goroutines (bbolt caches buckets only in a writable one), and the
// dict's cache takes entries under its lock.

// scanBatchItems is how many items go in one batch, and scanBatches how
// many batches there are: the scan runs at most that many items ahead
// of the decoding, whose walker releases the mapping (walk.go), so a
// release drops the pages of at most that many items scanned but not yet
// decoded, which the decoding faults back in (about a tenth of the
// pages at 128 x 3 against a releaseEvery of 4,096).
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
// record and outputs' entries. The caller takes the batches in order
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
func (s *itemScan) done(b *scanBatch) { s.free <- b }

// stop ends the scan and waits for its goroutine.
func (s *itemScan) stop() {
	close(s.quit)
	<-s.finished
}
