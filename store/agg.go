package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// The agg bucket holds the tally as one small counter per key, so folding
// an item in costs a handful of tiny reads and writes however many groups
// the tally has (a single JSON tally re-encoded per commit cost
// milliseconds once it held thousands of app×month cells).
var (
	aggItems    = []byte("n")
	aggLabel    = []byte("l\x00") // + label -> int64
	aggGroup    = []byte("g\x00") // + len field, field, len value, value, label -> int64
	aggRating   = []byte("r\x00") // + label -> float64 sum, int64 count
	aggExamples = []byte("e\x00") // + label -> JSON []string
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
// same semantics as pipeline.Tally.Fold.
func foldAgg(b *bolt.Bucket, id string, f pipeline.Fact, sign int) error {
	d := int64(1)
	if sign < 0 {
		d = -1
	}
	if err := addCount(b, aggItems, d); err != nil {
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
	if f.Rating != nil {
		k := aggKey(aggRating, f.Label)
		var sum float64
		var n int64
		if v := b.Get(k); len(v) == 16 {
			sum = math.Float64frombits(binary.BigEndian.Uint64(v[:8]))
			n = int64(binary.BigEndian.Uint64(v[8:]))
		}
		sum += float64(d) * *f.Rating
		n += d
		if n == 0 {
			if err := b.Delete(k); err != nil {
				return err
			}
		} else {
			v := binary.BigEndian.AppendUint64(nil, math.Float64bits(sum))
			if err := b.Put(k, binary.BigEndian.AppendUint64(v, uint64(n))); err != nil {
				return err
			}
		}
	}
	k := aggKey(aggExamples, f.Label)
	var ex []string
	if v := b.Get(k); v != nil {
		if err := json.Unmarshal(v, &ex); err != nil {
			return fmt.Errorf("aggregate examples of %q: %w (run `sawtooth verify`)", f.Label, err)
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

// readAgg assembles the tally from its counters.
func readAgg(b *bolt.Bucket) (pipeline.Tally, error) {
	t := pipeline.Tally{
		Labels: map[string]int64{}, Groups: map[string]map[string]map[string]int64{},
		Ratings: map[string]pipeline.RatingSum{}, Examples: map[string][]string{},
	}
	err := b.ForEach(func(k, v []byte) error {
		bad := fmt.Errorf("aggregate entry %q is damaged (run `sawtooth verify`)", k)
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
			if len(v) != 16 {
				return bad
			}
			t.Ratings[string(k[len(aggRating):])] = pipeline.RatingSum{
				Sum:   math.Float64frombits(binary.BigEndian.Uint64(v[:8])),
				Count: int64(binary.BigEndian.Uint64(v[8:])),
			}
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
