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
// transaction: memory holds one item at a time whatever the item count,
// and the file's pages it read are released as it goes (walk.go). The
// record and the outputs are read by cursors that move along with the
// states (every bucket is in id order), not looked up item by item.
// The bytes handed to fn are copies, but fn must not use this DB's
// writing methods (bbolt would deadlock against the open read on a
// writable handle that needs to remap).
func (db *DB) ForEachItem(fn func(pipeline.ItemState) error) error {
	return db.walk(func(tx *bolt.Tx, w *walker) error {
		items := follow(tx.Bucket(bucketItems))
		outs := make([]*follower, len(db.stages))
		for i, st := range db.stages {
			outs[i] = follow(tx.Bucket(outBucket(st.Name)))
		}
		return tx.Bucket(bucketState).ForEach(func(k, v []byte) error {
			w.step()
			s, ok := decodeState(v)
			if !ok || s.Stage >= len(db.stages) {
				return pipeline.Damaged(string(k), "", nil, "corrupt state record")
			}
			is := pipeline.ItemState{Stage: db.stages[s.Stage].Name, Status: s.Status}
			var err error
			if is.Record, err = db.itemRecord(tx, k, items.at(k)); err != nil {
				return err
			}
			if is.Outputs, err = db.outputsAt(tx, k, is.Record.Text, s, outs); err != nil {
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
		})
	})
}

// outputsAt is outputs for the item with id and state s, its entries in
// out/<stage> read by the followers outs.
func (db *DB) outputsAt(tx *bolt.Tx, id []byte, text string, s state, outs []*follower) (map[string]json.RawMessage, error) {
	m := make(map[string]json.RawMessage, len(db.stages))
	textFn := func() string { return text }
	for i, st := range db.stages {
		var o json.RawMessage
		var err error
		if v := outs[i].at(id); v != nil {
			if o, err = db.decodeOutput(tx, st.Name, id, v, textFn); err != nil {
				return nil, pipeline.Damaged(string(id), st.Name, err, "out/%s is damaged", st.Name)
			}
		} else if s.Shared&sharedBit(i) != 0 {
			if o, err = db.sharedOutput(tx, i, id, textFn); err != nil {
				return nil, err
			}
		}
		if o != nil {
			m[st.Name] = o
		}
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
