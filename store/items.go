// This file reads every item with where it stands, for the flat export
// of all items (done, queued, dead, in a batch job).

package store

import (
	"bytes"
	"encoding/json"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// ForEachItem calls fn with every item in id order, in one read
// transaction: memory holds a few hundred items' records at most
// (walkscan.go) whatever the item count, and the file's pages it read
// are released as it goes (walk.go). The record and the outputs are
// read by cursors that move along with the states (every bucket is in
// id order), not looked up item by item.
// The bytes handed to fn are copies, but fn must not use this DB's
// writing methods (bbolt would deadlock against the open read on a
// writable handle that needs to remap).
func (db *DB) ForEachItem(fn func(pipeline.ItemState) error) error {
	return db.walk(func(tx *bolt.Tx, w *walker) error {
		outs := db.newOutputReader(tx, w)
		scan := db.scanItems(tx)
		defer scan.stop()
		for {
			b, ok := scan.next()
			if !ok {
				return nil
			}
			for i := range b.items {
				if err := db.itemState(tx, w, outs, &b.items[i], fn); err != nil {
					return err
				}
			}
			if b.err != nil {
				return b.err
			}
			scan.done(b)
		}
	})
}

// itemState decodes the item the scan found (scanned) and calls fn with
// it.
func (db *DB) itemState(tx *bolt.Tx, w *walker, outs *outputReader, it *scannedItem, fn func(pipeline.ItemState) error) error {
	w.step()
	k := it.id
	s, ok := decodeState(it.state)
	if !ok || s.Stage >= len(db.stages) {
		return pipeline.Damaged(string(k), "", nil, "corrupt state record")
	}
	is := pipeline.ItemState{Stage: db.stages[s.Stage].Name, Status: s.Status}
	is.Record = it.rec
	if it.recErr != nil {
		return it.recErr
	}
	var err error
	if is.Outputs, err = outs.decode(k, is.Record.Text, s, it.outs); err != nil {
		return err
	}
	if s.Status == pipeline.StatusDead {
		if raw := tx.Bucket(deadBucket(is.Stage)).Get(k); raw != nil {
			var dl pipeline.DeadLetter
			if err := json.Unmarshal(raw, &dl); err != nil {
				return pipeline.Damaged(string(k), is.Stage, err, "dead/%s is damaged", is.Stage)
			}
			is.Dead = &dl
		}
	}
	return fn(is)
}

// outputReader reads the outputs of the items a walk visits in id
// order: each stage's out/<stage> by a follower, and the stage's shared
// record (shared.go) read once, not looked up again for every item whose
// state refers to it. An item's outputs are decoded into one new buffer
// (an allocation per item, not one per output and its growth: at a
// million items the garbage collector's work was a quarter of an
// export's CPU).
type outputReader struct {
	db     *DB
	tx     *bolt.Tx
	outs   []*follower
	ahead  []*answersAhead // each stage's cached answers, read ahead
	shared [][]byte        // meta shared/<stage>, nil when the stage has none
	spans  []outputSpan
	// entries are at's entries of the item in each out/<stage>.
	entries [][]byte
	// extra is what an item's outputs took beyond its text's length, a
	// moving average: the next buffer is sized to the text plus it, so
	// most items need no growth and one long output does not make every
	// later buffer as large.
	extra int
}

// outputSpan is where stage si's output lies in an item's buffer.
type outputSpan struct{ si, start, end int }

func (db *DB) newOutputReader(tx *bolt.Tx, w *walker) *outputReader {
	n := len(db.stages)
	r := &outputReader{db: db, tx: tx, outs: make([]*follower, n), ahead: make([]*answersAhead, n), shared: make([][]byte, n), extra: 256}
	meta := tx.Bucket(bucketMeta)
	for i, st := range db.stages {
		r.outs[i] = follow(tx.Bucket(outBucket(st.Name)))
		r.ahead[i] = readAhead(tx, st.Name, w)
		if meta != nil && sharedBit(i) != 0 {
			r.shared[i] = meta.Get(sharedKey(st.Name))
		}
	}
	return r
}

// at is the outputs of the item with id, text and state s; ids must be
// asked in ascending order.
func (r *outputReader) at(id []byte, text string, s state) (map[string]json.RawMessage, error) {
	r.entries = r.entries[:0]
	for _, f := range r.outs {
		r.entries = append(r.entries, f.at(id))
	}
	return r.decode(id, text, s, r.entries)
}

// decode is at for the item's entries in each stage's out/<stage> (nil
// where it has none), found by the caller.
func (r *outputReader) decode(id []byte, text string, s state, entries [][]byte) (map[string]json.RawMessage, error) {
	buf := make([]byte, 0, len(text)+r.extra+64)
	r.spans = r.spans[:0]
	textFn := func() string { return text }
	for i, st := range r.db.stages {
		start := len(buf)
		var ok bool
		var err error
		if v := entries[i]; v != nil {
			if buf, ok, err = r.db.appendOutput(r.tx, buf, st.Name, id, v, textFn, r.ahead[i]); err != nil {
				return nil, pipeline.Damaged(string(id), st.Name, err, "out/%s is damaged", st.Name)
			}
		} else if s.Shared&sharedBit(i) != 0 {
			if r.shared[i] == nil {
				return nil, pipeline.Damaged(string(id), st.Name, nil, "its state refers to the shared output of %s, which is missing", st.Name)
			}
			if buf, err = r.db.appendRecord(r.tx, buf, r.shared[i], packCtx{id: string(id), text: textFn}); err != nil {
				return nil, pipeline.Damaged(string(id), st.Name, err, "meta/shared/%s is damaged", st.Name)
			}
			ok = true
		}
		if ok {
			r.spans = append(r.spans, outputSpan{si: i, start: start, end: len(buf)})
		}
	}
	r.extra = max((7*r.extra+len(buf)-len(text))/8, 0)
	m := make(map[string]json.RawMessage, len(r.spans))
	for _, sp := range r.spans {
		m[r.db.stages[sp.si].Name] = buf[sp.start:sp.end:sp.end]
	}
	return m, nil
}

// follower reads a bucket's values for keys asked in ascending order,
// moving one cursor forward instead of searching the tree for each.
type follower struct {
	c    *bolt.Cursor
	k, v []byte
}

func follow(b *bolt.Bucket) *follower {
	if b == nil {
		return &follower{}
	}
	f := &follower{c: b.Cursor()}
	f.k, f.v = f.c.First()
	return f
}

// at is the value of key, nil when the bucket has none; keys must be
// asked in ascending order.
func (f *follower) at(key []byte) []byte {
	for f.k != nil && bytes.Compare(f.k, key) < 0 {
		f.k, f.v = f.c.Next()
	}
	if f.k != nil && bytes.Equal(f.k, key) {
		return f.v
	}
	return nil
}
