package postgres

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// Why a dead letter left its item, as pipeline.PastDeadLetter.Reason says.
const (
	reasonRequeue = "requeue"
	reasonRerun   = "rerun"
	reasonEdited  = "edited"
)

// adminLockPrefix names the advisory lock that serialises the commands
// that move many items (ingest, re-queue, re-run, prune) of one schema:
// two of them never decide on the same item at once. Commits, claims and
// heartbeats do not take it.
const adminLockPrefix = "sawtooth admin "

func (db *DB) adminLock(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, adminLockPrefix+db.schema)
	return err
}

// itemState is where an item is: queued (Queued true, at Stage with Seq),
// dead at Stage, or done (neither).
type itemState struct {
	Record []byte
	Queued bool
	Dead   bool
	Stage  int
	Seq    int64
}

// position orders where an item is: its stage, len(stages) once done.
func (db *DB) position(s itemState) int {
	if !s.Queued && !s.Dead {
		return len(db.stages)
	}
	return s.Stage
}

// putItemSQL inserts items ($1 ids, $2 stored records). Their content
// hashes are not stored (schema step 17): ingest derives them from the
// records it reads anyway.
const putItemSQL = `INSERT INTO item (item_id, record) SELECT * FROM unnest($1::text[], $2::bytea[])`

// lockStates locks the items' rows (id order) and reads where each is.
func lockStates(ctx context.Context, tx pgx.Tx, ids []string) (map[string]itemState, error) {
	sorted := slices.Compact(slices.Sorted(slices.Values(ids)))
	if _, err := tx.Exec(ctx, lockItemsSQL, sorted); err != nil {
		return nil, err
	}
	rows, _ := tx.Query(ctx, `SELECT i.item_id, i.record, t.stage, t.seq, d.stage
		FROM item i LEFT JOIN todo t USING (item_id) LEFT JOIN dead d USING (item_id)
		WHERE i.item_id = ANY($1)`, sorted)
	out := make(map[string]itemState, len(sorted))
	var id string
	var s itemState
	var tStage, dStage *int16
	var tSeq *int64
	_, err := pgx.ForEachRow(rows, []any{&id, &s.Record, &tStage, &tSeq, &dStage}, func() error {
		st := itemState{Record: s.Record}
		switch {
		case tStage != nil && dStage != nil:
			return pipeline.Damaged(id, "", nil, "both queued and dead")
		case tStage != nil:
			st.Queued, st.Stage, st.Seq = true, int(*tStage), *tSeq
		case dStage != nil:
			st.Dead, st.Stage = true, int(*dStage)
		}
		out[id] = st
		return nil
	})
	return out, err
}

// changes collects what one transaction does to many items, applied by
// apply as a few set-based statements in a fixed order.
type changes struct {
	reason   string   // for retired dead letters
	dequeue  []string // drop their queue entries
	retire   []string // move their dead letters to the history
	dropDead []string // delete their dead letters (prune)
	foldOut  []string // done items: fold their fact out
	dropIDs  []string // drop outputs of dropIDs[i] from stage dropFrom[i] on
	dropFrom []int16
	putIDs   []string // write records (insert or replace)
	putRecs  [][]byte
	enqIDs   []string // queue at enqStage
	enqStage []int16
	delete   []string          // prune: the item row and its history
	oldText  map[string]string // items whose text changes: the text their marked outputs repeat
}

// removeFrom takes an item out of its current place (its dead letter
// retired to the history, unless pruning) and drops its outputs from
// stage from on, folding its fact out if it was done.
func (c *changes) removeFrom(id string, s itemState, from int, prune bool) {
	switch {
	case s.Queued:
		c.dequeue = append(c.dequeue, id)
	case s.Dead && prune:
		c.dropDead = append(c.dropDead, id)
	case s.Dead:
		c.retire = append(c.retire, id)
	default:
		c.foldOut = append(c.foldOut, id)
	}
	c.dropIDs, c.dropFrom = append(c.dropIDs, id), append(c.dropFrom, int16(from))
}

func (c *changes) enqueue(id string, stage int) {
	c.enqIDs, c.enqStage = append(c.enqIDs, id), append(c.enqStage, int16(stage))
}

