package postgres

// This file frames an item's outputs of every stage in one row of the
// output table (schema 15). Before, each output was a row of its own,
// keyed by (item_id, stage): at three stages an item paid three tuple
// headers (24 bytes), its id three times, and three entries in a primary
// key, more than the packed outputs themselves (bench/RESULTS.md,
// "PostgreSQL space: one row of outputs per item"). Now the row is a
// format byte and, per stage in increasing order, the stage's index
// (uvarint), the length of its stored output (uvarint) and that output
// as a commit stored it before (whole, marked or packed: mark.go,
// pack.go).
//
// A commit appends its stage's entry in SQL (data = data || entry, the
// row locked by the update) in the transaction that moves the item, so
// two commits never lose each other's entry; an item moves forward one
// stage at a time, so appending keeps the stages in order. Commands that
// drop or rewrite entries (re-run, edit) read the rows FOR UPDATE under
// their item locks, rewrite them in Go and store them whole.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// outputsFormat begins every output row: the framing above. Another
// framing would take another byte.
const outputsFormat byte = 0x01

// outputEntry is one stage's stored output inside an item's row; data
// aliases the row it was read from.
type outputEntry struct {
	stage int
	data  []byte
}

var errOutputRow = errors.New("output row that does not unframe")

// appendOutputEntry appends the entry of stage's stored output data,
// without the format byte (what a commit appends to a row).
func appendOutputEntry(dst []byte, stage int, data []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(stage))
	dst = binary.AppendUvarint(dst, uint64(len(data)))
	return append(dst, data...)
}

// encodeOutputRow is the row of entries, which must be in increasing
// stage order; nil when there is none (the row is deleted).
func encodeOutputRow(entries []outputEntry) []byte {
	if len(entries) == 0 {
		return nil
	}
	n := 1
	for _, e := range entries {
		n += 2*binary.MaxVarintLen16 + len(e.data)
	}
	row := make([]byte, 1, n)
	row[0] = outputsFormat
	for _, e := range entries {
		row = appendOutputEntry(row, e.stage, e.data)
	}
	return row
}

// forEachOutput calls fn with each entry of row in order. A row that
// does not unframe (an unknown format, a length past its end, stages not
// in increasing order) is an error naming what is wrong; a nil row (an
// item without outputs) has no entry.
func forEachOutput(row []byte, fn func(stage int, data []byte) error) error {
	if row == nil {
		return nil
	}
	if len(row) == 0 || row[0] != outputsFormat {
		return fmt.Errorf("%w: unknown format byte", errOutputRow)
	}
	prev := -1
	for i := 1; i < len(row); {
		stage, n := binary.Uvarint(row[i:])
		if n <= 0 || stage > 1<<15 {
			return fmt.Errorf("%w: bad stage at byte %d", errOutputRow, i)
		}
		i += n
		size, n := binary.Uvarint(row[i:])
		if n <= 0 || size > uint64(len(row)-i-n) {
			return fmt.Errorf("%w: bad length at byte %d", errOutputRow, i)
		}
		i += n
		if int(stage) <= prev {
			return fmt.Errorf("%w: stage %d after stage %d", errOutputRow, stage, prev)
		}
		prev = int(stage)
		if err := fn(int(stage), row[i:i+int(size):i+int(size)]); err != nil {
			return err
		}
		i += int(size)
	}
	return nil
}

// outputEntries is every entry of row, in stage order.
func outputEntries(row []byte) ([]outputEntry, error) {
	var out []outputEntry
	err := forEachOutput(row, func(stage int, data []byte) error {
		out = append(out, outputEntry{stage, data})
		return nil
	})
	return out, err
}

// outputAt is the stored output of stage in row, nil when it has none.
func outputAt(row []byte, stage int) ([]byte, error) {
	var found []byte
	err := forEachOutput(row, func(s int, data []byte) error {
		if s == stage {
			found = data
			return errFound
		}
		return nil
	})
	if err != nil && err != errFound {
		return nil, err
	}
	return found, nil
}

// errFound ends a walk of a row early.
var errFound = errors.New("found")

// damagedRow is the error of an item whose output row does not unframe.
func damagedRow(id string, err error) error {
	return fmt.Errorf("item %q: its stored outputs are damaged: %w", id, err)
}

