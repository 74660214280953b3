package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"math/rand/v2"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// shards is how many rows each aggregate counter is spread over: folds
// from concurrent commits add to different rows instead of queueing on
// one row lock; readers sum the shards.
const shards = 16

// nextShard is the shard of this handle's next fold. Each handle starts
// at a random one: handles started together would otherwise step
// through the shards in lockstep and queue on the same rows.
func (db *DB) nextShard() int16 {
	if db.shard.Load() == 0 {
		// Only the first caller's seed is kept; 0 never comes back
		// before the counter wraps, and then it seeds again.
		db.shard.CompareAndSwap(0, 1+rand.Uint32N(shards))
	}
	return int16(db.shard.Add(1) % shards)
}

type groupKey struct{ field, value, label string }

// tallyDelta is what one transaction adds to or removes from the stored
// tally, merged in memory so each counter row is written once, in
// sorted key order (so concurrent transactions never deadlock on them).
type tallyDelta struct {
	labels  map[string]int64
	groups  map[groupKey]int64
	ratings map[string]*ratingDelta
	// addEx holds up to MaxExamples new example ids per label; delEx the
	// ids folded out.
	addEx map[string][]string
	delEx []string
	cube  cubeDelta
}

type ratingDelta struct {
	sum big.Int
	n   int64
}

// factOf is the fact in a last-stage output, ok false when the stage
// produces none (no label), as the bbolt store decides.
func factOf(raw []byte) (pipeline.Fact, bool) {
	var f pipeline.Fact
	if len(raw) == 0 || json.Unmarshal(storedJSON(raw), &f) != nil || f.Label == "" {
		return f, false
	}
	return f, true
}

// fold adds (sign > 0) or removes (sign < 0) one item's fact, with the
// semantics of pipeline.Tally.Fold, to the tally and the cube; conf is
// the item's classify confidence (see confidenceOf), unused on removal.
func (d *tallyDelta) fold(id string, f pipeline.Fact, conf float64, sign int) {
	n := int64(1)
	if sign < 0 {
		n = -1
	}
	d.cube.fold(id, f, conf, n)
	if d.labels == nil {
		d.labels, d.groups = map[string]int64{}, map[groupKey]int64{}
		d.ratings, d.addEx = map[string]*ratingDelta{}, map[string][]string{}
	}
	d.labels[f.Label] += n
	for field, value := range f.Groups {
		d.groups[groupKey{field, value, f.Label}] += n
	}
	if scaled, ok := f.ScaledRating(); ok {
		r := d.ratings[f.Label]
		if r == nil {
			r = &ratingDelta{}
			d.ratings[f.Label] = r
		}
		r.sum.Add(&r.sum, scaled.Mul(scaled, big.NewInt(n)))
		r.n += n
	}
	if n < 0 {
		d.delEx = append(d.delEx, id)
		for l, ids := range d.addEx {
			d.addEx[l] = slices.DeleteFunc(ids, func(s string) bool { return s == id })
		}
	} else if ex := d.addEx[f.Label]; len(ex) < pipeline.MaxExamples && !slices.Contains(ex, id) {
		d.addEx[f.Label] = append(ex, id)
	}
}

func (d *tallyDelta) empty() bool { return d.labels == nil && len(d.delEx) == 0 }

