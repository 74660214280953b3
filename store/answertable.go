// This file reads a stage's cached answers whole, when they fit.

package store

import (
	"bytes"
	"encoding/binary"

	bolt "go.etcd.io/bbolt"
)

// A walk in id order reads its outputs' answers ahead in sorted chunks
// (ahead.go); each chunk's pass touches nearly every leaf page of the
// answers, because the answers are keyed by hash: at a million items, 16
// passes over 13,600 pages were a third of an export's time. When the
// answers fit in tableBytes, one forward pass over the bucket copies them
// all, and every output finds its answer in memory: the answers' pages
// are read once per walk, whatever the number of items.

// tableBytes bounds the memory of the whole tables a walk holds, every
// stage's together: their keys, answers and entries. A million reviews'
// 252,109 answers take 38 MB; past the bound the walk reads ahead in
// chunks (and a walk that finds a table too large has read that much
// for nothing, once). Tests make it small.
var tableBytes = 64 << 20

// tableEntrySize is the memory an entry takes beside its bytes.
const tableEntrySize = 24

// tableBlock is the size of the blocks a table keeps its bytes in: a
// slice grown by doubling would copy them and leave its old arrays to
// the collector, up to twice the table's memory at its last growth.
// Tests make it small.
var tableBlock = 1 << 20

// answerTable is every key and answer of a stage's answers bucket, in
// the bucket's key order: entry i's key is blocks[e.block][e.key:e.val]
// and its answer blocks[e.block][e.val:e.end], or none (a nested
// bucket) when e.end is noAnswer.
type answerTable struct {
	blocks [][]byte
	size   int // the keys' and answers' bytes
	limit  int // the bytes it may take
	ents   []tableEntry
	// from[p] is the first entry whose key is at or above the two bytes
	// of p (big-endian), from[1<<16] the number of entries: a reference
	// is searched for among the keys that begin as it does. Cache keys
	// are hashes, so a few per two bytes.
	from []int32
}

// tableEntry is where an entry's bytes lie, and head, the first eight
// bytes of its key: a lookup compares heads in the entries, not the keys
// in the blocks, each a cache miss somewhere in tens of MB (at a million
// items the search was a tenth of the walk's CPU).
type tableEntry struct {
	block, key, val, end int32
	head                 uint64
}

// keyHead is the first eight bytes of k as a big-endian number, zeros
// past its end: keys whose heads differ are in the order of their heads,
// and only keys with the same head need their bytes compared.
func keyHead(k []byte) uint64 {
	if len(k) >= 8 {
		return binary.BigEndian.Uint64(k)
	}
	var b [8]byte
	copy(b[:], k)
	return binary.BigEndian.Uint64(b[:])
}

// readTable reads every entry of answers in one forward pass, nil when
// they take more than what w's other tables leave of tableBytes. w (nil
// in tests) releases the pages the pass touches every aheadReleaseEvery
// entries.
func readTable(answers *bolt.Bucket, w *walker) *answerTable {
	t := &answerTable{from: make([]int32, 1<<16+1), limit: tableBytes}
	if w != nil {
		t.limit -= w.tables
	}
	next := 0 // the first two bytes no key has been found at or above yet
	c := answers.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(t.ents)%aheadReleaseEvery == aheadReleaseEvery-1 && w != nil {
			w.releaseIfResident()
		}
		for ; next < 1<<16 && bytes.Compare(twoBytes(next), k) <= 0; next++ {
			t.from[next] = int32(len(t.ents))
		}
		e, ok := t.add(k, v)
		if !ok {
			return nil
		}
		t.ents = append(t.ents, e)
	}
	for ; next <= 1<<16; next++ {
		t.from[next] = int32(len(t.ents))
	}
	if w != nil {
		w.tables += t.bytes()
	}
	return t
}

// bytes is the memory t counts against tableBytes.
func (t *answerTable) bytes() int { return t.size + tableEntrySize*cap(t.ents) }

// add copies key k and answer v into the blocks, false when the table
// would hold more than its limit (its blocks' unused ends, each less
// than an entry, are not counted).
func (t *answerTable) add(k, v []byte) (tableEntry, bool) {
	n := len(k) + len(v)
	if t.size+n+tableEntrySize*max(len(t.ents)+1, cap(t.ents)) > t.limit {
		return tableEntry{}, false
	}
	t.size += n
	last := len(t.blocks) - 1
	if last < 0 || len(t.blocks[last])+n > cap(t.blocks[last]) {
		// An entry larger than a block has its own.
		t.blocks = append(t.blocks, make([]byte, 0, max(tableBlock, n)))
		last++
	}
	b := t.blocks[last]
	e := tableEntry{block: int32(last), key: int32(len(b)), head: keyHead(k)}
	b = append(b, k...)
	e.val = int32(len(b))
	b = append(b, v...)
	e.end = int32(len(b))
	if v == nil {
		e.end = noAnswer
	}
	t.blocks[last] = b
	return e, true
}

// twoBytes is p as two big-endian bytes.
func twoBytes(p int) []byte { return []byte{byte(p >> 8), byte(p)} }

// answer is referredAnswer(answers, ref) for the bucket the table was
// read from: nil when there is none.
func (t *answerTable) answer(ref []byte) []byte {
	lo, hi := 0, len(t.ents)
	if len(ref) >= 2 {
		p := int(ref[0])<<8 | int(ref[1])
		lo, hi = int(t.from[p]), int(t.from[p+1])
	}
	// The first key at or above ref: every key before from[p] is below
	// ref's two bytes, and the key at from[p+1] above ref.
	h := keyHead(ref)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if e := t.ents[m]; e.head < h || e.head == h && bytes.Compare(t.key(m), ref) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(t.ents) {
		return nil
	}
	k := t.key(lo)
	if len(ref) != answerRefLen && len(ref) != shortRefLen {
		if !bytes.Equal(k, ref) {
			return nil
		}
	} else if !bytes.HasPrefix(k, ref) {
		return nil
	}
	e := t.ents[lo]
	if e.end == noAnswer {
		return nil
	}
	return t.blocks[e.block][e.val:e.end:e.end]
}

func (t *answerTable) key(i int) []byte {
	e := t.ents[i]
	return t.blocks[e.block][e.key:e.val]
}
