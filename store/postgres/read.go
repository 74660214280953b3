package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// outputsSQL joins an item's row of outputs (o.data, NULL when it has
// none) to x, a row naming it.
const outputsSQL = `LEFT JOIN output o ON o.item_id = x.item_id`

// item builds a pipeline.Item from its stored record and row of outputs,
// those of the stages before si; si is the stage it is for
// (len(stages) for a done item: no Prev).
func (db *DB) item(id string, record, row []byte, si int) (pipeline.Item, error) {
	var it pipeline.Item
	if err := db.readRecord(id, record, &it.Record); err != nil {
		return it, recordDamage("", err, "bad record")
	}
	if si > 0 {
		it.Outputs = make(map[string]json.RawMessage, si)
	}
	err := forEachOutput(row, func(s int, data []byte) error {
		if s >= si {
			return nil
		}
		out, err := db.unmarkOutput(it.Record.ID, s, data, it.Record.Text)
		if err != nil {
			return err
		}
		it.Outputs[db.stages[s].Name] = out
		return nil
	})
	if errors.Is(err, errOutputRow) {
		return it, pipeline.Damaged(it.Record.ID, "", err, "bad outputs")
	}
	if err != nil {
		return it, err
	}
	if si > 0 && si < len(db.stages) {
		it.Prev = it.Outputs[db.stages[si-1].Name]
	}
	return it, nil
}

// Queued returns up to max entries of stage's queue with Seq > after, in
// Seq order, each with its record and the outputs of earlier stages,
// leased or not.
func (db *DB) Queued(stage string, after uint64, max int) ([]pipeline.Queued, error) {
	si, err := db.stageIndex(stage)
	if err != nil {
		return nil, err
	}
	rows, _ := db.pool.Query(db.ctx, `SELECT x.seq, x.item_id, i.record, o.data
		FROM todo x JOIN item i USING (item_id) `+outputsSQL+`
		WHERE x.stage = $1 AND x.seq > $2 AND x.batch IS NULL ORDER BY x.seq LIMIT $3`, si, int64(after), max)
	return db.collectQueued(rows, si, stage)
}

func (db *DB) collectQueued(rows pgx.Rows, si int, stage string) ([]pipeline.Queued, error) {
	var out []pipeline.Queued
	var seq int64
	var id string
	var record, row []byte
	_, err := pgx.ForEachRow(rows, []any{&seq, &id, &record, &row}, func() error {
		it, err := db.item(id, record, row, si)
		if err != nil {
			return fmt.Errorf("queue %s seq %d: %w", stage, seq, err)
		}
		out = append(out, pipeline.Queued{Seq: uint64(seq), Item: it})
		row = nil
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read queue %s of %s: %w", stage, db.path, err)
	}
	return out, nil
}

// countUnfinishedSQL counts the items queued or dead (an item is done
// when neither): those two tables, not the items, are read, so a
// drained pipeline's count reads almost nothing.
const countUnfinishedSQL = `SELECT count(*) FROM (SELECT item_id FROM todo UNION SELECT item_id FROM dead) u
	WHERE EXISTS (SELECT 1 FROM item i WHERE i.item_id = u.item_id)`

// Counts summarises where the items are, from one snapshot.
func (db *DB) Counts() (pipeline.Counts, error) {
	var c pipeline.Counts
	err := db.snapshot(db.ctx, func(tx pgx.Tx) error {
		var err error
		c, err = db.readCounts(tx)
		return err
	})
	if err != nil {
		return c, fmt.Errorf("count items in %s: %w", db.path, err)
	}
	return c, nil
}

// countsCache is the counts a handle read last and the snapshot it read
// them in. A report reads the counts, then the cube with the counts of
// its own snapshot: each a walk of the item and output tables (a second
// at a million items). Two snapshots that are equal (the same xmin,
// xmax and transactions in progress: nothing committed between them)
// see the same rows, so the second reuses the first's counts.
type countsCache struct {
	mu       sync.Mutex
	snapshot string
	counts   pipeline.Counts
}

func (c *countsCache) get(snapshot string) (pipeline.Counts, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.snapshot == "" || c.snapshot != snapshot {
		return pipeline.Counts{}, false
	}
	out := c.counts
	out.Stages = slices.Clone(c.counts.Stages)
	return out, true
}

func (c *countsCache) put(snapshot string, counts pipeline.Counts) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.snapshot, c.counts = snapshot, counts
	c.counts.Stages = slices.Clone(counts.Stages)
}

