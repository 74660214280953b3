package postgres

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// maxProblems bounds Check's report.
const maxProblems = 100

// Check verifies, in one snapshot, what the schema's constraints do not
// already enforce (an item is queued at most once and dead at most once
// by its keys):
//   - no item is both queued and dead, and no row names an unknown stage;
//   - every queue entry, dead letter, output and history entry belongs
//     to a stored item;
//   - an item queued or dead at stage s has the outputs of exactly the
//     stages before s, a done item of every stage;
//   - every item's record reads, and is its own (older forms hold the id);
//   - the stored tally equals the one recomputed by folding the last
//     stage's output of every done item, and so does the cube (each
//     done item's quote, each cell's counters).
//
// It returns one line per problem (at most 100), naming the item and the
// table.
func (db *DB) Check() ([]string, error) {
	var problems []string
	add := func(format string, args ...any) {
		if len(problems) < maxProblems {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	n := len(db.stages)
	err := db.snapshot(db.ctx, func(tx pgx.Tx) error {
		checks := []struct {
			sql    string
			format string
		}{
			{`SELECT item_id, '' FROM todo JOIN dead USING (item_id)`, "item %q is both queued and dead%s"},
			{`SELECT t.item_id, t.batch::text FROM todo t LEFT JOIN batch_job j ON j.num = t.batch
				WHERE t.batch IS NOT NULL AND (j.num IS NULL OR j.closed)`,
				"item %q: in batch job %s, which is not recorded or is closed"},
			{`SELECT item_id, 'todo' FROM todo t WHERE NOT EXISTS (SELECT 1 FROM item i WHERE i.item_id = t.item_id)
				UNION ALL SELECT item_id, 'dead' FROM dead t WHERE NOT EXISTS (SELECT 1 FROM item i WHERE i.item_id = t.item_id)
				UNION ALL SELECT item_id, 'output' FROM output t WHERE NOT EXISTS (SELECT 1 FROM item i WHERE i.item_id = t.item_id)
				UNION ALL SELECT item_id, 'history' FROM history t WHERE NOT EXISTS (SELECT 1 FROM item i WHERE i.item_id = t.item_id)`,
				"item %q has no record but rows in %s (an orphan entry)"},
			{fmt.Sprintf(`SELECT item_id, 'todo' FROM todo WHERE stage >= %[1]d
				UNION ALL SELECT item_id, 'dead' FROM dead WHERE stage >= %[1]d`, n),
				"item %q: a row of %s names a stage this pipeline does not have"},
		}
		for _, c := range checks {
			rows, _ := tx.Query(db.ctx, c.sql)
			var id, what string
			if _, err := pgx.ForEachRow(rows, []any{&id, &what}, func() error {
				add(c.format, id, what)
				return nil
			}); err != nil {
				return err
			}
		}
		if err := db.checkOutputRows(tx, add); err != nil {
			return err
		}
		if err := db.checkRecords(tx, add, func() bool { return len(problems) >= maxProblems }); err != nil {
			return err
		}
		var recomputed pipeline.Tally
		rows, _ := tx.Query(db.ctx, `SELECT o.item_id, o.data FROM output o
			WHERE NOT EXISTS (SELECT 1 FROM todo t WHERE t.item_id = o.item_id)
			AND NOT EXISTS (SELECT 1 FROM dead d WHERE d.item_id = o.item_id)`)
		var id string
		var row []byte
		if _, err := pgx.ForEachRow(rows, []any{&id, &row}, func() error {
			data, err := outputAt(row, n-1)
			if err != nil {
				return nil // checkOutputRows reported it
			}
			if f, ok := factOf(data); data != nil && ok {
				recomputed.Fold(id, f, +1)
			}
			return nil
		}); err != nil {
			return err
		}
		stored, err := readTally(db.ctx, tx)
		if err != nil {
			add("aggregate: %v", err)
			return nil
		}
		for _, d := range stored.Diff(recomputed) {
			add("aggregate: stored != recomputed from the outputs of %s: %s", db.stages[n-1].Name, d)
		}
		return db.checkCube(db.ctx, tx, add)
	})
	if err != nil {
		return problems, fmt.Errorf("check %s: %w", db.path, err)
	}
	return problems, nil
}

// checkOutputRows adds to Check's problems the rows of outputs that do
// not unframe or name a stage this pipeline does not have, and the
// items whose outputs are not those of exactly the stages before their
// position (queued or dead at s: stages 0..s-1; done: every stage).
func (db *DB) checkOutputRows(tx pgx.Tx, add func(format string, args ...any)) error {
	n := len(db.stages)
	rows, _ := tx.Query(db.ctx, `SELECT coalesce(i.item_id, o.item_id), i.item_id IS NOT NULL, coalesce(t.stage, d.stage, $1), o.data
		FROM item i LEFT JOIN todo t USING (item_id) LEFT JOIN dead d USING (item_id) FULL JOIN output o USING (item_id)
		ORDER BY 1`, n)
	var id string
	var stored bool
	var at int16
	var row []byte
	_, err := pgx.ForEachRow(rows, []any{&id, &stored, &at, &row}, func() error {
		defer func() { row = nil }()
		entries, err := outputEntries(row)
		if err != nil {
			add("item %q: its row of outputs is damaged: %v", id, err)
			return nil
		}
		if len(entries) > 0 && entries[len(entries)-1].stage >= n {
			add("item %q: a row of output names a stage this pipeline does not have", id)
		}
		if !stored {
			return nil // an orphan: reported as one
		}
		pos := int(at)
		if len(entries) == pos && (pos == 0 || entries[0].stage == 0 && entries[pos-1].stage == pos-1) {
			return nil
		}
		lo, hi := "", ""
		if len(entries) > 0 {
			lo, hi = fmt.Sprint(entries[0].stage), fmt.Sprint(entries[len(entries)-1].stage)
		}
		add("item %q: %d outputs of stages %s..%s at position %d (an item has the outputs of exactly the stages it passed)", id, len(entries), lo, hi, pos)
		return nil
	})
	return err
}

// checkRecords adds to Check's problems the items whose record does not
// read (a number field_name lacks included) or holds another item's id,
// until the report is full (each unknown number reads field_name again).
// The records are read apart from the sorted walk of checkOutputRows, so
// that the server does not sort them too.
func (db *DB) checkRecords(tx pgx.Tx, add func(format string, args ...any), full func() bool) error {
	rows, _ := tx.Query(db.ctx, `SELECT item_id, record FROM item`)
	var id string
	var record []byte
	errFull := errors.New("the report is full")
	_, err := pgx.ForEachRow(rows, []any{&id, &record}, func() error {
		if full() {
			return errFull
		}
		var r pipeline.Record
		var ne *nameReadError
		switch err := db.readRecord(id, record, &r); {
		case errors.As(err, &ne):
			return err // not damage: the check cannot go on
		case err != nil:
			add("item %q: its record is damaged: %v", id, err)
		case r.ID != id:
			add("item %q: its record is item %q's", id, r.ID)
		}
		return nil
	})
	if errors.Is(err, errFull) {
		return nil
	}
	return err
}
