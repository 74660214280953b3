package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

func jsonBytes(v any) ([]byte, error) { return json.Marshal(v) }

// nonNil stores an absent output as an empty one: pgx sends a nil slice
// as NULL, which the output table refuses.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// unfenced is the attempt a transition of the plain Commit carries: it
// applies whatever attempt the queue row is at.
const unfenced = -1

// Commit applies the transitions in one transaction. A transition whose
// item is no longer queued at that stage and sequence is skipped, so
// Commit is idempotent. It does not look at leases: a fleet commits with
// CommitFenced.
func (db *DB) Commit(ts []pipeline.Transition) error {
	_, err := db.commit(db.ctx, ts, nil)
	return err
}

// usageDelta sums the usage of the applied transitions per stage.
type usageDelta map[string]pipeline.Usage

func (u usageDelta) queue(b *pgx.Batch, run *string, shard int16) {
	if len(u) == 0 {
		return
	}
	runs := []string{""}
	if run != nil {
		runs = append(runs, *run)
	}
	var rs, stages []string
	var p, c, t []int64
	for _, r := range runs {
		for _, s := range slices.Sorted(maps.Keys(u)) {
			x := u[s]
			rs, stages = append(rs, r), append(stages, s)
			p, c, t = append(p, x.PromptTokens), append(c, x.CandidateTokens), append(t, x.TotalTokens)
		}
	}
	b.Queue(`INSERT INTO usage (run_id, stage, shard, prompt, candidate, total)
		SELECT r, s, $3, p, c, t FROM unnest($1::text[], $2::text[], $4::bigint[], $5::bigint[], $6::bigint[]) AS u(r, s, p, c, t)
		ON CONFLICT (run_id, stage, shard) DO UPDATE SET prompt = usage.prompt + EXCLUDED.prompt,
			candidate = usage.candidate + EXCLUDED.candidate, total = usage.total + EXCLUDED.total`,
		rs, stages, shard, p, c, t)
}

// enqueueSQL queues ids ($1) at stages ($2) with fresh sequence numbers
// in the order given.
const enqueueSQL = `INSERT INTO todo (seq, stage, item_id)
	SELECT nextval('todo_seq'), s, id FROM (SELECT id, s FROM unnest($1::text[], $2::smallint[]) WITH ORDINALITY AS u(id, s, n) ORDER BY n) q`

// lockItemsSQL locks item rows ($1) in id order. Every transaction that
// moves an item takes its row lock first, so moves of one item are
// serialised and, taken in one order, never deadlock; claims and
// heartbeats touch only queue rows and never wait on these.
const lockItemsSQL = `SELECT item_id FROM item WHERE item_id = ANY($1) ORDER BY item_id FOR UPDATE`

// entries names the queue entries a commit's transitions apply to, in
// the arrays its statements take.
type entries struct {
	seqs     []int64
	stages   []int16
	ids      []string
	attempts []int64 // negative: any attempt (unfenced)
}

func (e *entries) add(seq uint64, si int, id string, attempt int64) {
	e.seqs, e.stages, e.ids, e.attempts = append(e.seqs, int64(seq)), append(e.stages, int16(si)), append(e.ids, id), append(e.attempts, attempt)
}

// commit applies ts; fences, when not nil, holds each transition's claim
// attempt (unfenced applies whatever the attempt). It returns the
// sequences of the transitions it did not apply. A Billed transition
// leaves its entry queued: it only records what its calls were billed,
// when its entry is still there (at the claim's attempt), and is never
// among the skipped.
func (db *DB) commit(ctx context.Context, ts []pipeline.Transition, fences []int64) (skipped []uint64, err error) {
	if len(ts) == 0 {
		return nil, nil
	}
	n := len(ts)
	moves := entries{make([]int64, 0, n), make([]int16, 0, n), make([]string, 0, n), make([]int64, 0, n)}
	var billed entries
	var billedAt []int               // index in ts of each billed entry
	first := make(map[uint64]int, n) // seq -> index of its first transition
	for i, t := range ts {
		si, ok := db.index[t.Stage]
		if !ok {
			return nil, fmt.Errorf("commit: unknown stage %q (stages: %s)", t.Stage, stageNames(db.stages))
		}
		a := int64(unfenced)
		if fences != nil {
			a = fences[i]
		}
		if t.Outcome == pipeline.Billed {
			billed.add(t.Seq, si, t.ID, a)
			billedAt = append(billedAt, i)
			continue
		}
		if _, dup := first[t.Seq]; dup {
			continue // already applied by the first of the batch: stale
		}
		first[t.Seq] = i
		moves.add(t.Seq, si, t.ID, a)
	}
	lockIDs := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(moves.ids), billed.ids...))))
	folds := db.foldIDs(moves.stages, moves.ids)
	marked := db.markIDs(ts)
	for range 5 {
		skipped, err = db.commitOnce(ctx, ts, first, lockIDs, moves, billed, billedAt, folds, marked)
		if !retryable(err) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return skipped, nil
}