// queue adds the statements applying d to b, at one shard.
func (d *tallyDelta) queue(b *pgx.Batch, shard int16) {
	defer d.cube.queue(b, shard)
	if len(d.delEx) > 0 {
		b.Queue(`DELETE FROM tally_example WHERE item_id = ANY($1)`, d.delEx)
	}
	if d.labels == nil {
		return
	}
	var labels []string
	var ns []int64
	for _, l := range slices.Sorted(maps.Keys(d.labels)) {
		if d.labels[l] != 0 {
			labels, ns = append(labels, l), append(ns, d.labels[l])
		}
	}
	if len(labels) > 0 {
		b.Queue(`INSERT INTO tally_label (label, shard, n) SELECT l, $2, n FROM unnest($1::text[], $3::bigint[]) AS u(l, n)
			ON CONFLICT (label, shard) DO UPDATE SET n = tally_label.n + EXCLUDED.n`, labels, shard, ns)
	}
	keys := slices.SortedFunc(maps.Keys(d.groups), func(a, b groupKey) int {
		return cmp.Or(cmp.Compare(a.field, b.field), cmp.Compare(a.value, b.value), cmp.Compare(a.label, b.label))
	})
	var fields, values, glabels []string
	var gns []int64
	for _, k := range keys {
		if n := d.groups[k]; n != 0 {
			fields, values, glabels, gns = append(fields, k.field), append(values, k.value), append(glabels, k.label), append(gns, n)
		}
	}
	if len(fields) > 0 {
		b.Queue(`INSERT INTO tally_group (field, value, label, shard, n)
			SELECT f, v, l, $4, n FROM unnest($1::text[], $2::text[], $3::text[], $5::bigint[]) AS u(f, v, l, n)
			ON CONFLICT (field, value, label, shard) DO UPDATE SET n = tally_group.n + EXCLUDED.n`, fields, values, glabels, shard, gns)
	}
	var rlabels, sums []string
	var rns []int64
	for _, l := range slices.Sorted(maps.Keys(d.ratings)) {
		r := d.ratings[l]
		if r.n != 0 || r.sum.Sign() != 0 {
			rlabels, rns, sums = append(rlabels, l), append(rns, r.n), append(sums, r.sum.String())
		}
	}
	if len(rlabels) > 0 {
		b.Queue(`INSERT INTO tally_rating (label, shard, n, sum)
			SELECT l, $2, n, s::numeric FROM unnest($1::text[], $3::bigint[], $4::text[]) AS u(l, n, s)
			ON CONFLICT (label, shard) DO UPDATE SET n = tally_rating.n + EXCLUDED.n, sum = tally_rating.sum + EXCLUDED.sum`,
			rlabels, shard, rns, sums)
	}
	var exIDs, exLabels []string
	for _, l := range slices.Sorted(maps.Keys(d.addEx)) {
		for _, id := range d.addEx[l] {
			exIDs, exLabels = append(exIDs, id), append(exLabels, l)
		}
	}
	if len(exIDs) > 0 {
		// Examples are a sample: concurrent commits may each add a few
		// past MaxExamples; readers keep the first MaxExamples by id.
		b.Queue(`INSERT INTO tally_example (item_id, label)
			SELECT id, l FROM unnest($1::text[], $2::text[]) AS u(id, l)
			WHERE (SELECT count(*) FROM tally_example e WHERE e.label = u.l) < $3
			ON CONFLICT (item_id) DO NOTHING`, exIDs, exLabels, pipeline.MaxExamples)
	}
}

// readTally sums the shards into a pipeline.Tally. Counters at zero are
// left out, as the bbolt store deletes them.
func readTally(ctx context.Context, tx pgx.Tx) (pipeline.Tally, error) {
	t := pipeline.Tally{
		Labels: map[string]int64{}, Groups: map[string]map[string]map[string]int64{},
		Ratings: map[string]pipeline.RatingSum{}, Examples: map[string][]string{},
	}
	rows, _ := tx.Query(ctx, `SELECT label, sum(n)::bigint FROM tally_label GROUP BY label HAVING sum(n) <> 0`)
	var label string
	var n int64
	_, err := pgx.ForEachRow(rows, []any{&label, &n}, func() error {
		t.Labels[label] = n
		t.Items += n
		return nil
	})
	if err != nil {
		return t, fmt.Errorf("read tally: %w", err)
	}
	rows, _ = tx.Query(ctx, `SELECT field, value, label, sum(n)::bigint FROM tally_group GROUP BY 1, 2, 3 HAVING sum(n) <> 0`)
	var field, value string
	_, err = pgx.ForEachRow(rows, []any{&field, &value, &label, &n}, func() error {
		if t.Groups[field] == nil {
			t.Groups[field] = map[string]map[string]int64{}
		}
		if t.Groups[field][value] == nil {
			t.Groups[field][value] = map[string]int64{}
		}
		t.Groups[field][value][label] = n
		return nil
	})
	if err != nil {
		return t, fmt.Errorf("read tally groups: %w", err)
	}
	rows, _ = tx.Query(ctx, `SELECT label, sum(n)::bigint, sum(sum)::text FROM tally_rating GROUP BY label HAVING sum(n) <> 0 OR sum(sum) <> 0`)
	var sum string
	_, err = pgx.ForEachRow(rows, []any{&label, &n, &sum}, func() error {
		s, ok := new(big.Int).SetString(sum, 10)
		if !ok {
			return pipeline.Damaged("", "", nil, "rating sum of %q is not an integer: %s", label, sum)
		}
		t.Ratings[label] = pipeline.RatingSum{Scaled: s, Count: n}
		return nil
	})
	if err != nil {
		return t, fmt.Errorf("read tally ratings: %w", err)
	}
	rows, _ = tx.Query(ctx, `SELECT label, item_id FROM tally_example ORDER BY label, item_id`)
	var id string
	_, err = pgx.ForEachRow(rows, []any{&label, &id}, func() error {
		if len(t.Examples[label]) < pipeline.MaxExamples {
			t.Examples[label] = append(t.Examples[label], id)
		}
		return nil
	})
	if err != nil {
		return t, fmt.Errorf("read tally examples: %w", err)
	}
	return t, nil
}
