package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// rewritePage is how many rows a migration's rewrite reads at a time:
// a page is read, rewritten in Go and updated in one statement, so the
// client holds a page, not the table.
const rewritePage = 5000

// storedOutputRow is one output as rewriteOutputs reads it: record is
// its item's record, nil when the item has no row (Check reports that).
type storedOutputRow struct {
	id     string
	stage  int16
	data   []byte
	record []byte
}

// rewriteOutputs is the loop of the migrations that rewrite stored
// outputs in Go (backfillMarks, backfillPacked): a page of the outputs
// that match where at a time, in key order, in the migrating
// transaction; rewrite gives an output's new data, or nil to leave it
// as it is. where is a condition on o (output) and i (item), its
// arguments numbered from $4 on (args).
func rewriteOutputs(ctx context.Context, tx pgx.Tx, where string, args []any, rewrite func(storedOutputRow) ([]byte, error)) error {
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
