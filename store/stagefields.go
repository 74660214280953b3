package store

import (
	"fmt"
	"maps"

	"github.com/sawtooth-dev/sawtooth/pipeline"

	bolt "go.etcd.io/bbolt"
)

// StageFieldNames reads the names an export of one stage's outputs makes
// columns of (`export --stage`): the input fields of the records of the
// items ForEachOutput(stage) gives, and the top-level keys of their
// outputs, as FieldNames reads them (from the packed records, each
// cached answer once, the stage's shared record once unless its keys
// refer to the item), in one read transaction. Without it the export
// read every such item twice, once for the names and once for the rows.
func (db *DB) StageFieldNames(stage string) (inputs, outputs map[string]bool, err error) {
	si, ok := db.index[stage]
	if !ok {
		return nil, nil, fmt.Errorf("unknown stage %q (stages: %s)", stage, stageNames(db.stages))
	}
	inputs, outputs = map[string]bool{}, map[string]bool{}
	err = db.walk(func(tx *bolt.Tx, w *walker) error {
		items := follow(tx.Bucket(bucketItems)) // in id order, as eachOutput calls
		var refs answerRefs
		shared := tx.Bucket(bucketMeta).Get(sharedKey(stage))
		sharedNames, sharedAlike := db.itemlessKeys(tx, shared)
		err := db.eachOutput(tx, si, func(k, v []byte, isShared bool) error {
			w.step()
			if rec := items.at(k); !db.packedFieldNames(tx, k, rec, inputs) {
				// As ForEachOutput reads it: an output without an item
				// fails the same way.
				r, err := db.itemRecord(tx, k, rec)
				if err != nil {
					return err
				}
				for name := range r.Fields {
					inputs[name] = true
				}
			}
			switch {
			case isShared && shared == nil:
				return pipeline.Damaged(string(k), stage, nil, "its state refers to the shared output of %s, which is missing", stage)
			case isShared && sharedAlike: // the same keys for every item
				maps.Copy(outputs, sharedNames)
				return nil
			case isShared: // a key refers to the item
				return db.outputFieldNames(tx, stage, k, shared, outputs)
			case v == nil:
				return nil // a nested bucket (a damaged file): no output, as ForEachOutput reads it
			case len(v) == 1+shortRefLen && v[0] == tagAnswer:
				refs = append(refs, [shortRefLen]byte(v[1:]))
				return nil
			default:
				return db.outputFieldNames(tx, stage, k, v, outputs)
			}
		})
		if err != nil {
			return err
		}
		return db.answersFieldNames(tx, stage, refs, w, outputs)
	})
	return inputs, outputs, err
}
