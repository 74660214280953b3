package postgres

import (
	"context"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// backfillNames stores the records of a pipeline stored before schema 18
// in the form of step 18 (tagNamedRecord: numbered names, no id), a page
// of rows at a time in key order, in the migrating transaction. Each
// page's names are numbered in field_name by that same transaction, so
// the records and their names commit together or not at all, and the
// numbers are held in a cache of the migration's own: db's learns them
// from the committed table after the migration. A record that does not
// read (damage, which its readers go on reporting), whose id is not its
// row's, or whose new form would not read back the same stays as it is.
func backfillNames(ctx context.Context, tx pgx.Tx) error {
	names := newFieldNames(nil)
	if err := names.load(ctx, tx); err != nil {
		return err
	}
	after, from := "", ">=" // from the least id, '' (see page)
	for {
		rows, _ := tx.Query(ctx, `SELECT item_id, record FROM item WHERE item_id `+from+` $1 AND substr(record, 1, 1) <> $2
			ORDER BY item_id LIMIT $3`, after, []byte{tagNamedRecord}, rewritePage)
		var ids []string
		var olds [][]byte
		var recs []pipeline.Record
		var id string
		var record []byte
		read := 0
		_, err := pgx.ForEachRow(rows, []any{&id, &record}, func() error {
			read++
			after, from = id, ">"
			var r pipeline.Record
			if decodeRecord(record, &r) != nil || r.ID != id {
				return nil
			}
			ids, olds, recs = append(ids, id), append(olds, append([]byte(nil), record...)), append(recs, r)
			return nil
		})
		if err != nil {
			return err
		}
		if missing := names.unnumbered(recs); len(missing) > 0 {
			if err := insertNames(ctx, tx, missing); err != nil {
				return fmt.Errorf("number the field names: %w", err)
			}
			if err := names.load(ctx, tx); err != nil {
				return err
			}
		}
		var newIDs []string
		var newRecs [][]byte
		for i, r := range recs {
			b, err := encodeNamedRecord(r, names)
			if err != nil || len(b) == 0 || b[0] != tagNamedRecord || len(b) >= len(olds[i]) {
				continue
			}
			var back pipeline.Record
			if decodeNamedRecord(b, ids[i], names, &back, nil) == nil && reflect.DeepEqual(back, r) {
				newIDs, newRecs = append(newIDs, ids[i]), append(newRecs, b)
			}
		}
		if len(newIDs) > 0 {
			if _, err := tx.Exec(ctx, `UPDATE item i SET record = k.record
				FROM unnest($1::text[], $2::bytea[]) AS k(id, record) WHERE i.item_id = k.id`, newIDs, newRecs); err != nil {
				return err
			}
		}
		if read < rewritePage {
			return nil
		}
	}
}
