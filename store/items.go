// This file reads every item with where it stands, for the flat export
// of all items (done, queued, dead, in a batch job).

package store

import (
	"encoding/json"
	"fmt"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// ForEachItem calls fn with every item in id order, in one read
// transaction: memory holds one item at a time whatever the item count,
// and the file's pages it read are released as it goes (walk.go).
// The bytes handed to fn are copies, but fn must not use this DB's
// writing methods (bbolt would deadlock against the open read on a
// writable handle that needs to remap).
func (db *DB) ForEachItem(fn func(ItemState) error) error {
	return db.walk(func(tx *bolt.Tx, w *walker) error {
		return tx.Bucket(bucketState).ForEach(func(k, v []byte) error {
			w.step()
			s, ok := decodeState(v)
			if !ok || s.Stage >= len(db.stages) {
				return fmt.Errorf("item %q: corrupt state record (run `sawtooth verify`)", k)
			}
			is := ItemState{Stage: db.stages[s.Stage].Name, Status: s.Status}
			var err error
			if is.Record, _, err = db.record(tx, k); err != nil {
				return err
			}
			if is.Outputs, err = db.outputs(tx, k, is.Record.Text, len(db.stages)); err != nil {
				return err
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
