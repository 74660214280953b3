package store

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

var _ pipeline.Database = (*DB)(nil)

// IngestStats is pipeline.IngestStats, kept here so callers compile.
type IngestStats = pipeline.IngestStats

// reentry is the first stage that reads one of the changed fields, or
// len(stages) when none does.
func (db *DB) reentry(changed []string) int {
	for i, s := range db.stages {
		if s.ReadsAny(changed) {
			return i
		}
	}
	return len(db.stages)
}

// Ingest stores records in one transaction. A new id is queued at the
// first stage; an id stored with the same content (text and fields) is
// left alone. An id whose content changed gets the new record and
// re-enters at the first stage that reads a changed field
// (StageDef.Reads), losing the outputs of that stage and later ones (its
// fact folded out of the tally, a dead letter moved to its history); if
// the item has not yet passed that stage, or no stage reads the changed
// fields, only the record is replaced. Idempotent.
func (db *DB) Ingest(recs []pipeline.Record) (IngestStats, error) {
	var st IngestStats
	err := db.update(func(tx *bolt.Tx) error {
		st = IngestStats{}
		w := db.writer(tx)
		for _, r := range recs {
			hash := r.ContentHash()
			id := []byte(r.ID)
			cur, exists := w.state(id)
			if exists && cur.Hash == hash {
				st.Unchanged++
				continue
			}
			rec, err := db.encodeItem(tx, r)
			if err != nil {
				return err
			}
			from, shared := 0, uint8(0)
			if exists {
				old, _, err := db.record(tx, id)
				if err != nil {
					return err
				}
				// Compared as it reads back, as its stages read it: the
				// record goes through JSON, which replaces invalid UTF-8,
				// so a text given with a bad byte never equals the stored
				// one and a rating-only edit would redo the item's work.
				now, err := db.itemRecord(tx, id, rec)
				if err != nil {
					return fmt.Errorf("encode item %q: its record does not read back: %w", r.ID, err)
				}
				changed := pipeline.ChangedFields(old, now)
				from = db.reentry(changed)
				if from >= len(db.stages) || w.position(cur) < from {
					// Nothing the item has been through read what changed.
					if len(changed) == 0 {
						st.Unchanged++ // a hash from an older sawtooth
					} else {
						st.Updated++
					}
					cur.Hash = hash
					if err := w.retext(id, old.Text, now.Text); err != nil {
						return err
					}
					if cur, err = w.unshare(id, cur, old.Text, now.Text); err != nil {
						return err
					}
					if err := w.putItem(id, rec); err != nil {
						return fmt.Errorf("store item %q: %w", r.ID, err)
					}
					if err := w.putState(id, cur); err != nil {
						return err
					}
					continue
				}
				if err := w.removeFrom(id, cur, from, reasonEdited); err != nil {
					return err
				}
				if err := w.retext(id, old.Text, now.Text); err != nil {
					return err
				}
				cur.Shared &= below(from)
				if cur, err = w.unshare(id, cur, old.Text, now.Text); err != nil {
					return err
				}
				shared = cur.Shared
				st.Changed++
			} else {
				st.New++
			}
			if err := w.putItem(id, rec); err != nil {
				return fmt.Errorf("store item %q: %w", r.ID, err)
			}
			if err := w.enqueue(id, from, hash, shared); err != nil {
				return err
			}
		}
		return nil
	})
	return st, err
}

// Commit applies the transitions in one durable transaction (group commit).
// A transition whose item is no longer queued at that stage and sequence is
// skipped, so Commit is idempotent.
func (db *DB) Commit(ts []pipeline.Transition) error {
	return db.update(func(tx *bolt.Tx) error {
		w := db.writer(tx)
		for i := range ts {
			applies := w.applies(&ts[i])
			if ts[i].Outcome == pipeline.Billed {
				// The item stays queued: only what it was billed is
				// recorded.
				if applies {
					if err := w.addUsage(ts[i].Stage, ts[i].Usage); err != nil {
						return err
					}
					if err := w.record(&ts[i]); err != nil {
						return err
					}
				}
				continue
			}
			if err := w.apply(&ts[i]); err != nil {
				return err
			}
			if applies {
				if err := w.record(&ts[i]); err != nil {
					return err
				}
			}
		}
		return w.packSettled()
	})
}

