package store

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// Queued returns up to max entries of stage's queue with Seq > after, in
// Seq order, each with its record and the outputs of earlier stages. The
// bytes are copied out of the transaction.
func (db *DB) Queued(stage string, after uint64, max int) ([]pipeline.Queued, error) {
	si, ok := db.index[stage]
	if !ok {
		return nil, fmt.Errorf("unknown stage %q", stage)
	}
	var out []pipeline.Queued
	err := db.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(todoBucket(stage)).Cursor()
		for k, v := c.Seek(u64(after + 1)); k != nil && len(out) < max; k, v = c.Next() {
			q := pipeline.Queued{Seq: binary.BigEndian.Uint64(k)}
			rec, ok, err := db.record(tx, v)
			if err != nil {
				return fmt.Errorf("queue %s: %w", stage, err)
			}
			if !ok {
				return pipeline.Damaged(string(v), stage, nil, "queued at %s but has no record", stage)
			}
			q.Item.Record = rec
			if si > 0 {
				if q.Item.Outputs, err = db.outputs(tx, v, rec.Text, si); err != nil {
					return err
				}
				q.Item.Prev = q.Item.Outputs[db.stages[si-1].Name]
			}
			out = append(out, q)
		}
		return nil
	})
	return out, err
}

// StageCounts, Counts, Location and DeadEntry are the pipeline types,
// kept here so callers compile.
type (
	StageCounts = pipeline.StageCounts
	Counts      = pipeline.Counts
	Location    = pipeline.Location
	DeadEntry   = pipeline.DeadEntry
)

// Counts reads the kept counts (counts.go): O(stages). A file opened
// read-only that has none yet (written before they were kept) is counted
// from its state bucket, O(items), until a writable open keeps them. An
// item has the outputs of the stages it passed (Check holds the file to
// it), so the outputs follow from where the items stand.
func (db *DB) Counts() (Counts, error) {
	var kc itemCounts
	err := db.view(func(tx *bolt.Tx) error {
		var err error
		kc, err = db.current(tx)
		return err
	})
	if err != nil {
		return Counts{}, err
	}
	return db.countsOf(kc), nil
}

// countsOf is c as the pipeline reports it.
func (db *DB) countsOf(kc itemCounts) Counts {
	c := Counts{Stages: make([]StageCounts, len(db.stages)), Done: int(kc.done), Items: int(kc.done)}
	passed := int(kc.done) // items past the stage being counted
	for i := len(db.stages) - 1; i >= 0; i-- {
		s := kc.stages[i]
		c.Stages[i] = StageCounts{Stage: db.stages[i].Name, Queued: int(s.queued), Dead: int(s.dead), Output: passed}
		at := int(s.queued + s.dead + s.held)
		c.Items += at
		passed += at
	}
	return c
}

// Locate answers "where is item id", with its dead-letter history.
func (db *DB) Locate(id string) (Location, error) {
	loc := Location{ID: id}
	err := db.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketState).Get([]byte(id))
		if v == nil {
			return fmt.Errorf("item %q: %w", id, ErrNotFound)
		}
		s, ok := decodeState(v)
		if !ok {
			return fmt.Errorf("item %q: corrupt state record", id)
		}
		loc.Stage, loc.Status = db.stages[s.Stage].Name, s.Status.String()
		if bs, ok := getSends(tx, []byte(id)); ok && s.Status == pipeline.StatusQueued && bs.stage == s.Stage && bs.seq == s.Seq {
			loc.BatchSends = bs.n
		}
		var err error
		if loc.Record, _, err = db.record(tx, []byte(id)); err != nil {
			return err
		}
		if loc.Output, err = db.outputs(tx, []byte(id), loc.Record.Text, len(db.stages)); err != nil {
			return err
		}
		if s.Status == pipeline.StatusDead {
			var dl pipeline.DeadLetter
			if err := json.Unmarshal(tx.Bucket(deadBucket(loc.Stage)).Get([]byte(id)), &dl); err == nil {
				loc.Dead = &dl
			}
		}
		loc.History, err = readHistory(tx, []byte(id))
		return err
	})
	return loc, err
}

