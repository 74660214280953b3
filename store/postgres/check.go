package postgres

import (
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
//   - the stored tally equals the one recomputed by folding the last
//     stage's output of every done item, and so does the cube (each
//     done item's quote row, each cell's counters).
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
				UNION ALL SELECT item_id, 'dead' FROM dead WHERE stage >= %[1]d
				UNION ALL SELECT item_id, 'output' FROM output WHERE stage >= %[1]d`, n),
				"item %q: a row of %s names a stage this pipeline does not have"},
			{fmt.Sprintf(`SELECT i.item_id, format('%%s outputs of stages %%s..%%s at position %%s', count(o.stage), min(o.stage), max(o.stage), coalesce(t.stage, d.stage, %[1]d))
				FROM item i LEFT JOIN todo t USING (item_id) LEFT JOIN dead d USING (item_id) LEFT JOIN output o USING (item_id)
				GROUP BY i.item_id, t.stage, d.stage
				HAVING count(o.stage) <> coalesce(t.stage, d.stage, %[1]d)
					OR count(o.stage) > 0 AND (min(o.stage) <> 0 OR max(o.stage) <> coalesce(t.stage, d.stage, %[1]d) - 1)
				LIMIT %[2]d`, n, maxProblems),
				"item %q: %s (an item has the outputs of exactly the stages it passed)"},
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
		var recomputed pipeline.Tally
		rows, _ := tx.Query(db.ctx, `SELECT o.item_id, o.data FROM output o WHERE o.stage = $1
			AND NOT EXISTS (SELECT 1 FROM todo t WHERE t.item_id = o.item_id)
			AND NOT EXISTS (SELECT 1 FROM dead d WHERE d.item_id = o.item_id)`, n-1)
		var id string
		var data []byte
		if _, err := pgx.ForEachRow(rows, []any{&id, &data}, func() error {
			if f, ok := factOf(data); ok {
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
