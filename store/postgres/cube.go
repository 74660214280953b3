package postgres

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// The cube (pipeline.StoredCube) is kept by the fold that keeps the
// tally, in the same transaction (schema step 8):
//
//	cube_cell   (cell, label, shard) -> items, rated items, exact scaled
//	            rating sum: counters spread over shards as the tally's
//	cube_key    (cell, label) -> a small id (schema step 12)
//	output      a done item's quote, key_id (its cell and label's id)
//	            and conf, in its row of outputs (schema step 16),
//	            indexed in report's quote order (output_quote)
//
// A quote per item, rather than a cell's best few as the bbolt store
// keeps, means a removal never leaves a cell short of quotes: the index
// finds the next best. It is in the item's row, so there is one per item
// by construction, written by the statement that appends the last
// stage's entry (appendOutputsSQL) and cleared by the one that cuts the
// row (changeOutputs): no statement of its own to order against them.
// Its rating is not stored: it is the fact's, read from the last stage's
// entry of the same row (8 bytes per done item saved). A read takes a
// few hundred cells and the best quotes of each through that index,
// however many items there are.

// confStage is the stage whose output's confidence a quote carries, as
// report reads it.
const confStage = "classify"

// confidenceOf reads the confidence of a classify output exactly as
// report's streaming pass does: 0 when there is none, or it is no number.
func confidenceOf(raw []byte) float64 {
	var out struct {
		Confidence float64 `json:"confidence"`
	}
	_ = json.Unmarshal(storedJSON(raw), &out)
	return out.Confidence
}

// cubeCellKey length-prefixes the group fields (sorted) and values:
// bytea, as values may hold any byte.
func cubeCellKey(groups map[string]string) []byte {
	fields := slices.Sorted(maps.Keys(groups))
	k := binary.AppendUvarint(nil, uint64(len(fields)))
	for _, f := range fields {
		for _, s := range []string{f, groups[f]} {
			k = binary.AppendUvarint(k, uint64(len(s)))
			k = append(k, s...)
		}
	}
	return k
}

func parseCubeCellKey(k []byte) (map[string]string, bool) {
	n, w := binary.Uvarint(k)
	if w <= 0 || n > uint64(len(k)) {
		return nil, false
	}
	k = k[w:]
	groups := make(map[string]string, n)
	for range n {
		var parts [2]string
		for i := range parts {
			l, w := binary.Uvarint(k)
			if w <= 0 || uint64(len(k)-w) < l {
				return nil, false
			}
			parts[i], k = string(k[w:w+int(l)]), k[w+int(l):]
		}
		groups[parts[0]] = parts[1]
	}
	return groups, len(k) == 0
}

type cubeKey struct{ cell, label string }

type cubeCellDelta struct {
	n      int64
	rating ratingDelta
}

type cubeQuoteRow struct {
	key  cubeKey
	conf float64
	// rating is the fact's, kept only for queueLegacyQuotes: the quote
	// in a row of outputs derives it.
	rating *float64
}

// cubeDelta is what one transaction adds to or removes from the cube,
// merged like tallyDelta: the cells' counters, and the quotes of the
// items it folds in, which the statements writing their rows of outputs
// carry (quoteArgs). A fold-out needs no statement of its own: the
// statement that cuts the item's row clears its quote (changeOutputs).
type cubeDelta struct {
	cells map[cubeKey]*cubeCellDelta
	add   map[string]cubeQuoteRow
}

// fold adds (n = 1) or removes (n = -1) one item; conf is its classify
// confidence (unused on removal).
func (d *cubeDelta) fold(id string, f pipeline.Fact, conf float64, n int64) {
	if d.add == nil {
		d.add = map[string]cubeQuoteRow{}
	}
	k := d.foldCell(f, n)
	if n < 0 {
		// An item folded out and back in by one transaction ends with
		// its new quote.
		delete(d.add, id)
		return
	}
	d.add[id] = cubeQuoteRow{key: k, conf: conf, rating: f.Rating}
}

// foldCell adds (n = 1) or removes (n = -1) fact f in its cell's
// counters alone, and returns the cell's key: Check folds every done
// item so, without keeping a quote per item.
func (d *cubeDelta) foldCell(f pipeline.Fact, n int64) cubeKey {
	if d.cells == nil {
		d.cells = map[cubeKey]*cubeCellDelta{}
	}
	k := cubeKey{string(cubeCellKey(f.Groups)), f.Label}
	c := d.cells[k]
	if c == nil {
		c = &cubeCellDelta{}
		d.cells[k] = c
	}
	c.n += n
	if scaled, ok := f.ScaledRating(); ok {
		c.rating.sum.Add(&c.rating.sum, scaled.Mul(scaled, big.NewInt(n)))
		c.rating.n += n
	}
	return k
}

