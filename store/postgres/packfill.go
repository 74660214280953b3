package postgres

import (
	"context"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// backfillPacked stores the outputs and records a pipeline stored before
// schema 13 in their packed forms (pack.go, binrecord.go), a page of
// rows at a time in key order, in the migrating transaction: outputs
// first, each read as it read before (its text put back from the
// record) and stored as a commit now would; then records. A row whose
// new form would not be shorter stays as it is, and so does one that
// does not read (a damaged record or output).
func (db *DB) backfillPacked(ctx context.Context, tx pgx.Tx) error {
	stages, err := readDefinition(ctx, tx)
	if err != nil {
		return err
	}
	if err := packOutputs(ctx, tx, stages); err != nil {
		return fmt.Errorf("store outputs packed: %w", err)
	}
	if err := packRecords(ctx, tx); err != nil {
		return fmt.Errorf("store records binary: %w", err)
	}
	return nil
}

func packOutputs(ctx context.Context, tx pgx.Tx, stages []pipeline.StageDef) error {
	return rewriteOutputs(ctx, tx, `substr(o.data, 1, 1) <> $4`, []any{[]byte{tagPacked}}, func(o storedOutputRow) ([]byte, error) {
		if int(o.stage) >= len(stages) || o.record == nil {
			return nil, nil // Check reports it; it stays as it is
		}
		// A damaged record or output stays as it is too: schema 12
		// opened it, and only its item's readers refuse it, as they
		// still do; refusing the migration would leave the pipeline
		// to no sawtooth that opens it.
		var r pipeline.Record
		if decodeRecord(o.record, &r) != nil {
			return nil, nil
		}
		out, err := unmark(o.data, r.Text)
		if err != nil {
			return nil, nil
		}
		if p := storedForm(stages, int(o.stage), out, r.Text, true); len(p) < len(o.data) {
			return p, nil
		}
		return nil, nil
	})
}

func packRecords(ctx context.Context, tx pgx.Tx) error {
	return rewriteRecords(ctx, tx, tagRecord, func(page []storedRecord) ([]storedRecord, error) {
		var out []storedRecord
		for _, s := range page {
			var r pipeline.Record
			if decodeRecord(s.record, &r) != nil {
				continue // damaged: it stays as it is (packOutputs)
			}
			b, err := encodeRecord(r)
			if err != nil {
				continue
			}
			// Only a record that reads back as it read: one json.Marshal
			// did not write (an empty "fields":{}) keeps its JSON.
			var back pipeline.Record
			if len(b) < len(s.record) && decodeRecord(b, &back) == nil && reflect.DeepEqual(back, r) {
				out = append(out, storedRecord{s.id, b})
			}
		}
		return out, nil
	})
}

// storedRecord is an item's id and stored record.
type storedRecord struct {
	id     string
	record []byte
}

// rewriteRecords stores in place of the records whose first byte is not
// done what rewrite gives for them, a page of rows at a time in key
// order: rewrite is given each page (records it does not return stay as
// they are).
func rewriteRecords(ctx context.Context, tx pgx.Tx, done byte, rewrite func([]storedRecord) ([]storedRecord, error)) error {
	after, from := "", ">=" // from the least id, '' (see page)
	for {
		rows, _ := tx.Query(ctx, `SELECT item_id, record FROM item WHERE item_id `+from+` $1 AND substr(record, 1, 1) <> $2
			ORDER BY item_id LIMIT $3`, after, []byte{done}, rewritePage)
		var page []storedRecord
		var id string
		var record []byte
		_, err := pgx.ForEachRow(rows, []any{&id, &record}, func() error {
			after, from = id, ">"
			page = append(page, storedRecord{id, record}) // pgx scans a bytea into a new slice
			return nil
		})
		if err != nil {
			return err
		}
		out, err := rewrite(page)
		if err != nil {
			return err
		}
		if len(out) > 0 {
			ids, recs := make([]string, len(out)), make([][]byte, len(out))
			for i, s := range out {
				ids[i], recs[i] = s.id, s.record
			}
			if _, err := tx.Exec(ctx, `UPDATE item i SET record = k.record
				FROM unnest($1::text[], $2::bytea[]) AS k(id, record) WHERE i.item_id = k.id`, ids, recs); err != nil {
				return err
			}
		}
		if len(page) < rewritePage {
			return nil
		}
	}
}