// Requeue moves dead letters of stage back to its queue: the given ids, or
// every one when ids is empty. It returns how many moved.
func (db *DB) Requeue(stage string, ids []string) (int, error) {
	si, ok := db.index[stage]
	if !ok {
		return 0, fmt.Errorf("unknown stage %q (stages: %s)", stage, stageNames(db.stages))
	}
	n := 0
	err := db.update(func(tx *bolt.Tx) error {
		n = 0
		w := db.writer(tx)
		dead := tx.Bucket(deadBucket(stage))
		if len(ids) == 0 {
			c := dead.Cursor()
			for k, _ := c.First(); k != nil; k, _ = c.First() {
				id := append([]byte(nil), k...)
				if err := w.requeue(id, si); err != nil {
					return err
				}
				n++
			}
			return nil
		}
		for _, id := range ids {
			if dead.Get([]byte(id)) == nil {
				return &pipeline.NotDeadError{ID: id, Stage: stage}
			}
			if err := w.requeue([]byte(id), si); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// Rerun sends every item that reached stage (queued there or later, dead at
// it or later, or done) back to stage's queue, dropping the outputs of stage
// and every later stage. Items still queued or dead before stage are left
// alone. It works in chunks of one transaction each and returns how many
// items moved.
func (db *DB) Rerun(stage string) (int, error) {
	si, ok := db.index[stage]
	if !ok {
		return 0, fmt.Errorf("unknown stage %q (stages: %s)", stage, stageNames(db.stages))
	}
	const chunk = 5000
	total := 0
	var after []byte
	for {
		n, last, err := db.rerunChunk(si, after, chunk)
		total += n
		if err != nil || last == nil {
			return total, err
		}
		after = last
	}
}

func (db *DB) rerunChunk(si int, after []byte, max int) (int, []byte, error) {
	n := 0
	var last []byte
	err := db.update(func(tx *bolt.Tx) error {
		n, last = 0, nil
		w := db.writer(tx)
		c := w.stateB.Cursor()
		k, v := c.First()
		if after != nil {
			k, v = c.Seek(after)
			if k != nil && string(k) == string(after) {
				k, v = c.Next()
			}
		}
		var ids [][]byte
		seen := 0
		for ; k != nil && seen < max; k, v = c.Next() {
			seen++
			last = append([]byte(nil), k...)
			s, ok := decodeState(v)
			if !ok {
				return pipeline.Damaged(string(k), "", nil, "corrupt state record")
			}
			if s.Status == pipeline.StatusDone || s.Stage >= si {
				ids = append(ids, last)
			}
		}
		if k == nil {
			last = nil
		}
		for _, id := range ids {
			s, _ := w.state(id)
			if err := w.removeFrom(id, s, si, reasonRerun); err != nil {
				return err
			}
			if err := w.enqueue(id, si, s.Hash, s.Shared&below(si)); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, last, err
}

// writer applies transitions inside one write transaction.
type writer struct {
	db     *DB
	tx     *bolt.Tx
	items  *bolt.Bucket
	stateB *bolt.Bucket
	// ordered holds, for each bucket put has written this transaction,
	// whether every key it put sorted after all the bucket held.
	ordered map[*bolt.Bucket]bool
	// spans holds, by stage index, what the transaction put in
	// out/<stage> (settle.go).
	spans map[int]*outSpan
}

func (db *DB) writer(tx *bolt.Tx) *writer {
	w := &writer{db: db, tx: tx}
	w.items, w.stateB = w.bucket(bucketItems), w.bucket(bucketState)
	return w
}

func (w *writer) state(id []byte) (state, bool) {
	v := w.stateB.Get(id)
	if v == nil {
		return state{}, false
	}
	return decodeState(v)
}

// putState sets the item's state, moving it in the kept counts: every
// state change goes through here or deleteState.
func (w *writer) putState(id []byte, s state) error {
	if err := w.changeCount(id, &s); err != nil {
		return err
	}
	return w.stateB.Put(id, s.encode())
}

func (w *writer) stageName(i int) string { return w.db.stages[i].Name }

// enqueue queues the item at stage si. shared is its state's Shared
// bits: those of the outputs it keeps, of stages before si.
func (w *writer) enqueue(id []byte, si int, hash string, shared uint8) error {
	todo := w.bucket(todoBucket(w.stageName(si)))
	seq, err := todo.NextSequence()
	if err != nil {
		return err
	}
	if err := w.put(todo, u64(seq), id); err != nil {
		return err
	}
	return w.putState(id, state{Stage: si, Status: pipeline.StatusQueued, Seq: seq, Hash: hash, Shared: shared & below(si)})
}

// Why a dead letter left its item, as PastDeadLetter.Reason says.
const (
	reasonRequeue = "requeue"
	reasonRerun   = "rerun"
	reasonEdited  = "edited"
	// reasonPrune deletes the dead letter with its item instead of
	// keeping it in the history.
	reasonPrune = ""
)

// position orders where an item is: the stage it is queued or dead at,
// len(stages) once done.
func (w *writer) position(s state) int {
	if s.Status == pipeline.StatusDone {
		return len(w.db.stages)
	}
	return s.Stage
}

// removeFrom takes an item out of its current place (queue or dead letter,
// which moves to the item's history for reason) and drops its outputs
// from stage `from` on, folding its fact out of the tally if it was done.
func (w *writer) removeFrom(id []byte, s state, from int, reason string) error {
	switch s.Status {
	case pipeline.StatusQueued:
		if err := w.bucket(todoBucket(w.stageName(s.Stage))).Delete(u64(s.Seq)); err != nil {
			return err
		}
	case pipeline.StatusDead:
		if err := w.retireDead(id, s.Stage, reason); err != nil {
			return err
		}
	case pipeline.StatusDone:
		if err := w.fold(id, -1); err != nil {
			return err
		}
	}
	for i := from; i < len(w.db.stages); i++ {
		if err := w.bucket(outBucket(w.stageName(i))).Delete(id); err != nil {
			return err
		}
	}
	return nil
}

// retireDead removes the item's dead letter at stage si, keeping it in
// the item's history unless the item itself is being pruned.
func (w *writer) retireDead(id []byte, si int, reason string) error {
	dead := w.bucket(deadBucket(w.stageName(si)))
	if reason != reasonPrune {
		raw := dead.Get(id)
		if raw == nil {
			return pipeline.Damaged(string(id), w.stageName(si), nil, "state says dead at %s but there is no dead letter", w.stageName(si))
		}
		past := pipeline.PastDeadLetter{Stage: w.stageName(si), Retired: w.db.now().UTC(), Reason: reason}
		if err := json.Unmarshal(raw, &past.Dead); err != nil {
			return pipeline.Damaged(string(id), w.stageName(si), err, "dead letter at %s is damaged", w.stageName(si))
		}
		v, err := json.Marshal(past)
		if err != nil {
			return err
		}
		hist := w.bucket(bucketHistory)
		seq, err := hist.NextSequence()
		if err != nil {
			return err
		}
		if err := hist.Put(historyKey(id, seq), v); err != nil {
			return err
		}
	}
	return dead.Delete(id)
}

func (w *writer) requeue(id []byte, si int) error {
	s, ok := w.state(id)
	if !ok || s.Status != pipeline.StatusDead || s.Stage != si {
		return pipeline.Damaged(string(id), w.stageName(si), nil, "state does not match dead/%s", w.stageName(si))
	}
	if err := w.retireDead(id, si, reasonRequeue); err != nil {
		return err
	}
	return w.enqueue(id, si, s.Hash, s.Shared)
}

func (w *writer) apply(t *pipeline.Transition) error {
	si, ok := w.db.index[t.Stage]
	if !ok {
		return fmt.Errorf("commit: unknown stage %q", t.Stage)
	}
	id := []byte(t.ID)
	s, ok := w.state(id)
	if !ok || s.Status != pipeline.StatusQueued || s.Stage != si || s.Seq != t.Seq {
		return nil // already applied, or the item moved (re-ingested): stale
	}
	if err := w.bucket(todoBucket(t.Stage)).Delete(u64(t.Seq)); err != nil {
		return err
	}
	if err := w.addUsage(t.Stage, t.Usage); err != nil {
		return err
	}
	switch t.Outcome {
	case pipeline.Succeeded:
		var (
			v   []byte // the stored output
			err error
		)
		if t.CacheKey != "" && !t.Cached {
			if v, err = w.putAnswer(t.Stage, t.CacheKey, t.Result); err != nil {
				return fmt.Errorf("cache the answer of %q at %s: %w", t.ID, t.Stage, err)
			}
		}
		if v == nil {
			if v, err = w.db.encodeOutput(w.tx, t.Stage, id, t.Result.Output, w.db.textOf(w.tx, id), t.CacheKey); err != nil {
				return fmt.Errorf("store output of %q at %s: %w", t.ID, t.Stage, err)
			}
		}
		shared, err := w.putOutput(si, s, id, v)
		if err != nil {
			return err
		}
		if shared {
			s.Shared |= sharedBit(si)
		} else if t.Stage == cubeStage {
			w.db.confs.note(id, v, t.Result.Output)
		}
		if si+1 < len(w.db.stages) {
			return w.enqueue(id, si+1, s.Hash, s.Shared)
		}
		if err := w.putState(id, state{Stage: si, Status: pipeline.StatusDone, Hash: s.Hash, Shared: s.Shared}); err != nil {
			return err
		}
		// The output as it was given is the output as stored (a record
		// is kept packed only if it reads back byte for byte): folding it
		// needs no read of what was just written.
		return w.foldOutput(id, t.Result.Output, +1)
	case pipeline.DeadLettered:
		dl, err := json.Marshal(t.Dead)
		if err != nil {
			return err
		}
		if err := w.bucket(deadBucket(t.Stage)).Put(id, dl); err != nil {
			return err
		}
		return w.putState(id, state{Stage: si, Status: pipeline.StatusDead, Hash: s.Hash, Shared: s.Shared})
	default:
		return fmt.Errorf("commit %q at %s: unknown outcome %d", t.ID, t.Stage, t.Outcome)
	}
}

// addUsage adds what a transition's calls were billed to the stage's
// total and to the running run's, in the transition's transaction.
func (w *writer) addUsage(stage string, u pipeline.Usage) error {
	if u == (pipeline.Usage{}) {
		return nil
	}
	b := w.bucket(bucketUsage)
	keys := [][]byte{usageTotalKey(stage)}
	if run := w.db.run.Load(); run != nil {
		keys = append(keys, usageRunKey(*run, stage))
	}
	for _, k := range keys {
		if err := b.Put(k, encodeUsage(decodeUsage(b.Get(k)).Add(u))); err != nil {
			return err
		}
	}
	return nil
}

// Prune removes every item keep rejects, in one transaction: its record,
// state, queue entry or dead letter, outputs and dead-letter history, its
// fact folded out of the tally. With dryRun it only counts. It returns
// how many items it removed (or would remove).
func (db *DB) Prune(keep func(id string) bool, dryRun bool) (int, error) {
	n := 0
	find := func(tx *bolt.Tx) ([][]byte, error) {
		var ids [][]byte
		err := tx.Bucket(bucketState).ForEach(func(k, _ []byte) error {
			if !keep(string(k)) {
				ids = append(ids, bytes.Clone(k))
			}
			return nil
		})
		return ids, err
	}
	if dryRun {
		err := db.view(func(tx *bolt.Tx) error {
			ids, err := find(tx)
			n = len(ids)
			return err
		})
		return n, err
	}
	err := db.update(func(tx *bolt.Tx) error {
		ids, err := find(tx)
		if err != nil {
			return err
		}
		n = len(ids)
		w := db.writer(tx)
		for _, id := range ids {
			s, ok := w.state(id)
			if !ok {
				return pipeline.Damaged(string(id), "", nil, "corrupt state record")
			}
			if err := w.removeFrom(id, s, 0, reasonPrune); err != nil {
				return err
			}
			if err := w.deleteHistory(id); err != nil {
				return err
			}
			if err := w.deleteItem(id); err != nil {
				return err
			}
			if err := w.deleteState(id); err != nil {
				return err
			}
		}
		return nil
	})
	return n, err
}

func (w *writer) deleteHistory(id []byte) error {
	c := w.bucket(bucketHistory).Cursor()
	prefix := historyPrefix(id)
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Seek(prefix) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// fold adds or removes the item's fact (the last stage's output).
func (w *writer) fold(id []byte, sign int) error {
	return w.foldAt(id, w.stageName(len(w.db.stages)-1), sign)
}

// foldAt is fold of the output of stage last (the last stage of an
// earlier stage list, when stages are added after it).
func (w *writer) foldAt(id []byte, last string, sign int) error {
	raw, err := w.db.output(w.tx, last, id, w.db.textOf(w.tx, id))
	if err != nil {
		return err
	}
	return w.foldOutput(id, raw, sign)
}

// foldOutput adds or removes the fact the last stage's output raw says
// about item id; nil is no output.
func (w *writer) foldOutput(id []byte, raw json.RawMessage, sign int) error {
	if raw == nil {
		return nil
	}
	var f pipeline.Fact
	if err := json.Unmarshal(raw, &f); err != nil || f.Label == "" {
		return nil // the last stage does not produce facts
	}
	return foldAgg(w.bucket(bucketAgg), w.db, string(id), f, sign)
}

func readTally(tx *bolt.Tx) (pipeline.Tally, error) {
	return readAgg(tx.Bucket(bucketAgg))
}