// ForEachDead calls fn for every dead letter of stage in id order.
func (db *DB) ForEachDead(stage string, fn func(DeadEntry) error) error {
	if _, ok := db.index[stage]; !ok {
		return fmt.Errorf("unknown stage %q (stages: %s)", stage, stageNames(db.stages))
	}
	return db.walk(func(tx *bolt.Tx, w *walker) error {
		w.lookupWalk() // each entry's record is a lookup anywhere in items
		return tx.Bucket(deadBucket(stage)).ForEach(func(k, v []byte) error {
			w.step()
			e := DeadEntry{ID: string(k)}
			if err := json.Unmarshal(v, &e.Dead); err != nil {
				return pipeline.Damaged(string(k), stage, err, "dead/%s is damaged", stage)
			}
			if r, _, err := db.record(tx, k); err == nil {
				e.Text = r.Text
			}
			return fn(e)
		})
	})
}

// ForEachOutput calls fn for every item with an output at stage, in id
// order: the entries of out/<stage> merged with the items whose state
// says their output is the stage's shared record (shared.go).
func (db *DB) ForEachOutput(stage string, fn func(rec pipeline.Record, out json.RawMessage) error) error {
	si, ok := db.index[stage]
	if !ok {
		return fmt.Errorf("unknown stage %q (stages: %s)", stage, stageNames(db.stages))
	}
	return db.walk(func(tx *bolt.Tx, w *walker) error {
		items := follow(tx.Bucket(bucketItems)) // emit is called in id order
		ahead := readAhead(tx, stage, w)
		emit := func(k, v []byte) error {
			w.step()
			r, err := db.itemRecord(tx, k, items.at(k))
			if err != nil {
				return err
			}
			text := func() string { return r.Text }
			var out json.RawMessage
			if v != nil {
				out, err = db.decodeOutput(tx, stage, k, v, text, ahead)
			} else {
				out, err = db.sharedOutput(tx, si, k, text)
			}
			if err != nil {
				return pipeline.Damaged(string(k), stage, err, "out/%s is damaged", stage)
			}
			return fn(r, out)
		}
		// An entry of out/<stage> that is a nested bucket (a damaged
		// file) has no value either: sharedOutput reads it as no output.
		return db.eachOutput(tx, si, func(k, v []byte, _ bool) error { return emit(k, v) })
	})
}

// eachOutput calls fn for every item with an output at stage si in tx,
// in id order, with the item's entry in out/<stage>, or with nil and
// shared when its state says its output is the stage's shared record.
func (db *DB) eachOutput(tx *bolt.Tx, si int, fn func(k, v []byte, shared bool) error) error {
	outs := tx.Bucket(outBucket(db.stages[si].Name)).Cursor()
	ok, ov := outs.First()
	if !db.mayShare(tx, si) {
		for ; ok != nil; ok, ov = outs.Next() {
			if err := fn(ok, ov, false); err != nil {
				return err
			}
		}
		return nil
	}
	states := tx.Bucket(bucketState).Cursor()
	sk, sv := states.First()
	for ok != nil || sk != nil {
		if sk != nil {
			if s, _ := decodeState(sv); s.Shared&sharedBit(si) == 0 {
				sk, sv = states.Next()
				continue
			}
		}
		if sk == nil || (ok != nil && bytes.Compare(ok, sk) < 0) {
			if err := fn(ok, ov, false); err != nil {
				return err
			}
			ok, ov = outs.Next()
			continue
		}
		if err := fn(sk, nil, true); err != nil {
			return err
		}
		sk, sv = states.Next()
	}
	return nil
}

// ForEachDone calls fn with every done item, its record and all outputs,
// read as ForEachItem reads them.
func (db *DB) ForEachDone(fn func(pipeline.Item) error) error {
	return db.walk(func(tx *bolt.Tx, w *walker) error {
		items := follow(tx.Bucket(bucketItems))
		outs := db.newOutputReader(tx, w)
		return tx.Bucket(bucketState).ForEach(func(k, v []byte) error {
			w.step()
			s, ok := decodeState(v)
			if !ok || s.Status != pipeline.StatusDone {
				return nil
			}
			var it pipeline.Item
			var err error
			if it.Record, err = db.itemRecord(tx, k, items.at(k)); err != nil {
				return err
			}
			if it.Outputs, err = outs.at(k, it.Record.Text, s); err != nil {
				return err
			}
			return fn(it)
		})
	})
}

