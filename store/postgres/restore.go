package postgres

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

var _ pipeline.Restorer = (*DB)(nil)

// Restore writes items' whole state (pipeline.Restorer) in one
// transaction: `sawtooth copy` into PostgreSQL. Queued items get fresh
// sequences in the order given.
func (db *DB) Restore(items []pipeline.Location) error {
	recs := make([]pipeline.Record, len(items))
	for i, loc := range items {
		recs[i] = loc.Record
	}
	if err := db.names.register(db.ctx, db.pool, recs); err != nil {
		return fmt.Errorf("restore %d items into %s: %w", len(items), db.path, err)
	}
	r := &restoreRows{last: db.stages[len(db.stages)-1].Name}
	for _, loc := range items {
		if err := r.add(db, loc); err != nil {
			return err
		}
	}
	err := db.tx(db.ctx, func(tx pgx.Tx) error {
		if err := db.adminLock(db.ctx, tx); err != nil {
			return err
		}
		var clash string
		err := tx.QueryRow(db.ctx, `SELECT item_id FROM item WHERE item_id = ANY($1) LIMIT 1`, r.ids).Scan(&clash)
		if err == nil {
			return fmt.Errorf("item %q is already there", clash)
		}
		if err != pgx.ErrNoRows {
			return err
		}
		b := &pgx.Batch{}
		r.tally.cube.queueKeys(b) // before the rows that name them
		r.queue(b)
		r.tally.queue(b, db.nextShard())
		return tx.SendBatch(db.ctx, b).Close()
	})
	if err != nil {
		return fmt.Errorf("restore %d items into %s: %w", len(items), db.path, err)
	}
	if len(r.enqIDs) > 0 {
		db.ensureQueueStats(db.ctx)
	}
	return nil
}

// restoreRows is what Restore inserts, table by table, as the columns
// unnest reads.
type restoreRows struct {
	// last is the pipeline's last stage: a done item's output there is
	// folded into the tally.
	last                 string
	ids                  []string
	recs                 [][]byte
	outIDs               []string
	outRows              [][]byte // rows of outputs (outrow.go)
	enqIDs               []string
	enqStages, enqSends  []int16
	deadIDs              []string
	deadStages           []int16
	deadLetters          [][]byte
	histIDs, histReasons []string
	histStages           []int16
	histLetters          [][]byte
	histRetired          []any
	tally                tallyDelta
}

// add adds the rows of item loc, or says why it cannot be restored into
// db.
func (r *restoreRows) add(db *DB, loc pipeline.Location) error {
	if loc.ID == "" || loc.Record.ID != loc.ID {
		return fmt.Errorf("restore item %q: record id %q does not match", loc.ID, loc.Record.ID)
	}
	rec, err := encodeNamedRecord(loc.Record, db.names)
	if err != nil {
		return err
	}
	r.ids, r.recs = append(r.ids, loc.ID), append(r.recs, rec)
	// Outputs are marked and packed against the text as the stored
	// record reads back, as a commit's are (collectTexts): a record
	// stored as JSON has its invalid UTF-8 replaced, and an output that
	// repeats the text given would read back with the replaced one.
	text := loc.Record.Text
	if storedAsJSON(rec) {
		var back pipeline.Record
		if err := decodeRecord(rec, &back); err != nil {
			return fmt.Errorf("restore item %q: its record does not read back: %w", loc.ID, err)
		}
		text = back.Text
	}
	var entries []outputEntry
	for stage, out := range loc.Output {
		si, ok := db.index[stage]
		if !ok {
			return fmt.Errorf("restore item %q: output of unknown stage %q", loc.ID, stage)
		}
		entries = append(entries, outputEntry{si, storedForm(db.stages, si, out, text, true)})
	}
	if len(entries) > 0 {
		slices.SortFunc(entries, func(a, b outputEntry) int { return cmp.Compare(a.stage, b.stage) })
		r.outIDs, r.outRows = append(r.outIDs, loc.ID), append(r.outRows, encodeOutputRow(entries))
	}
	for _, past := range loc.History {
		si, ok := db.index[past.Stage]
		if !ok {
			return fmt.Errorf("restore item %q: history at unknown stage %q", loc.ID, past.Stage)
		}
		letter, err := json.Marshal(past.Dead)
		if err != nil {
			return err
		}
		r.histIDs, r.histStages, r.histLetters = append(r.histIDs, loc.ID), append(r.histStages, int16(si)), append(r.histLetters, letter)
		r.histRetired, r.histReasons = append(r.histRetired, past.Retired.UTC()), append(r.histReasons, past.Reason)
	}
	return r.place(db, loc)
}