// readCounts is Counts in tx's snapshot; tx is a read-only snapshot
// (db.snapshot), which writes nothing the cache would not see.
func (db *DB) readCounts(tx pgx.Tx) (pipeline.Counts, error) {
	var snap string
	if err := tx.QueryRow(db.ctx, `SELECT pg_current_snapshot()::text`).Scan(&snap); err != nil {
		return pipeline.Counts{}, err
	}
	if c, ok := db.counted.get(snap); ok {
		return c, nil
	}
	c := pipeline.Counts{Stages: make([]pipeline.StageCounts, len(db.stages))}
	for i, s := range db.stages {
		c.Stages[i].Stage = s.Name
	}
	if err := tx.QueryRow(db.ctx, `SELECT count(*) FROM item`).Scan(&c.Items); err != nil {
		return c, err
	}
	var unfinished int
	if err := tx.QueryRow(db.ctx, countUnfinishedSQL).Scan(&unfinished); err != nil {
		return c, err
	}
	c.Done = c.Items - unfinished
	// An item has the outputs of exactly the stages before its position
	// (Check verifies it): an output at stage s for every done item and
	// every one queued, in a batch job or dead at a later stage. So the
	// outputs are counted from the positions, without reading the rows
	// of outputs, which hold every stage's in one (outrow.go).
	past := make([]int, len(db.stages)) // items queued, in a batch job or dead at each stage
	for _, q := range []struct {
		table, counted string
		field          func(*pipeline.StageCounts) *int
	}{
		// Items a batch job holds are not queued (InBatchCount).
		{"todo", "batch IS NULL", func(s *pipeline.StageCounts) *int { return &s.Queued }},
		{"dead", "true", func(s *pipeline.StageCounts) *int { return &s.Dead }},
	} {
		rows, _ := tx.Query(db.ctx, `SELECT stage, count(*) FILTER (WHERE `+q.counted+`), count(*) FROM `+q.table+` GROUP BY stage`)
		var si int16
		var n, all int
		_, err := pgx.ForEachRow(rows, []any{&si, &n, &all}, func() error {
			if int(si) >= len(db.stages) {
				return pipeline.Damaged("", "", nil, "%s holds rows of unknown stage %d", q.table, si)
			}
			*q.field(&c.Stages[si]) = n
			past[si] += all
			return nil
		})
		if err != nil {
			return c, err
		}
	}
	later := c.Done
	for si := len(db.stages) - 1; si >= 0; si-- {
		c.Stages[si].Output = later
		later += past[si]
	}
	db.counted.put(snap, c)
	return c, nil
}

// placeColumns are what Locate reads of an item besides its history
// (itemPlace, in targets' order), from its rows in item i, todo t,
// dead d and output o joined by item_id.
const placeColumns = `i.record, t.stage, t.batch, t.batch_sends, d.stage, d.letter, o.data`

// itemPlace is an item's placeColumns: nil where it has no row.
type itemPlace struct {
	record         []byte
	tStage, dStage *int16
	batch          *int64
	sends          *int16
	letter, row    []byte
}

// targets are the scan targets of placeColumns.
func (p *itemPlace) targets() []any {
	return []any{&p.record, &p.tStage, &p.batch, &p.sends, &p.dStage, &p.letter, &p.row}
}

// Locate answers "where is item id", with its dead-letter history.
func (db *DB) Locate(id string) (pipeline.Location, error) {
	loc := pipeline.Location{ID: id}
	err := db.snapshot(db.ctx, func(tx pgx.Tx) error {
		var p itemPlace
		err := tx.QueryRow(db.ctx, `SELECT `+placeColumns+` FROM item i LEFT JOIN todo t USING (item_id)
			LEFT JOIN dead d USING (item_id) LEFT JOIN output o USING (item_id) WHERE i.item_id = $1`, id).
			Scan(p.targets()...)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("item %q: %w", id, ErrNotFound)
		}
		if err != nil {
			return err
		}
		if loc, err = db.location(id, p); err != nil {
			return err
		}
		loc.History, err = db.history(db.ctx, tx, id)
		return err
	})
	return loc, err
}