func (db *DB) apply(ctx context.Context, tx pgx.Tx, c *changes) error {
	var tally tallyDelta
	if err := db.changeOutputs(ctx, tx, c, &tally); err != nil {
		return err
	}
	b := &pgx.Batch{}
	if len(c.dequeue) > 0 {
		b.Queue(`DELETE FROM todo WHERE seq IN (SELECT seq FROM todo WHERE item_id = ANY($1) ORDER BY seq FOR UPDATE)`, c.dequeue)
	}
	if len(c.retire) > 0 {
		b.Queue(`WITH d AS (DELETE FROM dead WHERE item_id = ANY($1) RETURNING item_id, stage, letter)
			INSERT INTO history (item_id, stage, letter, retired, reason)
			SELECT item_id, stage, letter, $2, $3 FROM d ORDER BY item_id`, c.retire, db.now().UTC(), c.reason)
	}
	if len(c.dropDead) > 0 {
		b.Queue(`DELETE FROM dead WHERE item_id = ANY($1)`, c.dropDead)
	}
	if len(c.delete) > 0 {
		b.Queue(`DELETE FROM history WHERE item_id = ANY($1)`, c.delete)
		b.Queue(`DELETE FROM item WHERE item_id = ANY($1)`, c.delete)
	}
	if len(c.putIDs) > 0 {
		b.Queue(putItemSQL+` ON CONFLICT (item_id) DO UPDATE SET record = EXCLUDED.record`, c.putIDs, c.putRecs)
	}
	if len(c.enqIDs) > 0 {
		b.Queue(enqueueSQL, c.enqIDs, c.enqStage)
	}
	tally.queue(b, db.nextShard())
	if b.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, b).Close()
}

// Ingest stores records in one transaction, with the bbolt store's
// semantics (see store.DB.Ingest): a new id is queued at the first
// stage, the same content is left alone, and changed content re-enters
// at the first stage that reads a changed field. Idempotent.
func (db *DB) Ingest(recs []pipeline.Record) (pipeline.IngestStats, error) {
	var st pipeline.IngestStats
	if err := db.names.register(db.ctx, db.pool, recs); err != nil {
		return st, fmt.Errorf("ingest into %s: %w", db.path, err)
	}
	err := db.tx(db.ctx, func(tx pgx.Tx) error {
		st = pipeline.IngestStats{}
		if err := db.adminLock(db.ctx, tx); err != nil {
			return err
		}
		// An id given twice must see its first version stored: split
		// the batch before each repeat.
		for start := 0; start < len(recs); {
			seen := map[string]bool{}
			end := start
			for ; end < len(recs) && !seen[recs[end].ID]; end++ {
				seen[recs[end].ID] = true
			}
			if err := db.ingest(db.ctx, tx, recs[start:end], &st); err != nil {
				return err
			}
			start = end
		}
		return nil
	})
	if err != nil {
		return pipeline.IngestStats{}, fmt.Errorf("ingest into %s: %w", db.path, err)
	}
	if st.New+st.Changed > 0 {
		db.ensureQueueStats(db.ctx)
	}
	return st, nil
}

func (db *DB) ingest(ctx context.Context, tx pgx.Tx, recs []pipeline.Record, st *pipeline.IngestStats) error {
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	states, err := lockStates(ctx, tx, ids)
	if err != nil {
		return err
	}
	c := &changes{reason: reasonEdited}
	for _, r := range recs {
		cur, exists := states[r.ID]
		rec, err := encodeNamedRecord(r, db.names)
		if err != nil {
			return fmt.Errorf("encode item %q: %w", r.ID, err)
		}
		if !exists {
			c.putIDs, c.putRecs = append(c.putIDs, r.ID), append(c.putRecs, rec)
			st.New++
			c.enqueue(r.ID, 0)
			continue
		}
		var old pipeline.Record
		if err := db.readRecord(r.ID, cur.Record, &old); err != nil {
			return recordDamage(r.ID, err, "stored record is damaged")
		}
		// Compared as it reads back, as its stages read it: a record
		// stored as JSON has its invalid UTF-8 replaced, so the text
		// given would never equal the stored one.
		now := r
		if storedAsJSON(rec) {
			now = pipeline.Record{}
			if err := decodeRecord(rec, &now); err != nil {
				return fmt.Errorf("encode item %q: its record does not read back: %w", r.ID, err)
			}
		}
		// The content hash (text and fields) of both as they read back:
		// derived here, not stored (schema step 17), at a record decode
		// and two hashes per id already stored; new ids cost nothing.
		if old.ContentHash() == now.ContentHash() {
			st.Unchanged++
			continue
		}
		c.putIDs, c.putRecs = append(c.putIDs, r.ID), append(c.putRecs, rec)
		if old.Text != now.Text {
			if c.oldText == nil {
				c.oldText = map[string]string{}
			}
			c.oldText[r.ID] = old.Text
		}
		changed := pipeline.ChangedFields(old, now)
		from := db.reentry(changed)
		if from >= len(db.stages) || db.position(cur) < from {
			// Nothing the item has been through read what changed.
			if len(changed) == 0 {
				st.Unchanged++ // equal hashes above: cannot differ here
			} else {
				st.Updated++
			}
			continue
		}
		c.removeFrom(r.ID, cur, from, false)
		c.enqueue(r.ID, from)
		st.Changed++
	}
	return db.apply(ctx, tx, c)
}

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

