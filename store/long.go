package store

import (
	"cmp"
	"encoding/binary"
	"errors"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// A long item record (format 5) is kept mostly out of the items bucket:
// its head cut in chunks of a quarter page under consecutive keys of the
// longs bucket, only the rest (under a quarter page) left in the item's
// value with a reference to them (tagLong). bbolt puts a value it cannot
// fit beside its neighbours at the head of a node of its own and rounds
// that node up to whole pages: the page before it closed early, the last
// of its pages part empty. After a 100,000-item run with 498 long reviews
// of prose (3 MB deflated), items held 17.9 MB in 20.0 MB of leaf pages.
// Chunks all of one size, appended in key order, fill their pages whole.
const (
	// longFormat is the first format whose items may be tagLong.
	longFormat = 5
	// minLong is the shortest stored record kept in chunks: a quarter
	// page, past which a record left in items wastes more of the page
	// before it than its reference and chunks' headers cost.
	minLong = 1024
	// longChunk is four chunks to a page: a page header (16 bytes) and
	// four elements of a 16-byte header, an 8-byte key and the chunk.
	longChunk = (4096-16)/4 - 16 - 8
)

var bucketLongs = []byte("longs")

var errLong = errors.New("a long record whose chunks are missing or damaged")

// putItem stores the record rec of item id, in chunks when it is long,
// and drops the chunks of the record it replaces.
func (w *writer) putItem(id, rec []byte) error {
	if err := w.dropLong(id, w.items.Get(id)); err != nil {
		return err
	}
	if w.db.format >= longFormat && len(rec) >= minLong {
		b, err := w.tx.CreateBucketIfNotExists(bucketLongs)
		if err != nil {
			return err
		}
		first, n := b.Sequence()+1, uint64(len(rec)/longChunk)
		for i := range n {
			if err := w.put(b, u64(first+i), rec[i*longChunk:(i+1)*longChunk]); err != nil {
				return err
			}
		}
		if err := b.SetSequence(first + n - 1); err != nil {
			return err
		}
		ref := binary.AppendUvarint([]byte{tagLong}, first)
		ref = binary.AppendUvarint(ref, n)
		rec = append(ref, rec[n*longChunk:]...)
	}
	return w.put(w.items, id, rec)
}

// deleteItem deletes item id's record and its chunks.
func (w *writer) deleteItem(id []byte) error {
	if err := w.dropLong(id, w.items.Get(id)); err != nil {
		return err
	}
	return w.items.Delete(id)
}

// dropLong deletes the chunks item id's value v refers to, if any. A
// reference that does not read as the item's record is left, its chunks
// to verify (orphans): chunks are consecutive, so a damaged count would
// name the next item's chunks, or keys past any chunk, as its own.
func (w *writer) dropLong(id, v []byte) error {
	if len(v) == 0 || v[0] != tagLong {
		return nil
	}
	first, n, _, ok := longRef(v)
	b := w.tx.Bucket(bucketLongs)
	if !ok || b == nil {
		return nil // nothing readable to drop: the record is replaced
	}
	if _, err := w.db.itemRecord(w.tx, id, v); err != nil {
		return nil
	}
	for i := range n {
		if err := b.Delete(u64(first + i)); err != nil {
			return err
		}
	}
	return nil
}

// longRecord is the stored record a tagLong value v refers to, put back
// together from its chunks and the rest v holds.
func longRecord(tx *bolt.Tx, v []byte) ([]byte, error) {
	first, n, rest, ok := longRef(v)
	b := tx.Bucket(bucketLongs)
	if !ok || b == nil {
		return nil, errLong
	}
	// Grown as chunks are read, not made at a length a damaged reference
	// could set past memory.
	out := make([]byte, 0, min(n, 256)*longChunk+uint64(len(rest)))
	c := b.Cursor()
	k, chunk := c.Seek(u64(first))
	for i := range n {
		if len(k) != 8 || binary.BigEndian.Uint64(k) != first+i || len(chunk) != longChunk {
			return nil, errLong
		}
		out = append(out, chunk...)
		k, chunk = c.Next()
	}
	out = append(out, rest...)
	if out[0] == tagLong {
		return nil, errLong
	}
	return out, nil
}

// longRef reads a tagLong value: its first chunk's key, how many chunks
// it has, and the record's bytes past them.
func longRef(v []byte) (first, n uint64, rest []byte, ok bool) {
	first, a := binary.Uvarint(v[1:])
	if a <= 0 {
		return 0, 0, nil, false
	}
	n, b := binary.Uvarint(v[1+a:])
	if b <= 0 || n == 0 {
		return 0, 0, nil, false
	}
	return first, n, v[1+a+b:], true
}

// checkLongs adds a problem for each chunk of longs no item refers to,
// each chunk past the bucket's sequence (the next long item stored would
// be given its key and overwrite it) and each item whose chunks overlap
// another's. (An item whose chunks are missing or damaged does not read:
// checkItem says so.)
func checkLongs(tx *bolt.Tx, w *walker, add func(string, ...any)) {
	longs := tx.Bucket(bucketLongs)
	if longs == nil {
		return
	}
	type span struct {
		id       string
		first, n uint64
	}
	var spans []span
	c := tx.Bucket(bucketItems).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		w.step()
		if len(v) > 0 && v[0] == tagLong {
			if first, n, _, ok := longRef(v); ok {
				spans = append(spans, span{string(k), first, n})
			}
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.first, b.first) })
	next, last := 0, longs.Sequence()
	lc := longs.Cursor()
	for k, _ := lc.First(); k != nil; k, _ = lc.Next() {
		w.step()
		seq := uint64(0)
		if len(k) == 8 {
			seq = binary.BigEndian.Uint64(k)
		}
		for next < len(spans) && spans[next].first+spans[next].n <= seq {
			next++
		}
		if len(k) != 8 || next == len(spans) || seq < spans[next].first {
			add("longs: chunk %x belongs to no item (an orphan entry)", k)
		}
		if seq > last {
			add("longs: chunk %d is past the bucket's sequence %d (a long item stored next would overwrite it)", seq, last)
		}
	}
	for i := 1; i < len(spans); i++ {
		if p := spans[i-1]; p.first+p.n > spans[i].first {
			add("item %q: its chunks in longs overlap those of item %q", spans[i].id, p.id)
		}
	}
}
