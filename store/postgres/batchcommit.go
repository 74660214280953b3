package postgres

import (
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// CommitBatch applies results of job num in one transaction. Each
// transition's Seq is ignored: a transition applies only if its item's
// queue row is still held by this job at the job's stage, and it deletes
// that row as it applies, so a result lands once; the others are counted
// as ignored. An applied transition goes through the online commit's
// statements (outputs, the next stage's queue, dead letters, the tally,
// the answer cache and the ledger). A Billed transition records only what
// its item's request was billed; the item stays in the job. A commit to
// a job the API named is its results' (create-time commits precede the
// name): it sets ResultsCommitted. It returns how many applied.
func (db *DB) CommitBatch(num uint64, ts []pipeline.Transition) (applied int, err error) {
	ctx := db.ctx
	_, err = db.updateJob(num, false, func(tx pgx.Tx, j *pipeline.BatchJob) error {
		applied = 0
		j.ResultsCommitted = j.ResultsCommitted || j.Name != ""
		si, err := db.stageIndex(j.Stage)
		if err != nil {
			return fmt.Errorf("batch job %d: %w", num, err)
		}
		var ids []string
		for _, t := range ts {
			if t.Stage == j.Stage {
				ids = append(ids, t.ID)
			}
		}
		ids = slices.Compact(slices.Sorted(slices.Values(ids)))
		if _, err := tx.Exec(ctx, lockItemsSQL, ids); err != nil {
			return err
		}
		// Held before anything moves: a Billed transition applies while its
		// item is held at its turn in ts (before a result of the same item).
		rows, _ := tx.Query(ctx, `SELECT item_id, seq FROM todo WHERE batch = $1 AND stage = $2 AND item_id = ANY($3)`, int64(num), si, ids)
		held, err := seqsByID(rows)
		if err != nil {
			return err
		}
		moved, seqs, billed := db.batchMoves(j, ts, held)
		applied = len(seqs)
		if len(seqs) > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM todo WHERE seq = ANY($1)`, seqs); err != nil {
				return err
			}
		}
		first := make(map[uint64]int, len(seqs))
		var stages []int16
		var movedIDs []string
		for i, t := range moved {
			if t.Outcome != pipeline.Billed {
				first[t.Seq] = i
				stages, movedIDs = append(stages, int16(si)), append(movedIDs, t.ID)
			}
		}
		conf, err := db.confidences(ctx, tx, db.foldIDs(stages, movedIDs))
		if err != nil {
			return err
		}
		var texts map[string]string
		if marked := db.markIDs(moved); len(marked) > 0 {
			rows, _ := tx.Query(ctx, itemTextsSQL, marked)
			if texts, err = db.collectTexts(rows); err != nil {
				return err
			}
		}
		b, _, err := db.commitInserts(moved, first, seqs, seqs, billed, conf, texts)
		if err != nil {
			return err
		}
		if b.Len() == 0 {
			return nil
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return 0, fmt.Errorf("commit results of batch job %d in %s: %w", num, db.path, err)
	}
	return applied, nil
}

// batchMoves picks, in ts's order, the transitions of job j that apply:
// the first result of each held item (its Seq set to the item's queue
// row), and the Billed ones of items still held at their turn (billed
// holds their indexes in moved). It counts the job's answers, dead
// letters, ignored results and usage.
func (db *DB) batchMoves(j *pipeline.BatchJob, ts []pipeline.Transition, held map[string]int64) (moved []pipeline.Transition, seqs []int64, billed []int) {
	for _, t := range ts {
		seq, ok := held[t.ID]
		if t.Stage != j.Stage || !ok {
			j.Ignored++
			continue
		}
		if t.Outcome == pipeline.Billed {
			billed = append(billed, len(moved))
			moved = append(moved, t)
			j.Usage = j.Usage.Add(t.Usage)
			continue
		}
		delete(held, t.ID)
		t.Seq = uint64(seq)
		moved, seqs = append(moved, t), append(seqs, seq)
		switch t.Outcome {
		case pipeline.Succeeded:
			j.Answered++
		case pipeline.DeadLettered:
			j.Dead++
		}
		j.Usage = j.Usage.Add(t.Result.Usage)
	}
	return moved, seqs, billed
}

func seqsByID(rows pgx.Rows) (map[string]int64, error) {
	out := map[string]int64{}
	var id string
	var seq int64
	_, err := pgx.ForEachRow(rows, []any{&id, &seq}, func() error {
		out[id] = seq
		return nil
	})
	return out, err
}

// ReturnBatch puts job num's items that it still holds back at the end of
// their stage's queue, in the job's order, and closes the job with note.
// Idempotent; returns how many items moved.
func (db *DB) ReturnBatch(num uint64, note string, now time.Time) (int, error) {
	n := 0
	ctx := db.ctx
	_, err := db.updateJob(num, false, func(tx pgx.Tx, j *pipeline.BatchJob) error {
		n = 0
		si, err := db.stageIndex(j.Stage)
		if err != nil {
			return fmt.Errorf("batch job %d: %w", num, err)
		}
		// Item locks first, as every move of an item takes them: a rerun
		// or an edit moving one of them meanwhile waits, then finds it
		// queued.
		ids := slices.Sorted(slices.Values(j.Items))
		if _, err := tx.Exec(ctx, lockItemsSQL, ids); err != nil {
			return err
		}
		rows, _ := tx.Query(ctx, `DELETE FROM todo WHERE batch = $1 AND stage = $2 RETURNING item_id, seq, batch_sends`, int64(num), si)
		held, err := heldRows(rows)
		if err != nil {
			return err
		}
		var back []string
		var stages, sends []int16
		for _, id := range j.Items {
			if h, ok := held[id]; ok {
				back, stages, sends = append(back, id), append(stages, int16(si)), append(sends, h.sends)
			}
		}
		if len(back) > 0 {
			// Each row keeps its sends (batchsends.go).
			if _, err := tx.Exec(ctx, enqueueSentSQL, back, stages, sends); err != nil {
				return err
			}
		}
		n = len(back)
		j.Returned += n
		if j.Open() {
			j.Closed, j.Note = now.UTC(), note
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("return the items of batch job %d in %s: %w", num, db.path, err)
	}
	return n, nil
}
