package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/big"
	"slices"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// The agg bucket holds the tally as one small counter per key, so folding
// an item in costs a handful of tiny reads and writes however many groups
// the tally has (a single JSON tally re-encoded per commit cost
// milliseconds once it held thousands of app×month cells).
var (
	aggItems  = []byte("n")
	aggLabel  = []byte("l\x00") // + label -> int64
	aggGroup  = []byte("g\x00") // + len field, field, len value, value, label -> int64
	aggRating = []byte("R\x00") // + label -> int64 count, exact scaled sum (see encodeRating)
	// aggRatingFloat is the first layout's rating sum (float64 sum, int64
	// count), inexact: read, and replaced by aggRating on the next fold.
	aggRatingFloat = []byte("r\x00")
	aggExamples    = []byte("e\x00") // + label -> JSON []string
)

func aggKey(prefix []byte, label string) []byte {
	return append(bytes.Clone(prefix), label...)
}

// groupKey length-prefixes field and value: input values may hold any
// byte, NUL included.
func groupKey(field, value, label string) []byte {
	k := bytes.Clone(aggGroup)
	k = binary.AppendUvarint(k, uint64(len(field)))
	k = append(k, field...)
	k = binary.AppendUvarint(k, uint64(len(value)))
	k = append(k, value...)
	return append(k, label...)
}

func parseGroupKey(k []byte) (field, value, label string, ok bool) {
	k = k[len(aggGroup):]
	var parts [2]string
	for i := range parts {
		n, w := binary.Uvarint(k)
		if w <= 0 || uint64(len(k)-w) < n {
			return "", "", "", false
		}
		parts[i], k = string(k[w:w+int(n)]), k[w+int(n):]
	}
	return parts[0], parts[1], string(k), true
}

// addCount adds d to the int64 at key, deleting it when it reaches zero.
func addCount(b *bolt.Bucket, key []byte, d int64) error {
	var n int64
	if v := b.Get(key); len(v) == 8 {
		n = int64(binary.BigEndian.Uint64(v))
	}
	n += d
	if n == 0 {
		return b.Delete(key)
	}
	return b.Put(key, binary.BigEndian.AppendUint64(nil, uint64(n)))
}

// foldAgg adds (sign > 0) or removes (sign < 0) one item's fact, with the
// same semantics as pipeline.Tally.Fold. dec decodes the item's stored
// records for the cube (nil: a decoder of its own, see foldCube).
func foldAgg(b *bolt.Bucket, dec *DB, id string, f pipeline.Fact, sign int) error {
	d := int64(1)
	if sign < 0 {
		d = -1
	}
	if err := addCount(b, aggItems, d); err != nil {
		return err
	}
	if err := foldCube(b, dec, id, f, d); err != nil {
		return err
	}
	if err := addCount(b, aggKey(aggLabel, f.Label), d); err != nil {
		return err
	}
	for field, value := range f.Groups {
		if err := addCount(b, groupKey(field, value, f.Label), d); err != nil {
			return err
		}
	}
	if scaled, ok := f.ScaledRating(); ok {
		k := aggKey(aggRating, f.Label)
		var cur pipeline.RatingSum
		if v := b.Get(k); v != nil {
			var ok bool
			if cur, ok = decodeRating(v); !ok {
				return pipeline.Damaged("", "", nil, "aggregate rating of %q is damaged", f.Label)
			}
		} else if v := b.Get(aggKey(aggRatingFloat, f.Label)); v != nil {
			cur, _ = decodeFloatRating(v)
			if err := b.Delete(aggKey(aggRatingFloat, f.Label)); err != nil {
				return err
			}
		}
		r := cur.Add(scaled.Mul(scaled, big.NewInt(d)), d)
		if r.Count == 0 {
			if err := b.Delete(k); err != nil {
				return err
			}
		} else if err := b.Put(k, encodeRating(r)); err != nil {
			return err
		}
	}
	k := aggKey(aggExamples, f.Label)
	var ex []string
	if v := b.Get(k); v != nil {
		if err := json.Unmarshal(v, &ex); err != nil {
			return pipeline.Damaged("", "", err, "aggregate examples of %q", f.Label)
		}
	}
	switch {
	case d > 0 && len(ex) < pipeline.MaxExamples && !slices.Contains(ex, id):
		ex = append(ex, id)
	case d < 0 && slices.Contains(ex, id):
		ex = slices.DeleteFunc(ex, func(s string) bool { return s == id })
	default:
		return nil
	}
	if len(ex) == 0 {
		return b.Delete(k)
	}
	v, err := json.Marshal(ex)
	if err != nil {
		return err
	}
	return b.Put(k, v)
}

