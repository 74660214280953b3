package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// Whole-table reads (export, the report's streaming pass) are one
// statement each, streamed row by row as the server sends them: one
// snapshot, no keyset pages re-planned and re-joined a thousand items at
// a time. The connection is busy while fn runs, so fn must not need
// every connection of the pool; it may use others (doneThenDead reads
// the dead letters after the stream). An item's outputs come in its row
// of outputs (outrow.go), joined to its record.

// doneStreamSQL selects each done item (neither queued nor dead) in id
// order with its row of outputs (NULL when it has none).
const doneStreamSQL = `SELECT x.item_id, x.record, o.data FROM item x
	LEFT JOIN output o ON o.item_id = x.item_id
	WHERE NOT EXISTS (SELECT 1 FROM todo t WHERE t.item_id = x.item_id)
	AND NOT EXISTS (SELECT 1 FROM dead d WHERE d.item_id = x.item_id)
	ORDER BY x.item_id`

// ForEachDone calls fn with every done item, its record and all outputs
// (of the pipeline's stages), in id order, read in one statement (see
// above).
func (db *DB) ForEachDone(fn func(pipeline.Item) error) error {
	return db.streamOne(doneStreamSQL, nil, func(vals [][]byte) error {
		id, record, row := vals[0], vals[1], vals[2]
		it := pipeline.Item{Outputs: make(map[string]json.RawMessage, len(db.stages))}
		if err := db.readRecord(string(id), record, &it.Record); err != nil {
			return fmt.Errorf("item %q: %w", id, recordDamage("", err, "bad record"))
		}
		err := forEachOutput(row, func(si int, data []byte) error {
			if si >= len(db.stages) {
				return nil // Check reports it
			}
			out, err := db.unmarkOutput(it.Record.ID, si, data, it.Record.Text)
			if err != nil {
				return err
			}
			if storedWhole(data) {
				out = bytes.Clone(data) // data is the stream's buffer
			}
			it.Outputs[db.stages[si].Name] = out
			return nil
		})
		if errors.Is(err, errOutputRow) {
			return fmt.Errorf("item %q: %w", id, pipeline.Damaged("", "", err, "bad outputs"))
		}
		if err != nil {
			return err
		}
		return fn(it)
	})
}

// ForEachOutput calls fn for every item with an output at stage, in id
// order, read in one statement (see above).
func (db *DB) ForEachOutput(stage string, fn func(rec pipeline.Record, out json.RawMessage) error) error {
	si, err := db.stageIndex(stage)
	if err != nil {
		return err
	}
	return db.streamOne(`SELECT o.item_id, o.data, i.record FROM output o JOIN item i USING (item_id)
		ORDER BY o.item_id`, nil, func(vals [][]byte) error {
		data, err := outputAt(vals[1], si)
		if err != nil {
			return fmt.Errorf("item %q: %w", vals[0], pipeline.Damaged("", "", err, "bad outputs"))
		}
		if data == nil {
			return nil
		}
		var rec pipeline.Record
		if err := db.readRecord(string(vals[0]), vals[2], &rec); err != nil {
			return fmt.Errorf("item %q: bad record: %w", vals[0], err)
		}
		out, err := db.unmarkOutput(rec.ID, si, data, rec.Text)
		if err != nil {
			return err
		}
		if storedWhole(data) {
			out = bytes.Clone(out)
		}
		return fn(rec, out)
	})
}

// exportedSQL joins to x, a table keyed by item_id, what restricts it to
// the items report's export of every item without ForEachItem
// (doneThenDead) writes: done (neither queued nor dead), or dead at one
// of the $1 stages. It is left joins rather than EXISTS tests under an
// OR, which the planner cannot make anti joins of: it ran the one of
// todo once per row, a seq scan each time, when todo is empty (estimated
// a row). Neither join adds rows: an item has at most one row in todo
// (todo_item_id_key) and in dead (its key).
const exportedSQL = ` LEFT JOIN dead d ON d.item_id = x.item_id
	LEFT JOIN todo t ON t.item_id = x.item_id
	WHERE (d.item_id IS NULL AND t.item_id IS NULL) OR d.stage < $1`