// deleteClaimedSQL deletes the queue rows of the transitions ($1 seqs,
// $2 stages, $3 ids, $4 attempts, negative = any), locking them in
// sequence order, and returns the sequences it deleted. The rows are
// found through the key's index (seq = ANY): as a plain join the planner
// would hash the whole queue for a commit of a few hundred.
const deleteClaimedSQL = `DELETE FROM todo t USING (
		SELECT q.seq FROM todo q JOIN unnest($1::bigint[], $2::smallint[], $3::text[], $4::bigint[]) AS k(seq, stage, item_id, attempt)
			ON q.seq = k.seq AND q.stage = k.stage AND q.item_id = k.item_id AND (k.attempt < 0 OR q.attempt = k.attempt)
		WHERE q.seq = ANY($1::bigint[]) AND q.batch IS NULL
		ORDER BY q.seq FOR UPDATE OF q) l
	WHERE t.seq = l.seq RETURNING t.seq`

// lockBilledSQL locks, in sequence order, the queue rows of the billed
// entries ($1..$4, then the moved ones $5..$8, so every queue row the
// commit touches is locked in one order) and returns the (1-based)
// positions of the billed entries still there at their attempt.
const lockBilledSQL = `SELECT k.n FROM todo q JOIN (
		SELECT * FROM unnest($1::bigint[], $2::smallint[], $3::text[], $4::bigint[]) WITH ORDINALITY AS b(seq, stage, item_id, attempt, n)
		UNION ALL
		SELECT seq, stage, item_id, attempt, 0 FROM unnest($5::bigint[], $6::smallint[], $7::text[], $8::bigint[]) AS m(seq, stage, item_id, attempt)) k
	ON q.seq = k.seq AND q.stage = k.stage AND q.item_id = k.item_id AND (k.attempt < 0 OR q.attempt = k.attempt)
	WHERE q.batch IS NULL ORDER BY q.seq FOR UPDATE OF q`