// encodeRating is the count (8 bytes, big-endian), a sign byte (1 for
// negative) and the magnitude of the scaled sum (big-endian, any length):
// exact at any size, so two ratings of 1e308 add up to 2e308, not +Inf.
func encodeRating(r pipeline.RatingSum) []byte {
	v := binary.BigEndian.AppendUint64(nil, uint64(r.Count))
	sign := byte(0)
	if r.Scaled != nil && r.Scaled.Sign() < 0 {
		sign = 1
	}
	v = append(v, sign)
	if r.Scaled != nil {
		v = append(v, r.Scaled.Bytes()...)
	}
	return v
}

func decodeRating(v []byte) (pipeline.RatingSum, bool) {
	if len(v) < 9 || v[8] > 1 {
		return pipeline.RatingSum{}, false
	}
	n := new(big.Int).SetBytes(v[9:])
	if v[8] == 1 {
		n.Neg(n)
	}
	return pipeline.RatingSum{Count: int64(binary.BigEndian.Uint64(v)), Scaled: n}, true
}

func decodeFloatRating(v []byte) (pipeline.RatingSum, bool) {
	if len(v) != 16 {
		return pipeline.RatingSum{}, false
	}
	scaled, ok := pipeline.ScaledRating(math.Float64frombits(binary.BigEndian.Uint64(v[:8])))
	if !ok {
		scaled = new(big.Int) // a sum that overflowed: verify reports it
	}
	return pipeline.RatingSum{Scaled: scaled, Count: int64(binary.BigEndian.Uint64(v[8:]))}, true
}

// readAgg assembles the tally from its counters.
func readAgg(b *bolt.Bucket) (pipeline.Tally, error) {
	t := pipeline.Tally{
		Labels: map[string]int64{}, Groups: map[string]map[string]map[string]int64{},
		Ratings: map[string]pipeline.RatingSum{}, Examples: map[string][]string{},
	}
	err := b.ForEach(func(k, v []byte) error {
		bad := pipeline.Damaged("", "", nil, "aggregate entry %q is damaged", k)
		switch {
		case bytes.Equal(k, aggItems):
			if len(v) != 8 {
				return bad
			}
			t.Items = int64(binary.BigEndian.Uint64(v))
		case bytes.HasPrefix(k, aggLabel):
			if len(v) != 8 {
				return bad
			}
			t.Labels[string(k[len(aggLabel):])] = int64(binary.BigEndian.Uint64(v))
		case bytes.HasPrefix(k, aggGroup):
			field, value, label, ok := parseGroupKey(k)
			if !ok || len(v) != 8 {
				return bad
			}
			if t.Groups[field] == nil {
				t.Groups[field] = map[string]map[string]int64{}
			}
			if t.Groups[field][value] == nil {
				t.Groups[field][value] = map[string]int64{}
			}
			t.Groups[field][value][label] = int64(binary.BigEndian.Uint64(v))
		case bytes.HasPrefix(k, aggRating):
			r, ok := decodeRating(v)
			if !ok {
				return bad
			}
			t.Ratings[string(k[len(aggRating):])] = r
		case bytes.HasPrefix(k, aggRatingFloat):
			r, ok := decodeFloatRating(v)
			if !ok {
				return bad
			}
			t.Ratings[string(k[len(aggRatingFloat):])] = r
		case bytes.HasPrefix(k, aggExamples):
			var ex []string
			if err := json.Unmarshal(v, &ex); err != nil {
				return bad
			}
			t.Examples[string(k[len(aggExamples):])] = ex
		}
		return nil
	})
	return t, err
}
