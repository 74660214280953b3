// This file counts how many batch jobs asked for each item at its stage
// (see the bbolt store's batchsends.go for why): the count is the queue
// row's batch_sends, raised when a job holding the row is named by
// the API (created, or re-attached), carried when ReturnBatch puts the row back, and gone with
// the row when a result moves the item on. A row queued any other way (a
// rerun, a requeue, an edit) starts at 0.

package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// countSendsSQL adds one send to each queue row job $1 holds at stage $2.
const countSendsSQL = `UPDATE todo SET batch_sends = batch_sends + 1 WHERE batch = $1 AND stage = $2`

// enqueueSentSQL is enqueueSQL for rows that keep their sends ($3).
const enqueueSentSQL = `INSERT INTO todo (seq, stage, item_id, batch_sends)
	SELECT nextval('todo_seq'), s, id, n FROM (SELECT id, s, n FROM unnest($1::text[], $2::smallint[], $3::smallint[]) WITH ORDINALITY AS u(id, s, n, o) ORDER BY o) q`

// heldRow is a queue row a job held, as ReturnBatch deletes it.
type heldRow struct {
	seq   int64
	sends int16
}

func heldRows(rows pgx.Rows) (map[string]heldRow, error) {
	out := map[string]heldRow{}
	var id string
	var h heldRow
	_, err := pgx.ForEachRow(rows, []any{&id, &h.seq, &h.sends}, func() error {
		out[id] = h
		return nil
	})
	return out, err
}

// countSends raises the sends of job num's rows at stage si: the job
// was just found to exist at the API (created, or re-attached).
func countSends(ctx context.Context, tx pgx.Tx, num uint64, si int) error {
	_, err := tx.Exec(ctx, countSendsSQL, int64(num), si)
	return err
}

// BatchSends returns, for each item job num holds, how many batch jobs
// were created holding it at the job's stage (this one included once the
// API named it) since it last entered that stage's queue other than
// by a job giving it back. Items never sent are left out.
func (db *DB) BatchSends(num uint64) (map[string]int, error) {
	job, err := db.BatchJobByNum(num)
	if err != nil {
		return nil, err
	}
	si, err := db.stageIndex(job.Stage)
	if err != nil {
		return nil, fmt.Errorf("batch job %d: %w", num, err)
	}
	rows, _ := db.pool.Query(db.ctx, `SELECT item_id, batch_sends FROM todo WHERE batch = $1 AND stage = $2 AND batch_sends > 0`, int64(num), si)
	out := map[string]int{}
	var id string
	var n int16
	if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error {
		out[id] = int(n)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read the sends of batch job %d in %s: %w", num, db.path, err)
	}
	return out, nil
}