// queue adds the statement applying d's cells to b, at one shard; cells
// in sorted key order, as the tally's counters.
func (d *cubeDelta) queue(b *pgx.Batch, shard int16) {
	keys := slices.SortedFunc(maps.Keys(d.cells), func(a, b cubeKey) int {
		return cmp.Or(strings.Compare(a.cell, b.cell), strings.Compare(a.label, b.label))
	})
	var cells [][]byte
	var labels, sums []string
	var ns, rns []int64
	for _, k := range keys {
		c := d.cells[k]
		if c.n == 0 && c.rating.n == 0 && c.rating.sum.Sign() == 0 {
			continue
		}
		cells, labels = append(cells, []byte(k.cell)), append(labels, k.label)
		ns, rns, sums = append(ns, c.n), append(rns, c.rating.n), append(sums, c.rating.sum.String())
	}
	if len(cells) > 0 {
		b.Queue(`INSERT INTO cube_cell (cell, label, shard, n, rn, rsum)
			SELECT c, l, $3, n, rn, s::numeric FROM unnest($1::bytea[], $2::text[], $4::bigint[], $5::bigint[], $6::text[]) AS u(c, l, n, rn, s)
			ON CONFLICT (cell, label, shard) DO UPDATE SET n = cube_cell.n + EXCLUDED.n,
				rn = cube_cell.rn + EXCLUDED.rn, rsum = cube_cell.rsum + EXCLUDED.rsum`,
			cells, labels, shard, ns, rns, sums)
	}
}

// queueKeys adds to b the insert of the cube_key rows d's quotes name
// that are not there yet. It must come before the statement that writes
// the quotes, which looks their keys up (a quote whose key is missing
// fails output's CHECK rather than being lost).
func (d *cubeDelta) queueKeys(b *pgx.Batch) {
	if len(d.add) == 0 {
		return
	}
	var qcells [][]byte
	var qlabels []string
	for _, q := range d.add {
		qcells, qlabels = append(qcells, []byte(q.key.cell)), append(qlabels, q.key.label)
	}
	// Only keys not there yet take an id: ON CONFLICT alone would draw
	// one from the sequence for every row it skips. Two commits adding
	// one key race to the unique index, the second waits and skips it.
	b.Queue(`INSERT INTO cube_key (cell, label)
		SELECT DISTINCT c, l FROM unnest($1::bytea[], $2::text[]) AS u(c, l)
		WHERE NOT EXISTS (SELECT 1 FROM cube_key k WHERE k.cell = u.c AND k.label = u.l)
		ORDER BY 1, 2 ON CONFLICT DO NOTHING`, qcells, qlabels)
}

// quoteArgs gives the quote d folds for each of ids, aligned with them,
// as the arrays appendOutputsSQL and the restore's insert take: nil
// elements (NULL) where an id folds none.
func (d *cubeDelta) quoteArgs(ids []string) (cells [][]byte, labels []*string, confs []*float64) {
	cells, labels, confs = make([][]byte, len(ids)), make([]*string, len(ids)), make([]*float64, len(ids))
	for i, id := range ids {
		if q, ok := d.add[id]; ok {
			cells[i], labels[i], confs[i] = []byte(q.key.cell), &q.key.label, &q.conf
		}
	}
	return cells, labels, confs
}

// queueLegacyQuotes adds to b the insert of d's quotes into the
// cube_quote table of schema steps 12 to 15. It is only for
// backfillCube, which runs at step 12, before step 16 moves that
// table's quotes into output: the columns it would write otherwise are
// not there yet, or are stale ones step 16 discards.
func (d *cubeDelta) queueLegacyQuotes(b *pgx.Batch) {
	if len(d.add) == 0 {
		return
	}
	ids := slices.Sorted(maps.Keys(d.add))
	qcells, qlabels := make([][]byte, len(ids)), make([]string, len(ids))
	confs, ratings := make([]float64, len(ids)), make([]*float64, len(ids))
	for i, id := range ids {
		q := d.add[id]
		qcells[i], qlabels[i], confs[i], ratings[i] = []byte(q.key.cell), q.key.label, q.conf, q.rating
	}
	b.Queue(`INSERT INTO cube_quote (item_id, key_id, conf, rating)
		SELECT u.id, k.id, u.conf, u.rating FROM unnest($1::text[], $2::bytea[], $3::text[], $4::float8[], $5::float8[]) AS u(id, c, l, conf, rating)
		JOIN cube_key k ON k.cell = u.c AND k.label = u.l`,
		ids, qcells, qlabels, confs, ratings)
}

