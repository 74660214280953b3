// This file reads every item with where it stands, for the flat export
// of all items (done, queued, dead, in a batch job).

package store

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// ForEachItem calls fn with every item in id order, in one read
// transaction: memory holds one item at a time whatever the item count.
// The bytes handed to fn are copies, but fn must not use this DB's
// writing methods (bbolt would deadlock against the open read on a
// writable handle that needs to remap).
func (db *DB) ForEachItem(fn func(ItemState) error) error {
	return db.view(func(tx *bolt.Tx) error {
		items := tx.Bucket(bucketItems)
		outs := make([]*bolt.Bucket, len(db.stages))
		for i, st := range db.stages {
			outs[i] = tx.Bucket(outBucket(st.Name))
		}
		return tx.Bucket(bucketState).ForEach(func(k, v []byte) error {
			s, ok := decodeState(v)
			if !ok || s.Stage >= len(db.stages) {
				return fmt.Errorf("item %q: corrupt state record (run `sawtooth verify`)", k)
			}
			is := ItemState{Stage: db.stages[s.Stage].Name, Status: s.Status}
			if err := json.Unmarshal(items.Get(k), &is.Record); err != nil {
				return fmt.Errorf("item %q: bad record: %w (run `sawtooth verify`)", k, err)
			}
			is.Outputs = make(map[string]json.RawMessage, len(db.stages))
			for i, st := range db.stages {
				if outs[i] == nil {
					continue
				}
				if o := outs[i].Get(k); o != nil {
					is.Outputs[st.Name] = bytes.Clone(o)
				}
			}
			if s.Status == Dead {
				if raw := tx.Bucket(deadBucket(is.Stage)).Get(k); raw != nil {
					var dl pipeline.DeadLetter
					if err := json.Unmarshal(raw, &dl); err != nil {
						return fmt.Errorf("dead/%s %q: %w (run `sawtooth verify`)", is.Stage, k, err)
					}
					is.Dead = &dl
				}
			}
			return fn(is)
		})
	})
}