// place adds where item loc is: tallied when done, queued or dead at its
// stage.
func (r *restoreRows) place(db *DB, loc pipeline.Location) error {
	si, ok := db.index[loc.Stage]
	switch {
	case loc.Status == "done":
		if f, ok := factOf(loc.Output[r.last]); ok {
			r.tally.fold(loc.ID, f, confidenceOf(loc.Output[confStage]), +1)
		}
	case !ok:
		return fmt.Errorf("restore item %q: %s at unknown stage %q", loc.ID, loc.Status, loc.Stage)
	case loc.Status == "queued":
		r.enqIDs, r.enqStages = append(r.enqIDs, loc.ID), append(r.enqStages, int16(si))
		r.enqSends = append(r.enqSends, int16(max(0, min(loc.BatchSends, math.MaxInt16))))
	case loc.Status == "dead" && loc.Dead != nil:
		letter, err := json.Marshal(loc.Dead)
		if err != nil {
			return err
		}
		r.deadIDs, r.deadStages, r.deadLetters = append(r.deadIDs, loc.ID), append(r.deadStages, int16(si)), append(r.deadLetters, letter)
	default:
		return fmt.Errorf("restore item %q: unknown place %q (a dead item needs its dead letter)", loc.ID, loc.Status)
	}
	return nil
}

// queue queues the inserts of r's rows on b.
func (r *restoreRows) queue(b *pgx.Batch) {
	b.Queue(putItemSQL, r.ids, r.recs)
	if len(r.outIDs) > 0 {
		// A done item with a fact has a row: its fact is its output of
		// the last stage. Its quote is stored in that row.
		cells, labels, confs := r.tally.cube.quoteArgs(r.outIDs)
		b.Queue(`INSERT INTO output (item_id, data, key_id, conf) SELECT u.id, u.data, k.id, u.conf
			FROM unnest($1::text[], $2::bytea[], $3::bytea[], $4::text[], $5::float8[]) AS u(id, data, cell, label, conf)
			LEFT JOIN cube_key k ON k.cell = u.cell AND k.label = u.label`, r.outIDs, r.outRows, cells, labels, confs)
	}
	if len(r.histIDs) > 0 {
		// In the given order: history ids keep each item's order.
		b.Queue(`INSERT INTO history (item_id, stage, letter, retired, reason)
			SELECT i, s, l, r, why FROM unnest($1::text[], $2::smallint[], $3::bytea[], $4::timestamptz[], $5::text[])
			WITH ORDINALITY AS u(i, s, l, r, why, n) ORDER BY n`, r.histIDs, r.histStages, r.histLetters, r.histRetired, r.histReasons)
	}
	if len(r.deadIDs) > 0 {
		b.Queue(`INSERT INTO dead (item_id, stage, letter) SELECT * FROM unnest($1::text[], $2::smallint[], $3::bytea[])`, r.deadIDs, r.deadStages, r.deadLetters)
	}
	if len(r.enqIDs) > 0 {
		// Each keeps its batch sends (batchsends.go).
		b.Queue(enqueueSentSQL, r.enqIDs, r.enqStages, r.enqSends)
	}
}

// AddUsage adds u to the stages' recorded totals.
func (db *DB) AddUsage(u map[string]pipeline.Usage) error {
	b := &pgx.Batch{}
	usageDelta(u).queue(b, nil, db.nextShard())
	if b.Len() == 0 {
		return nil
	}
	if err := db.pool.SendBatch(db.ctx, b).Close(); err != nil {
		return fmt.Errorf("add usage in %s: %w", db.path, err)
	}
	return nil
}
