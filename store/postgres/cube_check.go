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
	rows, _ := tx.Query(ctx, `SELECT o.item_id, o.data, c.data, k.cell, coalesce(k.label, CASE WHEN q.item_id IS NOT NULL THEN '' END), q.conf, q.rating FROM output o
		LEFT JOIN output c ON c.item_id = o.item_id AND c.stage = $2
		LEFT JOIN cube_quote q ON q.item_id = o.item_id
		LEFT JOIN cube_key k ON k.id = q.key_id
		WHERE o.stage = $1
		AND NOT EXISTS (SELECT 1 FROM todo t WHERE t.item_id = o.item_id)
		AND NOT EXISTS (SELECT 1 FROM dead d WHERE d.item_id = o.item_id)`, last, ci)
	var want cubeDelta
	var id string
	var data, classify, cell []byte
	var label *string
	var conf, rating *float64
	_, err := pgx.ForEachRow(rows, []any{&id, &data, &classify, &cell, &label, &conf, &rating}, func() error {
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
		classify, cell, label, conf, rating = nil, nil, nil, nil, nil
		return nil
	})
	if err != nil {
		return err
	}
	rows, _ = tx.Query(ctx, `SELECT q.item_id FROM cube_quote q WHERE NOT EXISTS
		(SELECT 1 FROM output o WHERE o.item_id = q.item_id AND o.stage = $1)
		OR EXISTS (SELECT 1 FROM todo t WHERE t.item_id = q.item_id)
		OR EXISTS (SELECT 1 FROM dead d WHERE d.item_id = q.item_id)`, last)
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error {
		add("cube: item %q is not done but has a quote row", id)
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