// location is Locate's answer for item id from its place, without the
// history.
func (db *DB) location(id string, p itemPlace) (pipeline.Location, error) {
	loc := pipeline.Location{ID: id}
	si := len(db.stages) - 1
	switch {
	case p.tStage != nil && p.batch != nil:
		si, loc.Status = int(*p.tStage), pipeline.StatusInBatch.String()
	case p.tStage != nil:
		si, loc.Status = int(*p.tStage), "queued"
		if p.sends != nil {
			loc.BatchSends = int(*p.sends)
		}
	case p.dStage != nil:
		si, loc.Status = int(*p.dStage), "dead"
		var dl pipeline.DeadLetter
		if json.Unmarshal(p.letter, &dl) == nil {
			loc.Dead = &dl
		}
	default:
		loc.Status = "done"
	}
	if si >= len(db.stages) {
		return loc, pipeline.Damaged(id, "", nil, "at unknown stage %d", si)
	}
	loc.Stage = db.stages[si].Name
	if err := db.readRecord(id, p.record, &loc.Record); err != nil {
		return loc, fmt.Errorf("item %q: bad record: %w", id, err)
	}
	loc.Output = map[string]json.RawMessage{}
	err := forEachOutput(p.row, func(s int, data []byte) error {
		if s < len(db.stages) {
			out, err := db.unmarkOutput(id, s, data, loc.Record.Text)
			if err != nil {
				return err
			}
			loc.Output[db.stages[s].Name] = out
		}
		return nil
	})
	if errors.Is(err, errOutputRow) {
		return loc, pipeline.Damaged(id, "", err, "bad outputs")
	}
	return loc, err
}

// DeadHistory lists the dead letters item id had before a re-queue, a
// re-run or an edit sent it back to a queue, oldest first.
func (db *DB) DeadHistory(id string) ([]pipeline.PastDeadLetter, error) {
	var out []pipeline.PastDeadLetter
	err := db.snapshot(db.ctx, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(db.ctx, `SELECT EXISTS (SELECT 1 FROM item WHERE item_id = $1)`, id).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return fmt.Errorf("item %q: %w", id, ErrNotFound)
		}
		var err error
		out, err = db.history(db.ctx, tx, id)
		return err
	})
	return out, err
}

func (db *DB) history(ctx context.Context, tx pgx.Tx, id string) ([]pipeline.PastDeadLetter, error) {
	rows, _ := tx.Query(ctx, `SELECT stage, letter, retired, reason FROM history WHERE item_id = $1 ORDER BY id`, id)
	var out []pipeline.PastDeadLetter
	var p pipeline.PastDeadLetter
	var s int16
	var letter []byte
	_, err := pgx.ForEachRow(rows, []any{&s, &letter, &p.Retired, &p.Reason}, func() error {
		if int(s) < len(db.stages) {
			p.Stage = db.stages[s].Name
		}
		p.Dead = pipeline.DeadLetter{}
		if err := json.Unmarshal(letter, &p.Dead); err != nil {
			return pipeline.Damaged(id, "", err, "dead-letter history entry is damaged")
		}
		p.Retired = p.Retired.UTC()
		out = append(out, p)
		return nil
	})
	return out, err
}

// page walks a keyset-paginated query: query takes the last key of the
// previous page and the comparison to it ("key "+from+" $n"), and
// returns the rows' keys; each page is read whole before fn sees it, so
// no connection or transaction is held across fn. The first page begins
// at the least key, the empty string (>=), not after it: a store takes
// an item whose id is empty, and a walk that skipped it would leave it
// out of what it reads or changes.
func page[T any](db *DB, query func(after, from string) ([]T, func(T) string, error), fn func(T) error) error {
	after, from := "", ">="
	for {
		rows, key, err := query(after, from)
		if err != nil {
			return err
		}
		for _, r := range rows {
			if err := fn(r); err != nil {
				return err
			}
		}
		if len(rows) < pageSize {
			return nil
		}
		after, from = key(rows[len(rows)-1]), ">"
	}
}

