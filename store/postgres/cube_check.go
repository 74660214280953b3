package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// checkCube adds to Check's problems where the stored cube differs from
// the one folded from the done items: a done item without its quote row
// or with another cell, confidence or rating in it, a quote row of an
// item not done, a cell's counters off.
func (db *DB) checkCube(ctx context.Context, tx pgx.Tx, add func(format string, args ...any)) error {
	last := len(db.stages) - 1
	ci, ok := db.index[confStage]
	if !ok {
		ci = -1
	}
	rows, _ := tx.Query(ctx, `SELECT o.item_id, o.data, k.cell, coalesce(k.label, CASE WHEN q.item_id IS NOT NULL THEN '' END), q.conf, q.rating FROM output o
		LEFT JOIN cube_quote q ON q.item_id = o.item_id
		LEFT JOIN cube_key k ON k.id = q.key_id
		WHERE NOT EXISTS (SELECT 1 FROM todo t WHERE t.item_id = o.item_id)
		AND NOT EXISTS (SELECT 1 FROM dead d WHERE d.item_id = o.item_id)`)
	var want cubeDelta
	var id string
	var row, cell []byte
	var label *string
	var conf, rating *float64
	_, err := pgx.ForEachRow(rows, []any{&id, &row, &cell, &label, &conf, &rating}, func() error {
		defer func() { cell, label, conf, rating = nil, nil, nil, nil }()
		data, err := outputAt(row, last)
		if err != nil || data == nil {
			return nil // checkOutputRows reports a damaged row; an item without the output is not done
		}
		classify, _ := outputAt(row, ci)
		f, ok := factOf(data)
		switch {
		case !ok && label != nil:
			add("cube: item %q has a quote row but its output of %s folds no fact", id, db.stages[last].Name)
		case !ok:
		case label == nil:
			add("cube: done item %q has no quote row", id)
		default:
			c := confidenceOf(classify)
			if string(cell) != string(cubeCellKey(f.Groups)) || *label != f.Label || *conf != c || !sameRating(rating, f.Rating) {
				add("cube: the quote row of item %q is not its fact's (label %q, confidence %v)", id, f.Label, c)
			}
		}
		if ok {
			want.fold(id, f, 0, 1)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// A quote row of an item not done: queued, dead, or without an
	// output of the last stage (read from its row, streamed: no list of
	// the done items is kept).
	rows, _ = tx.Query(ctx, `SELECT q.item_id, o.data,
			EXISTS (SELECT 1 FROM todo t WHERE t.item_id = q.item_id) OR EXISTS (SELECT 1 FROM dead d WHERE d.item_id = q.item_id)
		FROM cube_quote q LEFT JOIN output o USING (item_id)`)
	var unfinished bool
	if _, err := pgx.ForEachRow(rows, []any{&id, &row, &unfinished}, func() error {
		data, err := outputAt(row, last)
		if unfinished || err == nil && data == nil {
			add("cube: item %q is not done but has a quote row", id)
		}
		row = nil
		return nil
	}); err != nil {
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

func sameRating(a, b *float64) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}
