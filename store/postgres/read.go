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

// outputsSQL is a lateral subquery giving an item's outputs of stages
// before $1, as parallel arrays in stage order.
const outputsSQL = `LEFT JOIN LATERAL (SELECT array_agg(o.stage ORDER BY o.stage) AS stages, array_agg(o.data ORDER BY o.stage) AS datas
	FROM output o WHERE o.item_id = x.item_id AND o.stage < $1) o ON true`

// item builds a pipeline.Item from its stored record and outputs; si is
// the stage it is for (len(stages) for a done item: no Prev).
func (db *DB) item(record []byte, stages []int16, datas [][]byte, si int) (pipeline.Item, error) {
	var it pipeline.Item
	if err := decodeRecord(record, &it.Record); err != nil {
		return it, pipeline.Damaged("", "", err, "bad record")
	}
	if len(stages) > 0 || si > 0 {
		it.Outputs = make(map[string]json.RawMessage, len(stages))
	}
	for i, s := range stages {
		if int(s) >= len(db.stages) {
			return it, pipeline.Damaged("", "", nil, "output of unknown stage %d", s)
		}
		out, err := db.unmarkOutput(it.Record.ID, int(s), datas[i], it.Record.Text)
		if err != nil {
			return it, err
		}
		it.Outputs[db.stages[s].Name] = out
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
	rows, _ := db.pool.Query(db.ctx, `SELECT x.seq, i.record, o.stages, o.datas
		FROM todo x JOIN item i USING (item_id) `+outputsSQL+`
		WHERE x.stage = $1 AND x.seq > $2 AND x.batch IS NULL ORDER BY x.seq LIMIT $3`, si, int64(after), max)
	return db.collectQueued(rows, si, stage)
}

func (db *DB) collectQueued(rows pgx.Rows, si int, stage string) ([]pipeline.Queued, error) {
	var out []pipeline.Queued
	var seq int64
	var record []byte
	var stages []int16
	var datas [][]byte
	_, err := pgx.ForEachRow(rows, []any{&seq, &record, &stages, &datas}, func() error {
		it, err := db.item(record, stages, datas, si)
		if err != nil {
			return fmt.Errorf("queue %s seq %d: %w", stage, seq, err)
		}
		out = append(out, pipeline.Queued{Seq: uint64(seq), Item: it})
		stages, datas = nil, nil
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
	for _, q := range []struct {
		table, where string
		field        func(*pipeline.StageCounts) *int
	}{
		// Items a batch job holds are not queued (InBatchCount).
		{"todo", "WHERE batch IS NULL", func(s *pipeline.StageCounts) *int { return &s.Queued }},
		{"dead", "", func(s *pipeline.StageCounts) *int { return &s.Dead }},
		{"output", "", func(s *pipeline.StageCounts) *int { return &s.Output }},
	} {
		rows, _ := tx.Query(db.ctx, `SELECT stage, count(*) FROM `+q.table+` `+q.where+` GROUP BY stage`)
		var si int16
		var n int
		_, err := pgx.ForEachRow(rows, []any{&si, &n}, func() error {
			if int(si) >= len(db.stages) {
				return pipeline.Damaged("", "", nil, "%s holds rows of unknown stage %d", q.table, si)
			}
			*q.field(&c.Stages[si]) = n
			return nil
		})
		if err != nil {
			return c, err
		}
	}
	db.counted.put(snap, c)
	return c, nil
}

// Locate answers "where is item id", with its dead-letter history.
func (db *DB) Locate(id string) (pipeline.Location, error) {
	loc := pipeline.Location{ID: id}
	err := db.snapshot(db.ctx, func(tx pgx.Tx) error {
		var record, letter []byte
		var tStage, dStage *int16
		var batch *int64
		var sends *int16
		err := tx.QueryRow(db.ctx, `SELECT i.record, t.stage, t.batch, t.batch_sends, d.stage, d.letter
			FROM item i LEFT JOIN todo t USING (item_id) LEFT JOIN dead d USING (item_id) WHERE i.item_id = $1`, id).
			Scan(&record, &tStage, &batch, &sends, &dStage, &letter)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("item %q: %w", id, ErrNotFound)
		}
		if err != nil {
			return err
		}
		si := len(db.stages) - 1
		switch {
		case tStage != nil && batch != nil:
			si, loc.Status = int(*tStage), pipeline.StatusInBatch.String()
		case tStage != nil:
			si, loc.Status = int(*tStage), "queued"
			if sends != nil {
				loc.BatchSends = int(*sends)
			}
		case dStage != nil:
			si, loc.Status = int(*dStage), "dead"
			var dl pipeline.DeadLetter
			if json.Unmarshal(letter, &dl) == nil {
				loc.Dead = &dl
			}
		default:
			loc.Status = "done"
		}
		if si >= len(db.stages) {
			return pipeline.Damaged(id, "", nil, "at unknown stage %d", si)
		}
		loc.Stage = db.stages[si].Name
		if err := decodeRecord(record, &loc.Record); err != nil {
			return fmt.Errorf("item %q: bad record: %w", id, err)
		}
		loc.Output = map[string]json.RawMessage{}
		rows, _ := tx.Query(db.ctx, `SELECT stage, data FROM output WHERE item_id = $1`, id)
		var s int16
		var data []byte
		if _, err := pgx.ForEachRow(rows, []any{&s, &data}, func() error {
			if int(s) < len(db.stages) {
				out, err := db.unmarkOutput(id, int(s), data, loc.Record.Text)
				if err != nil {
					return err
				}
				loc.Output[db.stages[s].Name] = out
			}
			return nil
		}); err != nil {
			return err
		}
		loc.History, err = db.history(db.ctx, tx, id)
		return err
	})
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
// previous page and returns the rows' keys; each page is read whole
// before fn sees it, so no connection or transaction is held across fn.
func page[T any](db *DB, query func(after string) ([]T, func(T) string, error), fn func(T) error) error {
	after := ""
	for {
		rows, key, err := query(after)
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
		after = key(rows[len(rows)-1])
	}
}

// ForEachDead calls fn for every dead letter of stage, in id order.
func (db *DB) ForEachDead(stage string, fn func(pipeline.DeadEntry) error) error {
	si, err := db.stageIndex(stage)
	if err != nil {
		return err
	}
	return page(db, func(after string) ([]pipeline.DeadEntry, func(pipeline.DeadEntry) string, error) {
		rows, _ := db.pool.Query(db.ctx, `SELECT d.item_id, d.letter, i.record FROM dead d LEFT JOIN item i USING (item_id)
			WHERE d.stage = $1 AND d.item_id > $2 ORDER BY d.item_id LIMIT $3`, si, after, pageSize)
		var out []pipeline.DeadEntry
		var id string
		var letter, record []byte
		_, err := pgx.ForEachRow(rows, []any{&id, &letter, &record}, func() error {
			e := pipeline.DeadEntry{ID: id}
			if err := json.Unmarshal(letter, &e.Dead); err != nil {
				return fmt.Errorf("dead letter of %q at %s: %w", id, stage, err)
			}
			var r pipeline.Record
			if decodeRecord(record, &r) == nil {
				e.Text = r.Text
			}
			out = append(out, e)
			return nil
		})
		return out, func(e pipeline.DeadEntry) string { return e.ID }, err
	}, fn)
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