// ForEachDead calls fn for every dead letter of stage, in id order.
func (db *DB) ForEachDead(stage string, fn func(pipeline.DeadEntry) error) error {
	si, err := db.stageIndex(stage)
	if err != nil {
		return err
	}
	return page(db, func(after, from string) ([]pipeline.DeadEntry, func(pipeline.DeadEntry) string, error) {
		rows, _ := db.pool.Query(db.ctx, `SELECT d.item_id, d.letter, i.record FROM dead d LEFT JOIN item i USING (item_id)
			WHERE d.stage = $1 AND d.item_id `+from+` $2 ORDER BY d.item_id LIMIT $3`, si, after, pageSize)
		var out []pipeline.DeadEntry
		var id string
		var letter, record []byte
		_, err := pgx.ForEachRow(rows, []any{&id, &letter, &record}, func() error {
			e := pipeline.DeadEntry{ID: id}
			if err := json.Unmarshal(letter, &e.Dead); err != nil {
				return fmt.Errorf("dead letter of %q at %s: %w", id, stage, err)
			}
			// A damaged record leaves the text out (its letter still
			// lists); one whose names could not be read fails the page.
			var r pipeline.Record
			var ne *nameReadError
			switch err := db.readRecord(id, record, &r); {
			case err == nil:
				e.Text = r.Text
			case errors.As(err, &ne):
				return err
			}
			out = append(out, e)
			return nil
		})
		return out, func(e pipeline.DeadEntry) string { return e.ID }, err
	}, fn)
}

// ForEachDeadLocation calls fn with the Location of every item dead at
// stage, in id order, as Locate gives it but without its History: what
// an export of every item writes of a dead letter, read in one
// statement per page of pageSize letters rather than a few statements
// per letter. Memory holds a page, never the stage, and each page is
// read whole before fn sees it, so fn may use the store. A letter that
// does not decode fails as ForEachDead fails on it; an item Locate
// fails on fails with Locate's error, after fn has had the letters
// before it.
func (db *DB) ForEachDeadLocation(stage string, fn func(pipeline.Location) error) error {
	si, err := db.stageIndex(stage)
	if err != nil {
		return err
	}
	// The page keeps the rows as read: each is decoded at its turn, so
	// a damaged one fails where a Locate of it would.
	type deadPlace struct {
		id     string
		exists bool // the item's row is there
		place  itemPlace
	}
	return page(db, func(after, from string) ([]deadPlace, func(deadPlace) string, error) {
		rows, _ := db.pool.Query(db.ctx, `SELECT d.item_id, i.item_id IS NOT NULL, `+placeColumns+` FROM dead d
			LEFT JOIN item i USING (item_id) LEFT JOIN todo t USING (item_id) LEFT JOIN output o USING (item_id)
			WHERE d.stage = $1 AND d.item_id `+from+` $2 ORDER BY d.item_id LIMIT $3`, si, after, pageSize)
		var out []deadPlace
		var r deadPlace
		_, err := pgx.ForEachRow(rows, append([]any{&r.id, &r.exists}, r.place.targets()...), func() error {
			out = append(out, r)
			r = deadPlace{} // what it held is out's now
			return nil
		})
		return out, func(r deadPlace) string { return r.id }, err
	}, func(r deadPlace) error {
		var dl pipeline.DeadLetter
		if err := json.Unmarshal(r.place.letter, &dl); err != nil {
			return fmt.Errorf("dead letter of %q at %s: %w", r.id, stage, err)
		}
		if !r.exists {
			return fmt.Errorf("item %q: %w", r.id, ErrNotFound)
		}
		loc, err := db.location(r.id, r.place)
		if err != nil {
			return err
		}
		return fn(loc)
	})
}

// Tally is the stored aggregate, its shards summed.
func (db *DB) Tally() (pipeline.Tally, error) {
	var t pipeline.Tally
	err := db.snapshot(db.ctx, func(tx pgx.Tx) error {
		var err error
		t, err = readTally(db.ctx, tx)
		return err
	})
	return t, err
}

// Usage is the tokens billed per stage by every committed transition,
// ever, recorded in the transactions that stored what they paid for.
func (db *DB) Usage() (map[string]pipeline.Usage, error) {
	return db.usage(db.ctx, db.pool, "")
}

type queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func (db *DB) usage(ctx context.Context, q queryer, run string) (map[string]pipeline.Usage, error) {
	rows, _ := q.Query(ctx, `SELECT stage, sum(prompt)::bigint, sum(candidate)::bigint, sum(total)::bigint
		FROM usage WHERE run_id = $1 GROUP BY stage`, run)
	out := map[string]pipeline.Usage{}
	var stage string
	var u pipeline.Usage
	_, err := pgx.ForEachRow(rows, []any{&stage, &u.PromptTokens, &u.CandidateTokens, &u.TotalTokens}, func() error {
		out[stage] = u
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read usage from %s: %w", db.path, err)
	}
	return out, nil
}
