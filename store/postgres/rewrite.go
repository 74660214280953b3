package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// rewritePage is how many rows a migration's rewrite reads at a time:
// a page is read, rewritten in Go and updated in one statement, so the
// client holds a page, not the table.
const rewritePage = 5000

// outputRowsPage is how many items a page of backfillOutputRows reads (a
// variable: tests page through a few items).
var outputRowsPage = rewritePage

// storedOutputRow is one output as rewriteOutputs reads it: record is
// its item's record, nil when the item has no row (Check reports that).
type storedOutputRow struct {
	id     string
	stage  int16
	data   []byte
	record []byte
}

// rewriteOutputs is the loop of the migrations that rewrite stored
// outputs in Go (backfillMarks, backfillPacked), on the rows by (item_id,
// stage) those steps found (before step 15): a page of the outputs
// that match where at a time, in key order, in the migrating
// transaction; rewrite gives an output's new data, or nil to leave it
// as it is. where is a condition on o (output) and i (item), its
// arguments numbered from $4 on (args).
func rewriteOutputs(ctx context.Context, tx pgx.Tx, where string, args []any, rewrite func(storedOutputRow) ([]byte, error)) error {
	// Rows a sawtooth of step 15 on framed were stored as its commits
	// store them, marked and packed: nothing to rewrite.
	if framed, err := outputsFramed(ctx, tx); err != nil || framed {
		return err
	}
	afterID, afterStage := "", int16(-1)
	for {
		rows, _ := tx.Query(ctx, `SELECT o.item_id, o.stage, o.data, i.record FROM output o LEFT JOIN item i USING (item_id)
			WHERE (o.item_id, o.stage) > ($1, $2) AND (`+where+`)
			ORDER BY o.item_id, o.stage LIMIT $3`, append([]any{afterID, afterStage, rewritePage}, args...)...)
		var ids []string
		var sts []int16
		var datas [][]byte
		var r storedOutputRow
		read := 0
		_, err := pgx.ForEachRow(rows, []any{&r.id, &r.stage, &r.data, &r.record}, func() error {
			read++
			afterID, afterStage = r.id, r.stage
			data, err := rewrite(r)
			if data != nil {
				ids, sts, datas = append(ids, r.id), append(sts, r.stage), append(datas, data)
			}
			return err
		})
		if err != nil {
			return err
		}
		if len(ids) > 0 {
			if _, err := tx.Exec(ctx, updateOutputsSQL, ids, sts, datas); err != nil {
				return err
			}
		}
		if read < rewritePage {
			return nil
		}
	}
}

// backfillOutputRows frames the outputs a pipeline stored before schema
// 15, one row per (item, stage) in output_by_stage, into one row per
// item (outrow.go), a page of items at a time in key order, in the
// migrating transaction, then drops the old table. Each output keeps its
// stored bytes. Rows of items without a record move too: Check reports
// them as before. With no output_by_stage (step 15 ran before, or found
// nothing to move) there is nothing to do.
func backfillOutputRows(ctx context.Context, tx pgx.Tx) error {
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass('output_by_stage') IS NOT NULL`).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return nil
	}
	// The first page begins at the least id, '' (which a store takes),
	// not after it: an item the pages skip would lose its outputs with
	// the old table.
	after, from := "", ">="
	for {
		rows, _ := tx.Query(ctx, `SELECT item_id, array_agg(stage ORDER BY stage), array_agg(data ORDER BY stage)
			FROM output_by_stage WHERE item_id `+from+` $1 GROUP BY item_id ORDER BY item_id LIMIT $2`, after, outputRowsPage)
		from = ">"
		var ids []string
		var datas [][]byte
		var id string
		var stages []int16
		var outs [][]byte
		read := 0
		_, err := pgx.ForEachRow(rows, []any{&id, &stages, &outs}, func() error {
			read++
			after = id
			entries := make([]outputEntry, len(stages))
			for i, s := range stages {
				entries[i] = outputEntry{int(s), outs[i]}
			}
			ids, datas = append(ids, id), append(datas, encodeOutputRow(entries))
			stages, outs = nil, nil
			return nil
		})
		if err != nil {
			return fmt.Errorf("frame the outputs of each item in one row: %w", err)
		}
		if len(ids) > 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO output (item_id, data) SELECT * FROM unnest($1::text[], $2::bytea[])`, ids, datas); err != nil {
				return fmt.Errorf("frame the outputs of each item in one row: %w", err)
			}
		}
		if read < outputRowsPage {
			break
		}
	}
	_, err := tx.Exec(ctx, `DROP TABLE output_by_stage`)
	return err
}
