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
	after, from := "", ">=" // from the least id, '' (see page)
	for {
		rows, _ := tx.Query(ctx, `SELECT item_id, record FROM item WHERE item_id `+from+` $1 AND substr(record, 1, 1) <> $2
			ORDER BY item_id LIMIT $3`, after, []byte{tagRecord}, rewritePage)
		var ids []string
		var recs [][]byte
		var id string
		var record []byte
		read := 0
		_, err := pgx.ForEachRow(rows, []any{&id, &record}, func() error {
			read++
			after, from = id, ">"
			var r pipeline.Record
			if decodeRecord(record, &r) != nil {
				return nil // damaged: it stays as it is (packOutputs)
			}
			b, err := encodeRecord(r)
			if err != nil {
				return nil
			}
			// Only a record that reads back as it read: one json.Marshal
			// did not write (an empty "fields":{}) keeps its JSON.
			var back pipeline.Record
			if len(b) < len(record) && decodeRecord(b, &back) == nil && reflect.DeepEqual(back, r) {
				ids, recs = append(ids, id), append(recs, b)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(ids) > 0 {
			if _, err := tx.Exec(ctx, `UPDATE item i SET record = k.record
				FROM unnest($1::text[], $2::bytea[]) AS k(id, record) WHERE i.item_id = k.id`, ids, recs); err != nil {
				return err
			}
		}
		if read < rewritePage {
			return nil
		}
	}
}
