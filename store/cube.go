package store

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"maps"
	"math"
	"math/big"
	"slices"
	"strings"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// The cube (pipeline.StoredCube) lives in the agg bucket beside the
// tally, under its own prefix, so foldAgg keeps both exact in the one
// commit that folds an item, and a report reads a few hundred cells
// instead of every item. Quote texts are not copied: a read takes them
// from the quoted items' records.
var (
	cubeState  = []byte("C")     // cubeValid once built; absent: never built
	cubePrefix = []byte("c\x00") // + fields, values, label -> cubeCell
)

const (
	cubeValid byte = 1
	// cubeKeep is how many quotes a cell keeps: more than it must show,
	// so removing quoted items (edits, prunes) rarely leaves a cell short
	// before more confident items refill it. A short cell stays exact in
	// its counts; a read refuses the cube while any cell is short, and
	// the next writable Open rebuilds it.
	cubeKeep = 2 * pipeline.CubeQuotes
)

type cubeQuote struct {
	id     string
	conf   float64
	rating *float64
}

// cubeQuoteBefore is report's quote order: most confident first, ties by id.
func cubeQuoteBefore(a, b cubeQuote) int {
	return cmp.Or(cmp.Compare(b.conf, a.conf), strings.Compare(a.id, b.id))
}

// cubeCell is one (group values, label) cell. Its quotes are always the
// exact best len(quotes) of its items: an item is inserted only when it
// ranks above the last kept one or every item is kept, so a removal
// shortens the list and never leaves a gap.
type cubeCell struct {
	count  int64
	rating pipeline.RatingSum
	quotes []cubeQuote
}

// fold adds (d = 1) or removes (d = -1) one item; scaled is its rating
// in units of 1/RatingScale, nil without one.
func (c *cubeCell) fold(q cubeQuote, scaled *big.Int, d int64) {
	before := c.count
	c.count += d
	if scaled != nil {
		c.rating = c.rating.Add(new(big.Int).Mul(scaled, big.NewInt(d)), d)
	}
	if d < 0 {
		c.quotes = slices.DeleteFunc(c.quotes, func(x cubeQuote) bool { return x.id == q.id })
		return
	}
	i, _ := slices.BinarySearchFunc(c.quotes, q, cubeQuoteBefore)
	if i < len(c.quotes) || int64(len(c.quotes)) == before {
		c.quotes = slices.Insert(c.quotes, i, q)
		if len(c.quotes) > cubeKeep {
			c.quotes = c.quotes[:cubeKeep]
		}
	}
}

// short says whether the cell keeps fewer quotes than a report shows.
func (c *cubeCell) short() bool {
	return int64(len(c.quotes)) < min(c.count, pipeline.CubeQuotes)
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// cutStr reads what appendStr wrote.
func cutStr(b []byte) (string, []byte, bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return "", nil, false
	}
	return string(b[w : w+int(n)]), b[w+int(n):], true
}

// cubeKey length-prefixes the fields (sorted) and values, as groupKey
// does: input values may hold any byte.
func cubeKey(groups map[string]string, label string) []byte {
	k := bytes.Clone(cubePrefix)
	fields := slices.Sorted(maps.Keys(groups))
	k = binary.AppendUvarint(k, uint64(len(fields)))
	for _, f := range fields {
		k = appendStr(appendStr(k, f), groups[f])
	}
	return append(k, label...)
}

func parseCubeKey(k []byte) (groups map[string]string, label string, ok bool) {
	k = k[len(cubePrefix):]
	n, w := binary.Uvarint(k)
	if w <= 0 || n > uint64(len(k)) {
		return nil, "", false
	}
	k = k[w:]
	groups = make(map[string]string, n)
	for range n {
		var f, v string
		if f, k, ok = cutStr(k); !ok {
			return nil, "", false
		}
		if v, k, ok = cutStr(k); !ok {
			return nil, "", false
		}
		groups[f] = v
	}
	return groups, string(k), true
}

// encodeCell is the count, the rating (as encodeRating, length-prefixed)
// and the quotes (confidence bits, id, a rating flag and its bits).
func encodeCell(c *cubeCell) []byte {
	v := binary.BigEndian.AppendUint64(nil, uint64(c.count))
	r := encodeRating(c.rating)
	v = binary.AppendUvarint(v, uint64(len(r)))
	v = append(v, r...)
	v = binary.AppendUvarint(v, uint64(len(c.quotes)))
	for _, q := range c.quotes {
		v = binary.BigEndian.AppendUint64(v, math.Float64bits(q.conf))
		v = appendStr(v, q.id)
		if q.rating == nil {
			v = append(v, 0)
			continue
		}
		v = append(v, 1)
		v = binary.BigEndian.AppendUint64(v, math.Float64bits(*q.rating))
	}
	return v
}