// outputsFramed reports whether the output table is already a row per
// item (step 15 ran): the steps before it that read outputs (11-13) may
// meet one when a pipeline's version alone was set back.
func outputsFramed(ctx context.Context, tx pgx.Tx) (bool, error) {
	var framed bool
	err := tx.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM pg_attribute
		WHERE attrelid = 'output'::regclass AND attname = 'stage' AND NOT attisdropped)`).Scan(&framed)
	return framed, err
}

// changeOutputs applies c's changes to the rows of outputs of its
// items, read FOR UPDATE (their item rows are locked already) and stored
// back whole: the fact of each item of c.foldOut is folded out of tally
// from its output of the last stage; the outputs of an item whose text
// an edit changes (c.oldText) that are stored marked or packed against
// the old text are stored as they read with it (they stay what their
// stage gave), packed again without the text; the outputs of c.dropIDs[i]
// from stage c.dropFrom[i] on are dropped, and a row left without any is
// deleted. A row of an item in c.dropIDs loses its cube quote: a drop
// is from a stage no later than the last, so it cuts the fact the quote
// is of; only a row rewritten for its text keeps it (the item stays
// done). A deleted row takes its quote with it.
func (db *DB) changeOutputs(ctx context.Context, tx pgx.Tx, c *changes, tally *tallyDelta) error {
	from := make(map[string]int, len(c.dropIDs))
	for i, id := range c.dropIDs {
		if f, ok := from[id]; !ok || int(c.dropFrom[i]) < f {
			from[id] = int(c.dropFrom[i])
		}
	}
	fold := make(map[string]bool, len(c.foldOut))
	ids := slices.Clone(c.dropIDs)
	for _, id := range c.foldOut {
		fold[id] = true
		ids = append(ids, id)
	}
	for id := range c.oldText {
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	last := len(db.stages) - 1
	var putIDs, delIDs []string
	var putRows [][]byte
	var putKeep []bool
	rows, _ := tx.Query(ctx, `SELECT item_id, data, key_id IS NOT NULL FROM output WHERE item_id = ANY($1) ORDER BY item_id FOR UPDATE`, ids)
	var id string
	var row []byte
	var quoted bool
	_, err := pgx.ForEachRow(rows, []any{&id, &row, &quoted}, func() error {
		entries, err := outputEntries(row)
		if err != nil {
			if f, ok := from[id]; ok && f == 0 && !fold[id] {
				// Every output goes (a re-run from the first stage,
				// prune) and no fact was counted: the row is deleted
				// unread, as the rows by stage were before schema 15,
				// so that these commands still repair the item.
				delIDs = append(delIDs, id)
				return nil
			}
			if fold[id] {
				// A done item's fact is folded out of the tally from
				// its last output: unreadable, the counters would go
				// wrong.
				return pipeline.Damaged(id, "", err, "its stored outputs are damaged, so its counted fact cannot be taken out of the tally")
			}
			return pipeline.Damaged(id, "", err, "its stored outputs are damaged (re-running it from the first stage, or pruning it, drops them)")
		}
		_, dropped := from[id]
		// A quote on an item dropped from some stage goes even when no
		// entry is cut (a stray quote on a queued item is repaired).
		changed := quoted && dropped
		kept := entries[:0]
		for _, e := range entries {
			if fold[id] && e.stage == last {
				if f, ok := factOf(e.data); ok {
					tally.fold(id, f, 0, -1)
				}
			}
			if f, ok := from[id]; ok && e.stage >= f {
				changed = true
				continue
			}
			if old, ok := c.oldText[id]; ok && (isMarked(e.data) || isPacked(e.data)) {
				out, err := unmark(e.data, old)
				if err != nil {
					return pipeline.Damaged(id, "", err, "its stored output is damaged")
				}
				e.data, changed = storedForm(nil, e.stage, out, "", false), true
			}
			kept = append(kept, e)
		}
		switch {
		case !changed:
		case len(kept) == 0:
			delIDs = append(delIDs, id)
		default:
			putIDs, putRows, putKeep = append(putIDs, id), append(putRows, encodeOutputRow(kept)), append(putKeep, !dropped)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(putIDs) > 0 {
		if _, err := tx.Exec(ctx, `UPDATE output o SET data = k.data,
				key_id = CASE WHEN k.keep THEN o.key_id END, conf = CASE WHEN k.keep THEN o.conf END
			FROM unnest($1::text[], $2::bytea[], $3::bool[]) AS k(id, data, keep)
			WHERE o.item_id = k.id`, putIDs, putRows, putKeep); err != nil {
			return err
		}
	}
	if len(delIDs) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM output WHERE item_id = ANY($1)`, delIDs); err != nil {
			return err
		}
	}
	return nil
}
