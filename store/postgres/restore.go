package postgres

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

var _ pipeline.Restorer = (*DB)(nil)

// Restore writes items' whole state (pipeline.Restorer) in one
// transaction: `sawtooth copy` into PostgreSQL. Queued items get fresh
// sequences in the order given.
func (db *DB) Restore(items []pipeline.Location) error {
	var (
		ids, hashes          []string
		recs                 [][]byte
		outIDs               []string
		outStages            []int16
		outData              [][]byte
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
	)
	last := db.stages[len(db.stages)-1].Name
	for _, loc := range items {
		if loc.ID == "" || loc.Record.ID != loc.ID {
			return fmt.Errorf("restore item %q: record id %q does not match", loc.ID, loc.Record.ID)
		}
		rec, err := json.Marshal(loc.Record)
		if err != nil {
			return err
		}
		ids, recs, hashes = append(ids, loc.ID), append(recs, rec), append(hashes, loc.Record.ContentHash())
		for stage, out := range loc.Output {
			si, ok := db.index[stage]
			if !ok {
				return fmt.Errorf("restore item %q: output of unknown stage %q", loc.ID, stage)
			}
			outIDs, outStages, outData = append(outIDs, loc.ID), append(outStages, int16(si)), append(outData, out)
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
			histIDs, histStages, histLetters = append(histIDs, loc.ID), append(histStages, int16(si)), append(histLetters, letter)
			histRetired, histReasons = append(histRetired, past.Retired.UTC()), append(histReasons, past.Reason)
		}
		si, ok := db.index[loc.Stage]
		switch {
		case loc.Status == "done":
			if f, ok := factOf(loc.Output[last]); ok {
				tally.fold(loc.ID, f, confidenceOf(loc.Output[confStage]), +1)
			}
		case !ok:
			return fmt.Errorf("restore item %q: %s at unknown stage %q", loc.ID, loc.Status, loc.Stage)
		case loc.Status == "queued":
			enqIDs, enqStages = append(enqIDs, loc.ID), append(enqStages, int16(si))
			enqSends = append(enqSends, int16(max(0, min(loc.BatchSends, math.MaxInt16))))
		case loc.Status == "dead" && loc.Dead != nil:
			letter, err := json.Marshal(loc.Dead)
			if err != nil {
				return err
			}
			deadIDs, deadStages, deadLetters = append(deadIDs, loc.ID), append(deadStages, int16(si)), append(deadLetters, letter)
		default:
			return fmt.Errorf("restore item %q: unknown place %q (a dead item needs its dead letter)", loc.ID, loc.Status)
		}
	}
	err := db.tx(db.ctx, func(tx pgx.Tx) error {
		if err := db.adminLock(db.ctx, tx); err != nil {
			return err
		}
		var clash string
		err := tx.QueryRow(db.ctx, `SELECT item_id FROM item WHERE item_id = ANY($1) LIMIT 1`, ids).Scan(&clash)
		if err == nil {
			return fmt.Errorf("item %q is already there", clash)
		}
		if err != pgx.ErrNoRows {
			return err
		}
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO item (item_id, record, content_hash) SELECT * FROM unnest($1::text[], $2::bytea[], $3::text[])`, ids, recs, hashes)
		if len(outIDs) > 0 {
			b.Queue(`INSERT INTO output (item_id, stage, data) SELECT * FROM unnest($1::text[], $2::smallint[], $3::bytea[])`, outIDs, outStages, outData)
		}
		if len(histIDs) > 0 {
			// In the given order: history ids keep each item's order.
			b.Queue(`INSERT INTO history (item_id, stage, letter, retired, reason)
				SELECT i, s, l, r, why FROM unnest($1::text[], $2::smallint[], $3::bytea[], $4::timestamptz[], $5::text[])
				WITH ORDINALITY AS u(i, s, l, r, why, n) ORDER BY n`, histIDs, histStages, histLetters, histRetired, histReasons)
		}
		if len(deadIDs) > 0 {
			b.Queue(`INSERT INTO dead (item_id, stage, letter) SELECT * FROM unnest($1::text[], $2::smallint[], $3::bytea[])`, deadIDs, deadStages, deadLetters)
		}
		if len(enqIDs) > 0 {
			// Each keeps its batch sends (batchsends.go).
			b.Queue(enqueueSentSQL, enqIDs, enqStages, enqSends)
		}
		tally.queue(b, db.nextShard())
		return tx.SendBatch(db.ctx, b).Close()
	})
	if err != nil {
		return fmt.Errorf("restore %d items into %s: %w", len(items), db.path, err)
	}
	if len(enqIDs) > 0 {
		db.ensureQueueStats(db.ctx)
	}
	return nil
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
