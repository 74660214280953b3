// This file lets a pipeline grow: stages added to a stored stage list
// (anywhere, none removed or reordered) run for the items that already
// passed where they were added, and for no others. It also keeps the job
// a database was run with.

package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

var keyJob = []byte("job")

// insertedStages returns, when stored is new with stages added (stored
// is a subsequence of new, by name), the index in new of each added
// stage; ok is false when stages were removed or reordered.
func insertedStages(stored, new []StageDef) (added []int, ok bool) {
	j := 0
	for i, s := range new {
		if j < len(stored) && stored[j].Name == s.Name {
			j++
			continue
		}
		added = append(added, i)
	}
	return added, j == len(stored)
}

// insertStages records the new stage list in a file that holds stored,
// a subsequence of it, in one transaction: it creates the added stages'
// buckets, renumbers every item's stage, and sends every item that
// already passed the first added stage (queued or dead after it, or
// done) back to that stage's queue, its later outputs dropped and its
// fact folded out of the tally. Outputs before the first added stage are
// kept: only the added stages and what follows them run again (the stages
// that follow an added one may read its output).
func (db *DB) insertStages(stored []StageDef, added []int) error {
	newIndex := make([]int, len(stored))
	for i, s := range stored {
		newIndex[i] = db.index[s.Name]
	}
	first := added[0]
	oldLast := stored[len(stored)-1].Name
	return db.update(func(tx *bolt.Tx) error {
		for _, i := range added {
			name := db.stages[i].Name
			for _, b := range [][]byte{todoBucket(name), outBucket(name), deadBucket(name)} {
				if _, err := tx.CreateBucketIfNotExists(b); err != nil {
					return err
				}
			}
		}
		w := db.writer(tx)
		type move struct {
			id []byte
			s  state
		}
		var moves []move
		err := w.stateB.ForEach(func(k, v []byte) error {
			s, ok := decodeState(v)
			if !ok || s.Stage >= len(stored) {
				return pipeline.Damaged(string(k), "", nil, "corrupt state record")
			}
			s.Stage = newIndex[s.Stage]
			s.Shared = remapShared(s.Shared, newIndex)
			moves = append(moves, move{id: slices.Clone(k), s: s})
			return nil
		})
		if err != nil {
			return err
		}
		for _, m := range moves {
			// Renumbered first, so that what follows reads the item's
			// outputs (shared ones by their bits) under the new list. The
			// kept counts are recounted at the end.
			if err := w.stateB.Put(m.id, m.s.encode()); err != nil {
				return err
			}
			switch {
			case m.s.Status == pipeline.StatusDone:
				// Its fact came from the old last stage: fold that one out.
				if err := w.foldAt(m.id, oldLast, -1); err != nil {
					return err
				}
				for i := first; i < len(db.stages); i++ {
					if err := w.bucket(outBucket(w.stageName(i))).Delete(m.id); err != nil {
						return err
					}
				}
			case m.s.Stage >= first:
				if err := w.removeFrom(m.id, m.s, first, reasonRerun); err != nil {
					return err
				}
			default:
				continue // renumbered above
			}
			if err := w.enqueue(m.id, first, m.s.Hash, m.s.Shared); err != nil {
				return err
			}
		}
		// Record the new list, but with the stored fingerprints of the
		// stages it kept: a kept stage whose configuration changed too
		// stays changed until the caller re-runs or accepts it.
		recorded := slices.Clone(db.stages)
		for i, s := range stored {
			recorded[newIndex[i]] = s
		}
		def, _ := json.Marshal(definition{Stages: recorded})
		if err := tx.Bucket(bucketMeta).Put(keyDef, def); err != nil {
			return err
		}
		// The kept counts were for the old stage list, so writers left
		// them alone: count the renumbered states.
		return db.storeRecount(tx)
	})
}

// SaveJob records the job the database is run with (opaque bytes: the
// caller's encoding), replacing the one recorded before.
func (db *DB) SaveJob(job []byte) error {
	return db.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyJob, job)
	})
}

// Job returns the job SaveJob recorded, nil if none (a database run from
// flags before jobs were recorded).
func (db *DB) Job() ([]byte, error) {
	var out []byte
	err := db.view(func(tx *bolt.Tx) error {
		out = slices.Clone(tx.Bucket(bucketMeta).Get(keyJob))
		return nil
	})
	return out, err
}

// ReadJob reads the job recorded in the database at path without knowing
// its stage list (a resume with no job file, `sawtooth job show`): nil,
// nil when the database records none.
func ReadJob(path string) ([]byte, error) { return readMetaKey(path, keyJob, DefaultLockTimeout) }

// ReadDefinition reads the stage list recorded in the database at path,
// for the commands that open it without running it (status, export):
// they open it with the stages it holds. It waits at most lockTimeout for
// another process's lock (zero: DefaultLockTimeout), then fails with
// ErrInUse.
func ReadDefinition(path string, lockTimeout time.Duration) ([]StageDef, error) {
	if lockTimeout <= 0 {
		lockTimeout = DefaultLockTimeout
	}
	raw, err := readMetaKey(path, keyDef, lockTimeout)
	if err != nil {
		return nil, err
	}
	var def definition
	if err := json.Unmarshal(raw, &def); err != nil {
		return nil, fmt.Errorf("open %s: bad pipeline definition: %w", path, ErrNotSawtooth)
	}
	return def.Stages, nil
}

// readMetaKey reads one meta key of the database at path, read-only, giving
// up after timeout when another process writes to it.
func readMetaKey(path string, key []byte, timeout time.Duration) ([]byte, error) {
	if err := checkPath(path, true); err != nil {
		return nil, err
	}
	if err := checkFile(path); err != nil {
		return nil, err
	}
	bdb, err := openBolt(path, &bolt.Options{ReadOnly: true, Timeout: timeout})
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			return nil, err
		}
		return nil, openError(path, err)
	}
	defer bdb.Close()
	var out []byte
	// Through view, as every read: a damaged page panics inside bbolt.
	err = (&DB{bolt: bdb, path: path}).view(func(tx *bolt.Tx) error {
		// Refused as Open refuses it: a newer sawtooth's keys may not
		// read as this one's.
		meta, _, err := metaOf(path, tx)
		if err != nil {
			return err
		}
		if meta == nil {
			return &pipeline.EmptyDatabaseError{Path: path, Err: ErrNotSawtooth}
		}
		out = slices.Clone(meta.Get(key))
		return nil
	})
	return out, err
}