// commitOnce runs one commit transaction in two round trips: BEGIN, the
// item locks and the queue deletes pipelined in one, every insert and
// COMMIT in the other. The transaction is short, which matters more
// than anything else for a queue many workers commit to at once.
func (db *DB) commitOnce(ctx context.Context, ts []pipeline.Transition, first map[uint64]int, lockIDs []string, moves, billed entries, billedAt []int, folds, marked []string) (skipped []uint64, err error) {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	defer conn.Release()
	open := false
	defer func() {
		if err != nil && open {
			// A rollback that fails leaves the session unusable: close
			// it so the pool does not hand it out again.
			if _, rerr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
				conn.Conn().Close(context.WithoutCancel(ctx))
			}
		}
	}()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(lockItemsSQL, lockIDs)
	if len(billed.seqs) > 0 {
		b.Queue(lockBilledSQL, billed.seqs, billed.stages, billed.ids, billed.attempts, moves.seqs, moves.stages, moves.ids, moves.attempts)
	}
	b.Queue(deleteClaimedSQL, moves.seqs, moves.stages, moves.ids, moves.attempts)
	if len(folds) > 0 {
		// After the item locks: a classify output cannot change under
		// the commit that folds its item into the cube.
		b.Queue(confidencesSQL, folds)
	}
	if len(marked) > 0 {
		b.Queue(itemTextsSQL, marked)
	}
	br := conn.SendBatch(ctx, b)
	open = true
	var deleted, stillQueued []int64
	var conf map[string]float64
	var texts map[string]string
	if _, err = br.Exec(); err == nil {
		if _, err = br.Exec(); err == nil && len(billed.seqs) > 0 {
			rows, _ := br.Query()
			stillQueued, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
		if err == nil {
			rows, _ := br.Query()
			deleted, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
		if err == nil && len(folds) > 0 {
			rows, _ := br.Query()
			conf, err = collectConfidences(rows, db.index[confStage])
		}
		if err == nil && len(marked) > 0 {
			rows, _ := br.Query()
			texts, err = db.collectTexts(rows)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	var billedApplied []int
	for _, n := range stillQueued {
		if n > 0 {
			billedApplied = append(billedApplied, billedAt[n-1])
		}
	}
	b, skipped, err = db.commitInserts(ts, first, moves.seqs, deleted, billedApplied, conf, texts)
	if err != nil {
		return nil, err
	}
	b.Queue("COMMIT")
	if err = conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	open = false
	return skipped, nil
}

// commitInserts builds the statements that apply the transitions whose
// queue rows were deleted, and the billed ones (ts[billed[i]]) whose rows
// are still there, and lists the others. conf holds the stored classify
// confidence of the items it folds into the tally (see foldIDs), texts
// the texts of the items whose outputs may be stored marked (markIDs).
func (db *DB) commitInserts(ts []pipeline.Transition, first map[uint64]int, seqs, deleted []int64, billed []int, conf map[string]float64, texts map[string]string) (*pgx.Batch, []uint64, error) {
	var skipped []uint64
	applied := make(map[uint64]bool, len(deleted))
	for _, s := range deleted {
		applied[uint64(s)] = true
	}
	var (
		outIDs, deadIDs, nextIDs []string
		deadStages, nextStages   []int16
		outEntries, letters      [][]byte
		tally                    tallyDelta
		usage                    = usageDelta{}
		money                    moneyDelta
		landed                   flights
	)
	for _, i := range billed {
		t := &ts[i]
		if t.Usage != (pipeline.Usage{}) {
			usage[t.Stage] = usage[t.Stage].Add(t.Usage)
		}
		money.add(t)
	}
	last := len(db.stages) - 1
	for _, seq := range seqs {
		i := first[uint64(seq)]
		t := &ts[i]
		if t.Outcome == pipeline.Succeeded && t.CacheKey != "" && !t.Cached {
			landed.add(t.Stage, t.CacheKey) // applied or fenced off
		}
		if !applied[t.Seq] {
			skipped = append(skipped, t.Seq)
			continue
		}
		si := db.index[t.Stage]
		if t.Usage != (pipeline.Usage{}) {
			usage[t.Stage] = usage[t.Stage].Add(t.Usage)
		}
		money.add(t)
		switch t.Outcome {
		case pipeline.Succeeded:
			outIDs, outEntries = append(outIDs, t.ID), append(outEntries, appendOutputEntry(nil, si, db.storedOutput(si, t.ID, nonNil(t.Result.Output), texts)))
			if si < last {
				nextIDs, nextStages = append(nextIDs, t.ID), append(nextStages, int16(si+1))
			} else if f, ok := factOf(t.Result.Output); ok {
				c := conf[t.ID]
				if t.Stage == confStage {
					c = confidenceOf(t.Result.Output)
				}
				tally.fold(t.ID, f, c, +1)
			}
		case pipeline.DeadLettered:
			dl, err := json.Marshal(t.Dead)
			if err != nil {
				return nil, nil, fmt.Errorf("commit %q at %s: %w", t.ID, t.Stage, err)
			}
			deadIDs, deadStages, letters = append(deadIDs, t.ID), append(deadStages, int16(si)), append(letters, dl)
		default:
			return nil, nil, fmt.Errorf("commit %q at %s: unknown outcome %d", t.ID, t.Stage, t.Outcome)
		}
	}
	b := &pgx.Batch{}
	// Every item folded in was appended at the last stage: its quote
	// travels in its append, after the keys it names.
	tally.cube.queueKeys(b)
	if len(outIDs) > 0 {
		cells, labels, confs := tally.cube.quoteArgs(outIDs)
		b.Queue(appendOutputsSQL, outIDs, outEntries, []byte{outputsFormat}, cells, labels, confs)
	}
	if len(deadIDs) > 0 {
		b.Queue(`INSERT INTO dead (item_id, stage, letter) SELECT * FROM unnest($1::text[], $2::smallint[], $3::bytea[])`, deadIDs, deadStages, letters)
	}
	if len(nextIDs) > 0 {
		b.Queue(enqueueSQL, nextIDs, nextStages)
	}
	shard := db.nextShard()
	tally.queue(b, shard)
	usage.queue(b, db.run.Load(), shard)
	money.queue(b, shard)
	landed.queueLand(b, db.owner)
	return b, skipped, nil
}

// appendOutputsSQL appends to the rows of outputs of items $1 the
// entries $2 (outrow.go), a new row beginning with the format byte $3,
// and sets each row's cube quote to the one of cell $4, label $5 and
// confidence $6 (NULL elements, or NULL arrays, for none). The update
// locks the row, so two commits of one item (which its item lock already
// orders) never lose each other's entry. Only an append at the last
// stage carries a quote; one before it means the item has no fact, so
// no quote, and NULL is right (and NULL to NULL keeps the update HOT).
// A quote whose key is not in cube_key (queueKeys adds them first)
// fails output's CHECK rather than being lost.
const appendOutputsSQL = `INSERT INTO output (item_id, data, key_id, conf)
	SELECT u.id, $3::bytea || u.entry, k.id, u.conf
	FROM unnest($1::text[], $2::bytea[], $4::bytea[], $5::text[], $6::float8[]) AS u(id, entry, cell, label, conf)
	LEFT JOIN cube_key k ON k.cell = u.cell AND k.label = u.label
	ON CONFLICT (item_id) DO UPDATE SET data = output.data || substr(EXCLUDED.data, 2),
		key_id = EXCLUDED.key_id, conf = EXCLUDED.conf`

// confidencesSQL reads the rows of outputs of items $1, for
// collectConfidences.
const confidencesSQL = `SELECT item_id, data FROM output WHERE item_id = ANY($1)`

// foldIDs lists the items (moves at stages) whose transition may fold them into
// the tally (a success at the last stage) and so needs their classify
// confidence from the stored outputs; none when the pipeline has no
// classify stage, or it is the last (the transition carries the output).
func (db *DB) foldIDs(stages []int16, ids []string) []string {
	ci, ok := db.index[confStage]
	last := len(db.stages) - 1
	if !ok || ci == last {
		return nil
	}
	var out []string
	for i, si := range stages {
		if int(si) == last {
			out = append(out, ids[i])
		}
	}
	return out
}
