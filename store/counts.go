// This file keeps how many items stand where (queued, dead or held by a
// batch job at each stage, done) in one small meta key, changed in the
// transaction that changes an item's state, so Counts costs O(stages)
// instead of a walk of the state bucket.

package store

import (
	"encoding/binary"
	"errors"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// keyCounts holds the kept counts: a version byte (1), the number of
// stages, then per stage the queued, dead and in-batch counts, then the
// done count, each a varint. A file without it (written before it
// existed) gets it from a recount at its next writable open (ensureCounts);
// until then a writer leaves it absent and Counts recounts.
var keyCounts = []byte("counts")

const countsVersion = 1

// stageCount is where the items at one stage stand.
type stageCount struct{ queued, dead, held int64 }

// itemCounts is the decoded counts key. Done items are counted apart: a done
// item's stage is the last one.
type itemCounts struct {
	stages []stageCount
	done   int64
}

// add counts the item in state s n times (n is +1 or -1).
func (c *itemCounts) add(s state, n int64) {
	if s.Status == pipeline.StatusDone {
		c.done += n
		return
	}
	if s.Stage >= len(c.stages) {
		return // a corrupt state: Check reports it
	}
	switch s.Status {
	case pipeline.StatusQueued:
		c.stages[s.Stage].queued += n
	case pipeline.StatusDead:
		c.stages[s.Stage].dead += n
	case pipeline.StatusInBatch:
		c.stages[s.Stage].held += n
	}
}

func (c *itemCounts) encode() []byte {
	b := make([]byte, 0, 2+len(c.stages)*3*3+3)
	b = append(b, countsVersion)
	b = binary.AppendUvarint(b, uint64(len(c.stages)))
	for _, s := range c.stages {
		b = binary.AppendVarint(b, s.queued)
		b = binary.AppendVarint(b, s.dead)
		b = binary.AppendVarint(b, s.held)
	}
	return binary.AppendVarint(b, c.done)
}

var errBadCounts = errors.New("damaged counts record")

// decodeCounts decodes the counts key for a file of n stages; ok is false
// when it is absent or was kept for another stage list (insertStages
// recounts it).
func decodeCounts(b []byte, n int) (c itemCounts, ok bool, err error) {
	if b == nil {
		return itemCounts{}, false, nil
	}
	if len(b) < 1 || b[0] != countsVersion {
		return itemCounts{}, false, errBadCounts
	}
	b = b[1:]
	next := func() int64 {
		v, k := binary.Varint(b)
		if k <= 0 {
			err = errBadCounts
			return 0
		}
		b = b[k:]
		return v
	}
	m, k := binary.Uvarint(b)
	if k <= 0 || m > 255 {
		return itemCounts{}, false, errBadCounts
	}
	b = b[k:]
	if int(m) != n {
		return itemCounts{}, false, nil
	}
	c.stages = make([]stageCount, n)
	for i := range c.stages {
		c.stages[i] = stageCount{queued: next(), dead: next(), held: next()}
	}
	c.done = next()
	if err == nil && len(b) != 0 {
		err = errBadCounts
	}
	if err != nil {
		return itemCounts{}, false, err
	}
	return c, true, nil
}

// kept reads the kept counts; ok is false when the file has none for its
// stage list.
func (db *DB) kept(tx *bolt.Tx) (itemCounts, bool, error) {
	return decodeCounts(tx.Bucket(bucketMeta).Get(keyCounts), len(db.stages))
}

// current is the kept counts, or a recount when the file has none.
func (db *DB) current(tx *bolt.Tx) (itemCounts, error) {
	c, ok, err := db.kept(tx)
	if err != nil {
		return itemCounts{}, pipeline.Damaged("", "", err, "meta/counts")
	}
	if !ok {
		return db.recount(tx)
	}
	return c, nil
}

// recount counts the state bucket: O(items), for a file without kept
// counts and for Check.
func (db *DB) recount(tx *bolt.Tx) (itemCounts, error) {
	c := itemCounts{stages: make([]stageCount, len(db.stages))}
	w := &walker{db: db, tx: tx} // reads every state: release the pages behind
	defer w.release()
	err := tx.Bucket(bucketState).ForEach(func(k, v []byte) error {
		w.step()
		s, ok := decodeState(v)
		if !ok || s.Stage >= len(db.stages) {
			return pipeline.Damaged(string(k), "", nil, "corrupt state record")
		}
		c.add(s, +1)
		return nil
	})
	return c, err
}

// storeRecount recounts the state bucket and keeps the result, in tx.
func (db *DB) storeRecount(tx *bolt.Tx) error {
	c, err := db.recount(tx)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketMeta).Put(keyCounts, c.encode())
}

// ensureCounts gives a file without kept counts (written before they
// existed, or by an upgrade) its counts, once, at a writable open.
func (db *DB) ensureCounts() error {
	have := false
	err := db.view(func(tx *bolt.Tx) error {
		var err error
		_, have, err = db.kept(tx)
		if errors.Is(err, errBadCounts) {
			err = nil // recounted below
		}
		return err
	})
	if err != nil || have {
		return err
	}
	return db.update(db.storeRecount)
}

// changeCount moves the item id from its current state (none when it is
// new) to to (none when it is deleted) in the kept counts. Nothing is
// kept while the key is absent: the next writable open recounts.
func (w *writer) changeCount(id []byte, to *state) error {
	meta := w.tx.Bucket(bucketMeta)
	c, ok, err := w.db.kept(w.tx)
	if err != nil {
		return pipeline.Damaged("", "", err, "meta/counts")
	}
	if !ok {
		return nil
	}
	if from, found := w.state(id); found {
		c.add(from, -1)
	}
	if to != nil {
		c.add(*to, +1)
	}
	return meta.Put(keyCounts, c.encode())
}

// deleteState removes the item's state, counting it out.
func (w *writer) deleteState(id []byte) error {
	if err := w.changeCount(id, nil); err != nil {
		return err
	}
	return w.stateB.Delete(id)
}

// checkCounts is Check's comparison of the kept counts with recounted,
// the count of the state bucket. A file without them (written before
// they were kept, opened read-only) has nothing to compare.
func (db *DB) checkCounts(tx *bolt.Tx, recounted itemCounts, add func(string, ...any)) {
	kc, ok, err := db.kept(tx)
	if err != nil {
		add("meta/counts: %v (a writable open recounts it)", err)
		return
	}
	if !ok {
		return
	}
	for i, st := range db.stages {
		k, r := kc.stages[i], recounted.stages[i]
		for _, f := range []struct {
			what      string
			kept, got int64
		}{{"queued", k.queued, r.queued}, {"dead", k.dead, r.dead}, {"in batch", k.held, r.held}} {
			if f.kept != f.got {
				add("meta/counts: %d %s at %s kept, %d in the state bucket", f.kept, f.what, st.Name, f.got)
			}
		}
	}
	if kc.done != recounted.done {
		add("meta/counts: %d done kept, %d in the state bucket", kc.done, recounted.done)
	}
}