// FieldNames reads the names report's export of every item makes
// columns of, so that it reads the items once rather than twice: the
// input fields of the records of the items it writes (done and dead;
// queued items are not exported from PostgreSQL), and the top-level
// keys of their outputs by stage, a stage present when one of them has
// an output there. Records are decoded; outputs are only scanned for
// their keys. Both are read in one snapshot. An output of no item (an
// orphan Check reports) adds its names too, as a column no row fills.
// An output that is not a JSON object is a *NotObjectError.
func (db *DB) FieldNames() (inputs map[string]bool, outputs map[string]map[string]bool, err error) {
	inputs, outputs = map[string]bool{}, map[string]map[string]bool{}
	n := len(db.stages)
	err = db.wholeTables(func(tx pgx.Tx) error {
		err := db.stream(tx, `SELECT x.item_id, x.record FROM item x`+exportedSQL, []any{n}, func(vals [][]byte) error {
			if err := db.recordFieldKeys(string(vals[0]), vals[1], inputs); err != nil {
				return fmt.Errorf("item %q: %w", vals[0], recordDamage("", err, "bad record"))
			}
			return nil
		})
		if err != nil {
			return err
		}
		return db.stream(tx, `SELECT x.item_id, x.data FROM output x`+exportedSQL, []any{n}, func(vals [][]byte) error {
			err := forEachOutput(vals[1], func(si int, data []byte) error {
				if si >= n {
					return nil // Check reports it
				}
				stage := db.stages[si].Name
				keys := outputs[stage]
				if keys == nil {
					keys = map[string]bool{}
					outputs[stage] = keys
				}
				if packedKeys(data, keys) {
					return nil
				}
				shape, err := outputShape(data)
				if err != nil {
					return fmt.Errorf("item %q: %w", vals[0], pipeline.Damaged("", stage, err, "its stored output is damaged"))
				}
				if len(shape) > 0 && !objectKeys(shape, keys) {
					return &NotObjectError{ID: string(vals[0]), Stage: stage, Raw: bytes.Clone(shape)}
				}
				return nil
			})
			if errors.Is(err, errOutputRow) {
				return fmt.Errorf("item %q: %w", vals[0], pipeline.Damaged("", "", err, "bad outputs"))
			}
			return err
		})
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read the field names of %s: %w", db.path, err)
	}
	return inputs, outputs, nil
}

// NotObjectError is FieldNames's refusal of an output that is not a JSON
// object (the export says so in its own words).
type NotObjectError struct {
	// ID and Stage name the item and stage; Raw is the output (its
	// shape when stored marked: an empty string for the item's text).
	ID, Stage string
	Raw       []byte
}

// Error names the item and stage.
func (e *NotObjectError) Error() string {
	return fmt.Sprintf("item %q: the output of %s is not a JSON object", e.ID, e.Stage)
}

// NotObject gives the item, the stage and the output.
func (e *NotObjectError) NotObject() (id, stage string, raw []byte) { return e.ID, e.Stage, e.Raw }

// wholeTables runs fn in a read-only snapshot without JIT compilation:
// the planner's cost of a whole-table read brings it on, and compiling
// took 0.2 s of a 0.35 s statement at 200,000 items, to save nothing
// on rows that are only passed on. The snapshot ends in a rollback
// whose failure is no error: the callers' callbacks run while it is
// open, and one slower than DefaultIdleInTransaction over the last rows
// the server has already sent (an export into a paused pipe) finds the
// session ended, with every row read and nothing to commit.
func (db *DB) wholeTables(fn func(pgx.Tx) error) error {
	tx, err := db.pool.BeginTx(db.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(db.ctx) }()
	if _, err := tx.Exec(db.ctx, `SET LOCAL jit = off`); err != nil {
		return err
	}
	return fn(tx)
}

// streamOne is stream of one statement in wholeTables.
func (db *DB) streamOne(query string, args []any, row func(vals [][]byte) error) error {
	return db.wholeTables(func(tx pgx.Tx) error { return db.stream(tx, query, args, row) })
}

// stream runs query and calls row with each row's raw values (binary
// format; nil for NULL), valid only until row returns. An error from
// row cancels the statement rather than reading the rest of the result.
func (db *DB) stream(q queryer, query string, args []any, row func(vals [][]byte) error) error {
	ctx, cancel := context.WithCancel(db.ctx)
	defer cancel()
	// One format code applies to every column.
	rows, err := q.Query(ctx, query, append([]any{pgx.QueryResultFormats{pgx.BinaryFormatCode}}, args...)...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if err := checkBinary(rows.FieldDescriptions()); err != nil {
		return err
	}
	for rows.Next() {
		if err := row(rows.RawValues()); err != nil {
			cancel()
			return err
		}
	}
	return rows.Err()
}

// checkBinary makes sure every column comes in binary format, which the
// raw text and bytea values are read as.
func checkBinary(fields []pgconn.FieldDescription) error {
	for _, f := range fields {
		if f.Format != pgx.BinaryFormatCode {
			return fmt.Errorf("column %s came in text format", f.Name)
		}
	}
	return nil
}