func decodeCell(v []byte) (*cubeCell, bool) {
	if len(v) < 8 {
		return nil, false
	}
	c := &cubeCell{count: int64(binary.BigEndian.Uint64(v))}
	v = v[8:]
	n, w := binary.Uvarint(v)
	if w <= 0 || uint64(len(v)-w) < n {
		return nil, false
	}
	var ok bool
	if c.rating, ok = decodeRating(v[w : w+int(n)]); !ok {
		return nil, false
	}
	v = v[w+int(n):]
	nq, w := binary.Uvarint(v)
	if w <= 0 || nq > cubeKeep {
		return nil, false
	}
	v = v[w:]
	for range nq {
		if len(v) < 8 {
			return nil, false
		}
		q := cubeQuote{conf: math.Float64frombits(binary.BigEndian.Uint64(v))}
		if q.id, v, ok = cutStr(v[8:]); !ok || len(v) < 1 {
			return nil, false
		}
		flag := v[0]
		v = v[1:]
		switch {
		case flag == 1 && len(v) >= 8:
			r := math.Float64frombits(binary.BigEndian.Uint64(v))
			q.rating, v = &r, v[8:]
		case flag != 0:
			return nil, false
		}
		c.quotes = append(c.quotes, q)
	}
	return c, len(v) == 0
}

// cubeConfidence is the confidence of item id's classify output, read as
// report reads it: 0 when it has none. dec decodes the stored records.
func cubeConfidence(tx *bolt.Tx, dec *DB, id []byte) (float64, error) {
	b := tx.Bucket(outBucket(cubeStage))
	if b == nil {
		return 0, nil
	}
	v := b.Get(id)
	if v == nil {
		return 0, nil
	}
	if conf, ok := dec.confs.take(id, v); ok {
		return conf, nil
	}
	raw, err := dec.decodeOutput(tx, cubeStage, id, v, dec.textOf(tx, id), nil)
	if err != nil {
		return 0, pipeline.Damaged(string(id), cubeStage, err, "out/classify is damaged")
	}
	return confidenceOf(raw), nil
}

// cubeFoldHook, when set (tests only), runs after each item folded into
// the cube, before the transaction that folds it ends.
var cubeFoldHook func()

// foldCube folds one item's fact into the cube, in foldAgg's transaction.
// A database whose cube was never built folds nothing: Open builds it
// from the items. dec decodes the item's classify output: the writer's
// database, whose dictionary already holds the entries records refer to;
// nil makes one with an empty dictionary (every entry then read from the
// dict bucket: what a night's fold paid for each item).
func foldCube(b *bolt.Bucket, dec *DB, id string, f pipeline.Fact, d int64) error {
	if b.Get(cubeState) == nil {
		return nil
	}
	k := cubeKey(f.Groups, f.Label)
	c := &cubeCell{}
	if v := b.Get(k); v != nil {
		var ok bool
		if c, ok = decodeCell(v); !ok {
			return pipeline.Damaged("", "", nil, "aggregate cube entry %q is damaged", k)
		}
	}
	q := cubeQuote{id: id, rating: f.Rating}
	if d > 0 {
		if dec == nil {
			// Records decode from the transaction, whose dict bucket
			// holds every entry they refer to.
			dec = &DB{dict: newDict()}
		}
		var err error
		if q.conf, err = cubeConfidence(b.Tx(), dec, []byte(id)); err != nil {
			return err
		}
	}
	scaled, _ := f.ScaledRating()
	c.fold(q, scaled, d)
	if c.count == 0 {
		if err := b.Delete(k); err != nil {
			return err
		}
	} else if err := b.Put(k, encodeCell(c)); err != nil {
		return err
	}
	if cubeFoldHook != nil {
		cubeFoldHook()
	}
	return nil
}

// ensureCube builds the cube of a database that has none (written before
// the cube was kept) or one with a cell short of quotes, from its done
// items in one transaction; from then on every fold keeps it.
func (db *DB) ensureCube() error {
	valid := false
	if err := db.view(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketAgg); b != nil {
			var err error
			valid, err = cubeComplete(b)
			return err
		}
		return nil
	}); err != nil || valid {
		return err
	}
	var recountErr error
	err := db.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAgg)
		if b == nil {
			return nil
		}
		if err := dropCubeKeys(b); err != nil {
			return err
		}
		cells, err := db.recountCube(tx)
		if err != nil {
			recountErr = err
			return err
		}
		for _, k := range slices.Sorted(maps.Keys(cells)) {
			if err := b.Put([]byte(k), encodeCell(cells[k])); err != nil {
				return err
			}
		}
		return b.Put(cubeState, []byte{cubeValid})
	})
	if err == nil || recountErr == nil {
		return err
	}
	// An item that cannot be read (a damaged output) must not keep the
	// commands that repair it (prune, rerun, run) from opening: the cube
	// is only derived. It is left unbuilt, so folds skip it and reports
	// stream the items, naming the damage as they did before the cube;
	// `sawtooth verify` names it too, and the next writable open after
	// the repair builds the cube.
	return db.update(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketAgg); b != nil {
			return dropCubeKeys(b)
		}
		return nil
	})
}

