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
	return rewriteRecords(ctx, tx, tagNamedRecord, func(page []storedRecord) ([]storedRecord, error) {
		var olds []storedRecord
		var recs []pipeline.Record
		for _, s := range page {
			var r pipeline.Record
			if decodeRecord(s.record, &r) != nil || r.ID != s.id {
				continue
			}
			olds, recs = append(olds, s), append(recs, r)
		}
		if missing := names.unnumbered(recs); len(missing) > 0 {
			if err := insertNames(ctx, tx, missing); err != nil {
				return nil, fmt.Errorf("number the field names: %w", err)
			}
			if err := names.load(ctx, tx); err != nil {
				return nil, err
			}
		}
		var out []storedRecord
		for i, r := range recs {
			b, err := encodeNamedRecord(r, names)
			if err != nil || len(b) == 0 || b[0] != tagNamedRecord || len(b) >= len(olds[i].record) {
				continue
			}
			var back pipeline.Record
			if decodeNamedRecord(b, r.ID, names, &back, nil) == nil && reflect.DeepEqual(back, r) {
				out = append(out, storedRecord{r.ID, b})
			}
		}
		return out, nil
	})
}