// confidences reads the stored classify confidence of items ids, those
// of foldIDs; an item without one is left out (confidence 0).
func (db *DB) confidences(ctx context.Context, q queryer, ids []string) (map[string]float64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, _ := q.Query(ctx, confidencesSQL, ids)
	return collectConfidences(rows, db.index[confStage])
}

// collectConfidences reads the classify confidences (stage ci) from rows
// of (item_id, row of outputs).
func collectConfidences(rows pgx.Rows, ci int) (map[string]float64, error) {
	out := map[string]float64{}
	var id string
	var row []byte
	_, err := pgx.ForEachRow(rows, []any{&id, &row}, func() error {
		raw, err := outputAt(row, ci)
		if err != nil {
			return damagedRow(id, err)
		}
		if raw != nil {
			out[id] = confidenceOf(raw)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read classify confidences: %w", err)
	}
	return out, nil
}

var _ pipeline.CubeReader = (*DB)(nil)

// StoredCube reads the cube in one snapshot, with the tally and the
// item counts of that state (workers may be folding items meanwhile):
// each cell's counters summed over the shards, and its best quotes with
// their items' text. ok is false only when a cell has fewer quotes than
// it must show, which a fold never leaves (the report then streams).
func (db *DB) StoredCube() (pipeline.StoredCube, bool, error) {
	var out pipeline.StoredCube
	ok := false
	err := db.snapshot(db.ctx, func(tx pgx.Tx) error {
		out, ok = pipeline.StoredCube{}, false
		t, err := readTally(db.ctx, tx)
		if err != nil {
			return err
		}
		out.Tally = &t
		counts, err := db.readCounts(tx)
		if err != nil {
			return fmt.Errorf("count the items: %w", err)
		}
		out.Counts = &counts
		cells, err := readCubeCells(db.ctx, tx)
		if err != nil {
			return err
		}
		if err := db.readCubeQuotes(db.ctx, tx, cells, len(db.stages)-1); err != nil {
			return err
		}
		for _, k := range slices.SortedFunc(maps.Keys(cells), func(a, b cubeKey) int {
			return cmp.Or(strings.Compare(a.cell, b.cell), strings.Compare(a.label, b.label))
		}) {
			c := cells[k]
			if int64(len(c.Quotes)) < min(c.Count, pipeline.CubeQuotes) {
				return nil
			}
			out.Cells = append(out.Cells, *c)
		}
		ok = true
		return nil
	})
	if err != nil {
		return pipeline.StoredCube{}, false, fmt.Errorf("read the aggregate cube of %s: %w", db.path, err)
	}
	if !ok {
		return pipeline.StoredCube{}, false, nil
	}
	return out, true, nil
}

func readCubeCells(ctx context.Context, tx pgx.Tx) (map[cubeKey]*pipeline.StoredCell, error) {
	cells := map[cubeKey]*pipeline.StoredCell{}
	rows, _ := tx.Query(ctx, `SELECT cell, label, sum(n)::bigint, sum(rn)::bigint, sum(rsum)::text
		FROM cube_cell GROUP BY cell, label HAVING sum(n) <> 0 OR sum(rn) <> 0 OR sum(rsum) <> 0`)
	var cell []byte
	var label, sum string
	var n, rn int64
	_, err := pgx.ForEachRow(rows, []any{&cell, &label, &n, &rn, &sum}, func() error {
		groups, ok := parseCubeCellKey(cell)
		s, okSum := new(big.Int).SetString(sum, 10)
		if !ok || !okSum || n <= 0 {
			return pipeline.Damaged("", "", nil, "cube cell %x of %q is damaged", cell, label)
		}
		cells[cubeKey{string(cell), label}] = &pipeline.StoredCell{
			Groups: groups, Label: label, Count: n, Rating: pipeline.RatingSum{Scaled: s, Count: rn},
		}
		return nil
	})
	return cells, err
}

// readCubeQuotesSQL reads the best $1 quotes of every cell with items,
// with the row of outputs each quote is in and its item's record.
// x.key_id = k.id is strict, so the planner proves output_quote's
// predicate (key_id IS NOT NULL) and walks that index
// (TestDB_QuotesReadThroughTheirIndex).
const readCubeQuotesSQL = `SELECT c.cell, c.label, q.item_id, q.conf, q.data, i.record
		FROM (SELECT cell, label FROM cube_cell GROUP BY cell, label HAVING sum(n) <> 0) c
		JOIN cube_key k ON k.cell = c.cell AND k.label = c.label
		CROSS JOIN LATERAL (SELECT x.item_id, x.conf, x.data FROM output x WHERE x.key_id = k.id
			ORDER BY x.conf DESC, x.item_id COLLATE "C" LIMIT $1) q
		JOIN item i ON i.item_id = q.item_id`

// readCubeQuotes adds to each cell its best CubeQuotes quotes (most
// confident first, ties by id in byte order, as report's), each with
// its item's text and its fact's rating, read from the output of the
// last stage (last) in the quote's row.
func (db *DB) readCubeQuotes(ctx context.Context, tx pgx.Tx, cells map[cubeKey]*pipeline.StoredCell, last int) error {
	rows, _ := tx.Query(ctx, readCubeQuotesSQL, pipeline.CubeQuotes)
	var cell, row, record []byte
	var label string
	var q pipeline.CubeQuote
	_, err := pgx.ForEachRow(rows, []any{&cell, &label, &q.ID, &q.Confidence, &row, &record}, func() error {
		c := cells[cubeKey{string(cell), label}]
		if c == nil {
			return nil // a cell whose items were all folded out
		}
		data, err := outputAt(row, last)
		f, ok := factOf(data)
		if err != nil || !ok {
			// A quote of an item not done (damage Check reports, which
			// step 16 carries over) is no example: its cell has one quote
			// too few, so report streams that cube from the outputs
			// rather than fail the whole report on one item.
			return nil
		}
		q.Rating = f.Rating
		var rec pipeline.Record
		if err := db.readRecord(q.ID, record, &rec); err != nil {
			return recordDamage(q.ID, err, "bad record")
		}
		q.Text = rec.Text
		c.Quotes = append(c.Quotes, q)
		q = pipeline.CubeQuote{}
		return nil
	})
	if err != nil {
		return err
	}
	for _, c := range cells {
		slices.SortFunc(c.Quotes, func(a, b pipeline.CubeQuote) int {
			return cmp.Or(cmp.Compare(b.Confidence, a.Confidence), strings.Compare(a.ID, b.ID))
		})
	}
	return nil
}

// backfillPage is how many done items one step of backfillCube reads (a
// variable: tests page through a few items).
var backfillPage = 5000

// backfillCube builds the cube of a pipeline stored before schema step 8
// (at step 12, before step 15: it reads the rows by (item_id, stage))
// by folding every done item's fact, a page at a time, in the migrating
// transaction.
func (db *DB) backfillCube(ctx context.Context, tx pgx.Tx) error {
	stages, err := readDefinition(ctx, tx)
	if err != nil {
		return err
	}
	ci := slices.IndexFunc(stages, func(s pipeline.StageDef) bool { return s.Name == confStage })
	// The rows by (item, stage) of the schema it runs at, or a row per
	// item (outrow.go) when a pipeline's version alone was set back.
	framed, err := outputsFramed(ctx, tx)
	if err != nil {
		return err
	}
	query := `SELECT o.item_id, o.data, c.data FROM output o
			LEFT JOIN output c ON c.item_id = o.item_id AND c.stage = $4
			WHERE o.stage = $3 AND o.item_id `
	args := []any{len(stages) - 1, ci}
	if framed {
		query, args = `SELECT o.item_id, o.data, NULL::bytea FROM output o WHERE o.item_id `, nil
	}
	after, from := "", ">=" // from the least id, '' (see page)
	for {
		rows, _ := tx.Query(ctx, query+from+` $1
			AND NOT EXISTS (SELECT 1 FROM todo t WHERE t.item_id = o.item_id)
			AND NOT EXISTS (SELECT 1 FROM dead d WHERE d.item_id = o.item_id)
			ORDER BY o.item_id LIMIT $2`, append([]any{after, backfillPage}, args...)...)
		var d cubeDelta
		var id string
		var data, classify []byte
		read := 0
		_, err := pgx.ForEachRow(rows, []any{&id, &data, &classify}, func() error {
			read++
			after, from = id, ">"
			if framed {
				row := data
				if data, err = outputAt(row, len(stages)-1); err != nil {
					return damagedRow(id, err)
				}
				classify, _ = outputAt(row, ci)
			}
			if f, ok := factOf(data); ok {
				d.fold(id, f, confidenceOf(classify), 1)
			}
			classify = nil
			return nil
		})
		if err != nil {
			return fmt.Errorf("build the aggregate cube: %w", err)
		}
		b := &pgx.Batch{}
		d.queueKeys(b)
		d.queue(b, 0)
		d.queueLegacyQuotes(b)
		if b.Len() > 0 {
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return fmt.Errorf("build the aggregate cube: %w", err)
			}
		}
		if read < backfillPage {
			return nil
		}
	}
}
