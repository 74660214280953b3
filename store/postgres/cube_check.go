package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// checkCube adds to Check's problems where the stored cube differs from
// the one folded from the done items: a done item without its quote or
// with another cell or confidence in it (its rating is its fact's, read
// from the same row), a quote on an item not done, a cell's counters
// off. One pass over the rows of outputs: a quote is in its item's row
// (schema step 16), so none can be without one.
func (db *DB) checkCube(ctx context.Context, tx pgx.Tx, add func(format string, args ...any)) error {
	last := len(db.stages) - 1
	ci, ok := db.index[confStage]
	if !ok {
		ci = -1
	}
	// A key_id naming no cube_key reads as label '', so as not its
	// fact's.
	rows, _ := tx.Query(ctx, `SELECT o.item_id, o.data, k.cell, coalesce(k.label, CASE WHEN o.key_id IS NOT NULL THEN '' END), o.conf,
			EXISTS (SELECT 1 FROM todo t WHERE t.item_id = o.item_id) OR EXISTS (SELECT 1 FROM dead d WHERE d.item_id = o.item_id)
		FROM output o LEFT JOIN cube_key k ON k.id = o.key_id`)
	// Only the cells are folded: a quote per done item held in memory
	// would be a map entry per item.
	var want cubeDelta
	var id string
	var row, cell []byte
	var label *string
	var conf *float64
	var unfinished bool
	_, err := pgx.ForEachRow(rows, []any{&id, &row, &cell, &label, &conf, &unfinished}, func() error {
		defer func() { cell, label, conf = nil, nil, nil }()
		data, err := outputAt(row, last)
		if err != nil {
			return nil // checkOutputRows reports a damaged row
		}
		if unfinished || data == nil {
			if label != nil {
				add("cube: item %q is not done but has a quote", id)
			}
			return nil
		}
		classify, _ := outputAt(row, ci)
		f, ok := factOf(data)
		switch {
		case !ok && label != nil:
			add("cube: item %q has a quote but its output of %s folds no fact", id, db.stages[last].Name)
		case !ok:
		case label == nil:
			add("cube: done item %q has no quote", id)
		default:
			c := confidenceOf(classify)
			if string(cell) != string(cubeCellKey(f.Groups)) || *label != f.Label || *conf != c {
				add("cube: the quote of item %q is not its fact's (label %q, confidence %v)", id, f.Label, c)
			}
		}
		if ok {
			want.foldCell(f, 1)
		}
		return nil
	})
	if err != nil {
		return err
	}
	stored, err := readCubeCells(ctx, tx)
	if err != nil {
		add("cube: %v", err)
		return nil
	}
	for k, w := range want.cells {
		s := stored[k]
		delete(stored, k)
		if w.n == 0 {
			continue
		}
		if s == nil {
			add("cube: cell %x of %q is missing (%d items)", k.cell, k.label, w.n)
			continue
		}
		if s.Count != w.n || s.Rating.Count != w.rating.n || s.Rating.Scaled.Cmp(&w.rating.sum) != 0 {
			add("cube: cell %x of %q holds %d items, %d rated summing %v; the done items %d, %d, %v",
				k.cell, k.label, s.Count, s.Rating.Count, s.Rating.Scaled, w.n, w.rating.n, &w.rating.sum)
		}
	}
	for k, s := range stored {
		add("cube: cell %x of %q holds %d items, the done items none", k.cell, k.label, s.Count)
	}
	return nil
}