// dropCubeKeys deletes every cube key, its state included: a cube never built.
func dropCubeKeys(b *bolt.Bucket) error {
	if err := b.Delete(cubeState); err != nil {
		return err
	}
	cur := b.Cursor()
	for k, _ := cur.Seek(cubePrefix); k != nil && bytes.HasPrefix(k, cubePrefix); k, _ = cur.Seek(cubePrefix) {
		if err := cur.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// cubeComplete says whether the cube is built and no cell is short of
// quotes.
func cubeComplete(b *bolt.Bucket) (bool, error) {
	if st := b.Get(cubeState); len(st) != 1 || st[0] != cubeValid {
		return false, nil
	}
	cur := b.Cursor()
	for k, v := cur.Seek(cubePrefix); k != nil && bytes.HasPrefix(k, cubePrefix); k, v = cur.Next() {
		c, ok := decodeCell(v)
		if !ok {
			return false, pipeline.Damaged("", "", nil, "aggregate cube entry %q is damaged", k)
		}
		if c.short() {
			return false, nil
		}
	}
	return true, nil
}

// recountCube folds every done item's fact (its last stage's output, as
// fold reads it) into cells keyed as in the bucket.
func (db *DB) recountCube(tx *bolt.Tx) (map[string]*cubeCell, error) {
	cells := map[string]*cubeCell{}
	last := db.stages[len(db.stages)-1].Name
	w := &walker{db: db, tx: tx} // reads every done item: release the pages behind
	defer w.release()
	err := tx.Bucket(bucketState).ForEach(func(k, v []byte) error {
		w.step()
		s, ok := decodeState(v)
		if !ok || s.Status != pipeline.StatusDone {
			return nil
		}
		raw, err := db.output(tx, last, k, db.textOf(tx, k))
		if err != nil || raw == nil {
			return err
		}
		var f pipeline.Fact
		if err := json.Unmarshal(raw, &f); err != nil || f.Label == "" {
			return nil // the last stage does not produce facts
		}
		q := cubeQuote{id: string(k), rating: f.Rating}
		if q.conf, err = cubeConfidence(tx, db, k); err != nil {
			return err
		}
		key := string(cubeKey(f.Groups, f.Label))
		c := cells[key]
		if c == nil {
			c = &cubeCell{}
			cells[key] = c
		}
		scaled, _ := f.ScaledRating()
		c.fold(q, scaled, 1)
		if cubeFoldHook != nil {
			cubeFoldHook()
		}
		return nil
	})
	return cells, err
}

var _ pipeline.CubeReader = (*DB)(nil)

// StoredCube reads the cube, with the text of each quoted item.
func (db *DB) StoredCube() (pipeline.StoredCube, bool, error) {
	var out pipeline.StoredCube
	ok := false
	err := db.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAgg)
		if b == nil {
			return nil
		}
		if st := b.Get(cubeState); len(st) != 1 || st[0] != cubeValid {
			return nil
		}
		cur := b.Cursor()
		for k, v := cur.Seek(cubePrefix); k != nil && bytes.HasPrefix(k, cubePrefix); k, v = cur.Next() {
			groups, label, okKey := parseCubeKey(k)
			c, okCell := decodeCell(v)
			if !okKey || !okCell {
				return pipeline.Damaged("", "", nil, "aggregate cube entry %q is damaged", k)
			}
			if c.short() {
				return nil
			}
			sc := pipeline.StoredCell{Groups: groups, Label: label, Count: c.count, Rating: c.rating}
			for _, q := range c.quotes[:min(len(c.quotes), pipeline.CubeQuotes)] {
				r, _, err := db.record(tx, []byte(q.id))
				if err != nil {
					return err
				}
				sc.Quotes = append(sc.Quotes, pipeline.CubeQuote{ID: q.id, Confidence: q.conf, Rating: q.rating, Text: r.Text})
			}
			out.Cells = append(out.Cells, sc)
		}
		ok = true
		return nil
	})
	if err != nil || !ok {
		return pipeline.StoredCube{}, false, err
	}
	return out, true, nil
}
