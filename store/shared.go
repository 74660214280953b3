// This file keeps an output that is nothing but the item's text (what
// sanitizing a clean text gives: the text, its length, no changes) out
// of out/<stage>: such an output packs to the same bytes for every item
// (codec.go, textOnly), so the stage keeps one copy of those bytes, its
// shared record, and the item only a bit in its state record. A night of
// clean reviews then costs one byte per item at sanitize instead of an
// out/sanitize entry (its key, bbolt's element header and the record);
// the output reads back byte for byte as the stage gave it.

package store

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// sharedKey is the meta key of stage's shared record: the first
// text-only output the stage gave, set once and never changed, so every
// state bit that refers to it stays true.
func sharedKey(stage string) []byte { return []byte("shared/" + stage) }

// maxShared is how many stages can share: the state record's Shared bits.
const maxShared = 8

// sharedBit is stage si's bit in state.Shared, 0 for a stage past them.
func sharedBit(si int) uint8 {
	if si >= maxShared {
		return 0
	}
	return 1 << si
}

// below is the mask of the Shared bits of the stages before si.
func below(si int) uint8 {
	if si >= maxShared {
		return 0xff
	}
	return sharedBit(si) - 1
}

// putOutput stores item id's output at stage si: as a bit of its state
// (shared true, the caller sets it) when it is text-only and equals the
// stage's shared record (which the first such output becomes), else in
// out/<stage>. s is the item's state, whose hash must be of a kind the
// state record can carry Shared with.
func (w *writer) putOutput(si int, s state, id []byte, v []byte) (shared bool, err error) {
	stage := w.stageName(si)
	if w.db.format >= sharedFormat && sharedBit(si) != 0 && s.canShare() && textOnly(v) {
		meta := w.tx.Bucket(bucketMeta)
		cur := meta.Get(sharedKey(stage))
		if cur == nil {
			if err := meta.Put(sharedKey(stage), v); err != nil {
				return false, err
			}
			cur = v
		}
		if bytes.Equal(cur, v) {
			return true, nil
		}
	}
	if err := w.put(w.bucket(outBucket(stage)), id, v); err != nil {
		return false, fmt.Errorf("store output of %q at %s: %w", id, stage, err)
	}
	w.notePut(si, id)
	return false, nil
}

// sharedOutput is item id's output at stage si when its state says it
// is the stage's shared record, nil when it does not.
func (db *DB) sharedOutput(tx *bolt.Tx, si int, id []byte, text func() string) (json.RawMessage, error) {
	s, ok := decodeState(tx.Bucket(bucketState).Get(id))
	if !ok || s.Shared&sharedBit(si) == 0 {
		return nil, nil
	}
	stage := db.stages[si].Name
	v := tx.Bucket(bucketMeta).Get(sharedKey(stage))
	if v == nil {
		return nil, pipeline.Damaged(string(id), stage, nil, "its state refers to the shared output of %s, which is missing", stage)
	}
	out, err := db.decodeRecord(tx, v, packCtx{id: string(id), text: text})
	if err != nil {
		return nil, pipeline.Damaged("", stage, err, "meta/shared/%s is damaged", stage)
	}
	return out, nil
}

// unshare writes into out/<stage> each output of id that is its stage's
// shared record, as it reads with the item's old text, before the text
// changes to text: the output stays what the stage gave. It returns s
// without those bits; the caller stores it.
func (w *writer) unshare(id []byte, s state, old, text string) (state, error) {
	if old == text {
		// A shared output reads as the text, which stays: an edit of
		// the other fields keeps it shared.
		return s, nil
	}
	for si := 0; si < len(w.db.stages) && s.Shared != 0; si++ {
		if s.Shared&sharedBit(si) == 0 {
			continue
		}
		raw, err := w.db.sharedOutput(w.tx, si, id, func() string { return old })
		if err != nil {
			return s, err
		}
		if raw == nil {
			// The stored state no longer has the bit: s came from it, so
			// this cannot be; keep the output rather than lose it.
			return s, pipeline.Damaged(string(id), "", nil, "state changed under an edit")
		}
		v, err := w.db.encodeRecord(w.tx, raw, packCtx{id: string(id), text: func() string { return text }})
		if err != nil {
			return s, err
		}
		if err := w.put(w.bucket(outBucket(w.stageName(si))), id, v); err != nil {
			return s, err
		}
		s.Shared &^= sharedBit(si)
	}
	return s, nil
}

// remapShared renumbers Shared bits from a stored stage list to the
// grown one (insertStages): bit i moves to newIndex[i].
func remapShared(sh uint8, newIndex []int) uint8 {
	var out uint8
	for i, ni := range newIndex {
		if sh&sharedBit(i) != 0 {
			out |= sharedBit(ni)
		}
	}
	return out
}

// mayShare reports whether any item may have its output at stage si
// shared: the stage has a shared record.
func (db *DB) mayShare(tx *bolt.Tx, si int) bool {
	return sharedBit(si) != 0 && tx.Bucket(bucketMeta).Get(sharedKey(db.stages[si].Name)) != nil
}