// Requeue moves dead letters of stage back to its queue: the given ids,
// or every one when ids is empty, in one transaction. Each dead letter
// moves to its item's history. It returns how many moved.
func (db *DB) Requeue(stage string, ids []string) (int, error) {
	si, err := db.stageIndex(stage)
	if err != nil {
		return 0, err
	}
	n := 0
	err = db.tx(db.ctx, func(tx pgx.Tx) error {
		if err := db.adminLock(db.ctx, tx); err != nil {
			return err
		}
		want := slices.Compact(slices.Sorted(slices.Values(ids)))
		if len(want) == 0 {
			rows, _ := tx.Query(db.ctx, `SELECT item_id FROM dead WHERE stage = $1 ORDER BY item_id`, si)
			var err error
			if want, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				return err
			}
		}
		states, err := lockStates(db.ctx, tx, want)
		if err != nil {
			return err
		}
		c := &changes{reason: reasonRequeue}
		for _, id := range want {
			s, ok := states[id]
			if !ok || !s.Dead || s.Stage != si {
				return &pipeline.NotDeadError{ID: id, Stage: stage}
			}
			c.retire = append(c.retire, id)
			c.enqueue(id, si)
		}
		n = len(want)
		return db.apply(db.ctx, tx, c)
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// rerunChunk is how many items one Rerun transaction moves.
const rerunChunk = 5000

// Rerun sends every item that reached stage (queued there or later, dead
// at it or later, or done) back to stage's queue, dropping the outputs
// of stage and every later stage. It works in chunks of one transaction
// each, in id order, and returns how many items moved.
func (db *DB) Rerun(stage string) (int, error) {
	si, err := db.stageIndex(stage)
	if err != nil {
		return 0, err
	}
	// Every walk in id order here begins at the least id, '' (which a
	// store takes), not after it (see page).
	total, after, from := 0, "", ">="
	for {
		var ids []string
		err := db.tx(db.ctx, func(tx pgx.Tx) error {
			if err := db.adminLock(db.ctx, tx); err != nil {
				return err
			}
			rows, _ := tx.Query(db.ctx, `SELECT i.item_id FROM item i LEFT JOIN todo t USING (item_id) LEFT JOIN dead d USING (item_id)
				WHERE i.item_id `+from+` $1 AND coalesce(t.stage, d.stage, $2) >= $3 ORDER BY i.item_id LIMIT $4`,
				after, len(db.stages), si, rerunChunk)
			var err error
			if ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				return err
			}
			states, err := lockStates(db.ctx, tx, ids)
			if err != nil {
				return err
			}
			c := &changes{reason: reasonRerun}
			for _, id := range ids {
				s := states[id]
				c.removeFrom(id, s, si, false)
				c.enqueue(id, si)
			}
			return db.apply(db.ctx, tx, c)
		})
		if err != nil {
			return total, fmt.Errorf("rerun %s in %s: %w", stage, db.path, err)
		}
		total += len(ids)
		if len(ids) < rerunChunk {
			return total, nil
		}
		after, from = ids[len(ids)-1], ">"
	}
}

// Prune removes every item keep rejects, in one transaction: its record,
// queue entry or dead letter, outputs and dead-letter history, its fact
// folded out of the tally. With dryRun it only counts. Items ingested
// while keep is being asked are kept.
func (db *DB) Prune(keep func(id string) bool, dryRun bool) (int, error) {
	var drop []string
	n := 0
	err := db.eachID(func(id string) error {
		if !keep(id) {
			drop = append(drop, id)
		}
		return nil
	})
	if err != nil || dryRun || len(drop) == 0 {
		return len(drop), err
	}
	err = db.tx(db.ctx, func(tx pgx.Tx) error {
		if err := db.adminLock(db.ctx, tx); err != nil {
			return err
		}
		states, err := lockStates(db.ctx, tx, drop)
		if err != nil {
			return err
		}
		c := &changes{}
		n = len(states)
		for id, s := range states {
			c.removeFrom(id, s, 0, true)
			c.delete = append(c.delete, id)
		}
		return db.apply(db.ctx, tx, c)
	})
	if err != nil {
		return 0, fmt.Errorf("prune %s: %w", db.path, err)
	}
	return n, nil
}

// pageSize is how many rows one query of a walk over all items reads: a
// variable so that tests walk pages of a few rows.
var pageSize = 1000

// eachID calls fn with every item id in id order, a page per query (no
// transaction is held across fn).
func (db *DB) eachID(fn func(string) error) error {
	after, from := "", ">="
	for {
		rows, _ := db.pool.Query(db.ctx, `SELECT item_id FROM item WHERE item_id `+from+` $1 ORDER BY item_id LIMIT $2`, after, pageSize)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, id := range ids {
			if err := fn(id); err != nil {
				return err
			}
		}
		if len(ids) < pageSize {
			return nil
		}
		after, from = ids[len(ids)-1], ">"
	}
}
