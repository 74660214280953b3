package store

import (
	"encoding/json"
	"fmt"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

var _ pipeline.Restorer = (*DB)(nil)

// Restore writes items' whole state (pipeline.Restorer): `sawtooth copy`
// into a bbolt file.
func (db *DB) Restore(items []pipeline.Location) error {
	return db.update(func(tx *bolt.Tx) error {
		w := db.writer(tx)
		for _, loc := range items {
			if err := w.restore(loc); err != nil {
				return fmt.Errorf("restore item %q: %w", loc.ID, err)
			}
		}
		return nil
	})
}

func (w *writer) restore(loc pipeline.Location) error {
	id := []byte(loc.ID)
	if loc.ID == "" || loc.Record.ID != loc.ID {
		return fmt.Errorf("record id %q does not match", loc.Record.ID)
	}
	if _, exists := w.state(id); exists {
		return fmt.Errorf("already in %s", w.db.path)
	}
	rec, err := w.db.encodeItem(w.tx, loc.Record)
	if err != nil {
		return err
	}
	if err := w.putItem(id, rec); err != nil {
		return err
	}
	hash := loc.Record.ContentHash()
	var shared uint8
	for stage, out := range loc.Output {
		osi, ok := w.db.index[stage]
		if !ok {
			return fmt.Errorf("output of unknown stage %q", stage)
		}
		v, err := w.db.encodeOutput(w.tx, stage, id, out, func() string { return loc.Record.Text }, "")
		if err != nil {
			return err
		}
		sh, err := w.putOutput(osi, state{Hash: hash}, id, v)
		if err != nil {
			return err
		}
		if sh {
			shared |= sharedBit(osi)
		}
	}
	hist := w.bucket(bucketHistory)
	for _, past := range loc.History {
		v, err := json.Marshal(past)
		if err != nil {
			return err
		}
		seq, err := hist.NextSequence()
		if err != nil {
			return err
		}
		if err := hist.Put(historyKey(id, seq), v); err != nil {
			return err
		}
	}
	si, ok := w.db.index[loc.Stage]
	switch {
	case loc.Status == "done":
		if err := w.putState(id, state{Stage: len(w.db.stages) - 1, Status: pipeline.StatusDone, Hash: hash, Shared: shared}); err != nil {
			return err
		}
		return w.fold(id, +1)
	case !ok:
		return fmt.Errorf("%s at unknown stage %q", loc.Status, loc.Stage)
	case loc.Status == "queued":
		if err := w.enqueue(id, si, hash, shared); err != nil {
			return err
		}
		if loc.BatchSends <= 0 {
			return nil
		}
		// Its count holds into its next job, as ReturnBatch leaves it.
		back, _ := w.state(id)
		return putSends(w.tx, id, sends{stage: si, n: loc.BatchSends, seq: back.Seq})
	case loc.Status == "dead" && loc.Dead != nil:
		dl, err := json.Marshal(loc.Dead)
		if err != nil {
			return err
		}
		if err := w.bucket(deadBucket(loc.Stage)).Put(id, dl); err != nil {
			return err
		}
		return w.putState(id, state{Stage: si, Status: pipeline.StatusDead, Hash: hash, Shared: shared & below(si)})
	}
	return fmt.Errorf("unknown place %q (a dead item needs its dead letter)", loc.Status)
}

// AddUsage adds u to the stages' recorded totals.
func (db *DB) AddUsage(u map[string]pipeline.Usage) error {
	return db.update(func(tx *bolt.Tx) error {
		w := db.writer(tx)
		for stage, x := range u {
			if err := w.addUsage(stage, x); err != nil {
				return err
			}
		}
		return nil
	})
}