// Tally is the stored aggregate.
func (db *DB) Tally() (pipeline.Tally, error) {
	var t pipeline.Tally
	err := db.view(func(tx *bolt.Tx) error {
		var err error
		t, err = readTally(tx)
		return err
	})
	return t, err
}

// Check is the full consistency check (`sawtooth verify`; Open runs only
// a cheap one on the meta, root and free list pages, see checkFile). It
// verifies, in one read transaction:
//   - bbolt's own page check: every page reachable once, none both free
//     and in use, every key in order;
//   - that every bucket agrees with the state bucket: each item is in
//     exactly one place (one queue entry, or one dead letter, or done),
//     every queue entry points at an item queued there with that
//     sequence, an item has the outputs of exactly the stages it passed,
//     and no queue entry, dead letter, output or history entry belongs to
//     an id without a state;
//   - that every item's record, output, dead letter and past dead letter
//     can be read, as run, export and report read them;
//   - that the dictionary's entries are well formed and agree (checkDict);
//   - that every chunk of longs belongs to exactly one item and lies
//     within the bucket's sequence (checkLongs);
//   - that the kept counts (counts.go) equal a recount of the states;
//   - that the stored tally equals the one recomputed by folding the last
//     stage's stored output of every done item.
//
// It returns one line per problem (at most 100), naming the item and the
// bucket.
func (db *DB) Check() ([]string, error) {
	var problems []string
	add := func(format string, args ...any) {
		if len(problems) < 100 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	err := db.walk(func(tx *bolt.Tx, w *walker) error {
		// bbolt's page check and Stats read every page of the file and
		// of two buckets without calling back per item.
		items, states := tx.Bucket(bucketItems), tx.Bucket(bucketState)
		w.checkPages(func() {
			for err := range tx.Check() {
				add("file: %v", err)
			}
			if n, m := items.Stats().KeyN, states.Stats().KeyN; n != m {
				add("%d records but %d states", n, m)
			}
		})
		last := db.stages[len(db.stages)-1].Name
		var recomputed pipeline.Tally
		recounted := itemCounts{stages: make([]stageCount, len(db.stages))}
		ahead := make([]*answersAhead, len(db.stages))
		for i, st := range db.stages {
			ahead[i] = readAhead(tx, st.Name, w)
		}
		err := states.ForEach(func(k, v []byte) error {
			w.step()
			db.checkItem(tx, k, v, ahead, &recomputed, &recounted, add)
			return nil
		})
		if err != nil {
			return err
		}
		if err := db.checkStageBuckets(tx, w, add); err != nil {
			return err
		}
		if err := checkHistory(tx, w, add); err != nil {
			return err
		}
		checkDict(tx, w, add)
		checkLongs(tx, w, add)
		db.checkCounts(tx, recounted, add)
		stored, err := readTally(tx)
		if err != nil {
			add("aggregate: %v", err)
			return nil
		}
		for _, d := range stored.Diff(recomputed) {
			add("aggregate: stored != recomputed from out/%s: %s", last, d)
		}
		return nil
	})
	return problems, err
}

// checkItem checks one item's state (k, v) against its record, its dead
// letters, outputs and queue entry, counting it in recounted and, when
// done, folding its fact into recomputed. ahead has each stage's answers
// read ahead of the walk.
func (db *DB) checkItem(tx *bolt.Tx, k, v []byte, ahead []*answersAhead, recomputed *pipeline.Tally, recounted *itemCounts, add func(string, ...any)) {
	s, ok := decodeState(v)
	if !ok || s.Stage >= len(db.stages) {
		add("item %q: corrupt state", k)
		return
	}
	recounted.add(s, +1)
	if tx.Bucket(bucketItems).Get(k) == nil {
		add("item %q: state without record", k)
	}
	last := db.checkReads(tx, k, ahead, add)
	name := db.stages[s.Stage].Name
	for i, st := range db.stages {
		inDead := tx.Bucket(deadBucket(st.Name)).Get(k) != nil
		if inDead != (s.Status == pipeline.StatusDead && i == s.Stage) {
			add("item %q: dead/%s presence %v disagrees with state %s at %s", k, st.Name, inDead, s.Status, name)
		}
		inOut := tx.Bucket(outBucket(st.Name)).Get(k) != nil
		isShared := s.Shared&sharedBit(i) != 0
		hasOut := inOut || isShared
		wantOut := i < s.Stage || s.Status == pipeline.StatusDone
		switch {
		case hasOut != wantOut:
			add("item %q: out/%s presence %v, want %v (state %s at %s)", k, st.Name, hasOut, wantOut, s.Status, name)
		case inOut && isShared:
			add("item %q: has both an entry in out/%s and the shared output", k, st.Name)
		case isShared && tx.Bucket(bucketMeta).Get(sharedKey(st.Name)) == nil:
			add("item %q: its output at %s is the shared one, which is missing", k, st.Name)
		}
	}
	switch s.Status {
	case pipeline.StatusQueued:
		if got := tx.Bucket(todoBucket(name)).Get(u64(s.Seq)); !bytes.Equal(got, k) {
			add("item %q: queued at %s seq %d but the queue holds %q", k, name, s.Seq, got)
		}
	case pipeline.StatusDead:
		// Read as dlq, report and retry read it: what they call damaged
		// is a problem here too.
		if raw := tx.Bucket(deadBucket(name)).Get(k); raw != nil {
			if err := json.Unmarshal(raw, new(pipeline.DeadLetter)); err != nil {
				add("item %q: dead/%s is damaged: %v", k, name, err)
			}
		}
	case pipeline.StatusDone:
		var f pipeline.Fact
		if last != nil && json.Unmarshal(last, &f) == nil && f.Label != "" {
			recomputed.Fold(string(k), f, +1)
		}
	case pipeline.StatusInBatch:
		checkHeld(tx, k, s, name, add)
	default:
		add("item %q: unknown status %d", k, s.Status)
	}
}

// checkReads reads item k's record and every output it has (format 4
// deflates records and stores outputs as edits of the text, which read
// whole or not at all), adding a problem for each it cannot read, and
// returns its output at the last stage (nil when it has none).
func (db *DB) checkReads(tx *bolt.Tx, k []byte, ahead []*answersAhead, add func(string, ...any)) json.RawMessage {
	rec, _, err := db.record(tx, k)
	if err != nil {
		add("%v", err)
	}
	text := func() string { return rec.Text }
	var last json.RawMessage
	for i, st := range db.stages {
		last, err = db.outputAhead(tx, st.Name, k, text, ahead[i])
		if err != nil {
			add("%v", err)
		}
	}
	return last
}

// checkStageBuckets checks every stage's queue, dead letters and outputs
// against the states: each entry's item is there, as the entry says.
func (db *DB) checkStageBuckets(tx *bolt.Tx, w *walker, add func(string, ...any)) error {
	states := tx.Bucket(bucketState)
	for si, st := range db.stages {
		ahead := readAhead(tx, st.Name, w)
		// A queue's ids come in arrival order and the dead letters are
		// few among the items: each entry's state is a lookup elsewhere
		// in the file (at a million items, 5,001 dead letters kept 120
		// MB of it resident between two releases).
		w.lookupWalk()
		err := tx.Bucket(todoBucket(st.Name)).ForEach(func(k, v []byte) error {
			w.step()
			s, ok := decodeState(states.Get(v))
			if !ok || s.Status != pipeline.StatusQueued || s.Stage != si || s.Seq != binary.BigEndian.Uint64(k) {
				add("todo/%s seq %d: item %q is not queued there", st.Name, binary.BigEndian.Uint64(k), v)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, b := range []string{"dead/", "out/"} {
			if b == "out/" {
				w.alongWalk() // nearly every item has an output: its states in order
			}
			err := tx.Bucket([]byte(b + st.Name)).ForEach(func(k, v []byte) error {
				w.step()
				if states.Get(k) == nil {
					add("%s%s: item %q has no state (an orphan entry)", b, st.Name, k)
				}
				if b == "out/" && len(v) > 0 && v[0] == tagAnswer {
					a, found := ahead.answer(k, v)
					if !found {
						a = referredAnswer(tx.Bucket(answersBucket(st.Name)), v[1:])
					}
					if a == nil {
						add("out/%s: item %q refers to cached answer %x, which is missing", st.Name, k, v[1:])
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// checkHistory checks that every past dead letter's key is whole, its
// item has a state and it can be read.
func checkHistory(tx *bolt.Tx, w *walker, add func(string, ...any)) error {
	hist := tx.Bucket(bucketHistory)
	if hist == nil {
		return nil
	}
	states := tx.Bucket(bucketState)
	w.lookupWalk() // past dead letters are few: each state is a lookup
	defer w.alongWalk()
	return hist.ForEach(func(k, v []byte) error {
		w.step()
		id, ok := historyID(k)
		switch {
		case !ok:
			add("history: damaged key %q", k)
		case states.Get(id) == nil:
			add("history: item %q has no state (an orphan entry)", id)
		default:
			if err := json.Unmarshal(v, new(pipeline.PastDeadLetter)); err != nil {
				add("history: item %q: a past dead letter is damaged: %v", id, err)
			}
		}
		return nil
	})
}

// SaveRun stores (or replaces) a run record. While the last record saved
// through this DB is "running", Commit adds usage to that run too, so a
// run killed before it saves its end still shows what it paid.
func (db *DB) SaveRun(r pipeline.RunSummary) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	err = db.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRuns).Put([]byte(r.ID), b)
	})
	if err == nil {
		if r.Status == runRunning {
			id := r.ID
			db.run.Store(&id)
		} else if cur := db.run.Load(); cur != nil && *cur == r.ID {
			db.run.Store(nil)
		}
	}
	return err
}

// Runs returns up to n most recent run records, newest first.
func (db *DB) Runs(n int) ([]pipeline.RunSummary, error) {
	var out []pipeline.RunSummary
	err := db.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketRuns).Cursor()
		for k, v := c.Last(); k != nil && len(out) < n; k, v = c.Prev() {
			var r pipeline.RunSummary
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("run %q: %w", k, err)
			}
			// A read-only open shares the file lock, so no writer is
			// alive: a run still "running" was killed. (A writable open
			// rewrote such records already.)
			if r.Status == runRunning && db.bolt.IsReadOnly() {
				db.killedRun(tx, &r)
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

// NewRunID returns a run id that sorts by start time. Its random tail
// keeps apart runs started in the same millisecond: workers of a fleet
// started together (one unit file on many hosts, a Kubernetes Job) each
// keep their own run record instead of overwriting one.
func NewRunID(t time.Time) string {
	var tail [3]byte
	_, _ = rand.Read(tail[:]) // crypto/rand.Read never fails on supported platforms
	return t.UTC().Format("20060102T150405.000Z") + "-" + hex.EncodeToString(tail[:])
}

// AppendSamples adds samples to a run's series.
func (db *DB) AppendSamples(runID string, s []pipeline.Sample) error {
	if len(s) == 0 {
		return nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return db.update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists(seriesBucket(runID))
		if err != nil {
			return err
		}
		seq, _ := bk.NextSequence()
		return bk.Put(u64(seq), b)
	})
}

// Samples returns a run's series in time order.
func (db *DB) Samples(runID string) ([]pipeline.Sample, error) {
	var out []pipeline.Sample
	err := db.view(func(tx *bolt.Tx) error {
		bk := tx.Bucket(seriesBucket(runID))
		if bk == nil {
			return nil
		}
		return bk.ForEach(func(_, v []byte) error {
			var s []pipeline.Sample
			if err := json.Unmarshal(v, &s); err != nil {
				return err
			}
			out = append(out, s...)
			return nil
		})
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out, err
}
