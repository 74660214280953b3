package store

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// This file reads and writes the three record kinds of format 2 (see
// codec.go): items, stage outputs and cached answers.

// encodeItem is the stored form of r.
func (db *DB) encodeItem(tx *bolt.Tx, r pipeline.Record) ([]byte, error) {
	raw, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode item %q: %w", r.ID, err)
	}
	return db.encodeRecord(tx, raw, packCtx{id: r.ID})
}

// record reads the stored record of id; ok is false when there is none.
func (db *DB) record(tx *bolt.Tx, id []byte) (r pipeline.Record, ok bool, err error) {
	v := tx.Bucket(bucketItems).Get(id)
	if v == nil {
		return r, false, nil
	}
	r, err = db.itemRecord(tx, id, v)
	return r, true, err
}

// recordJSON is the record item id stores as v, read through its JSON:
// any record of any format.
func (db *DB) recordJSON(tx *bolt.Tx, id, v []byte) (r pipeline.Record, err error) {
	raw, err := db.decodeRecord(tx, v, packCtx{id: string(id)})
	if err == nil {
		err = json.Unmarshal(raw, &r)
	}
	if err != nil {
		return r, pipeline.Damaged(string(id), "", err, "bad record")
	}
	return r, nil
}

// textOf returns the stored text of item id, read on first call ("" when
// it has none): what a packed output may refer to.
func (db *DB) textOf(tx *bolt.Tx, id []byte) func() string {
	var (
		text string
		read bool
	)
	return func() string {
		if !read {
			read = true
			if v := tx.Bucket(bucketItems).Get(id); v != nil {
				if t, err := db.itemText(tx, id, v); err == nil {
					text = t
				}
			}
		}
		return text
	}
}

// encodeOutput is the stored form of stage's output for item id: a
// reference to the cached answer when the output is that answer byte
// for byte, else the packed output.
func (db *DB) encodeOutput(tx *bolt.Tx, stage string, id []byte, out json.RawMessage, text func() string, cacheKey string) ([]byte, error) {
	if cacheKey != "" {
		k := answerKey(cacheKey)
		if b := tx.Bucket(answersBucket(stage)); b != nil {
			if v := db.answerGet(tx, b, k); v != nil {
				if o, err := db.answerOutput(tx, v); err == nil && bytes.Equal(o, out) {
					return append([]byte{tagAnswer}, db.answerRef(b, k)...), nil
				}
			}
		}
	}
	return db.encodeRecord(tx, out, packCtx{id: string(id), text: text})
}

// output reads the stored output of id at stage (its entry in
// out/<stage>, or the stage's shared record when its state says so), nil
// when there is none. text is the item's text, which a packed output may
// refer to.
func (db *DB) output(tx *bolt.Tx, stage string, id []byte, text func() string) (json.RawMessage, error) {
	return db.outputAhead(tx, stage, id, text, nil)
}

// outputAhead is output with the answers of a walk read ahead (ahead
// may be nil).
func (db *DB) outputAhead(tx *bolt.Tx, stage string, id []byte, text func() string, ahead *answersAhead) (json.RawMessage, error) {
	b := tx.Bucket(outBucket(stage))
	if b == nil {
		return nil, nil
	}
	v := b.Get(id)
	if v == nil {
		si, ok := db.index[stage]
		if !ok {
			return nil, nil
		}
		return db.sharedOutput(tx, si, id, text)
	}
	out, err := db.decodeOutput(tx, stage, id, v, text, ahead)
	if err != nil {
		return nil, pipeline.Damaged(string(id), stage, err, "out/%s is damaged", stage)
	}
	return out, nil
}

// decodeOutput is the output out/<stage> stores for id as v, nil when it
// reads as none; text is the item's text. The result never aliases v.
// ahead, when not nil, has read ahead the answer v may refer to.
func (db *DB) decodeOutput(tx *bolt.Tx, stage string, id, v []byte, text func() string, ahead *answersAhead) (json.RawMessage, error) {
	out, ok, err := db.appendOutput(tx, nil, stage, id, v, text, ahead)
	if err != nil || !ok {
		return nil, err
	}
	if out == nil {
		out = []byte{} // an empty raw record is an empty value, not none
	}
	return out, nil
}

// appendOutput appends the output out/<stage> stores for id as v to dst,
// as decodeOutput reads it; ok is false when it reads as none (an answer
// of format 1 without an output). ahead, when not nil, has read ahead
// the answer v may refer to.
func (db *DB) appendOutput(tx *bolt.Tx, dst []byte, stage string, id, v []byte, text func() string, ahead *answersAhead) (out []byte, ok bool, err error) {
	if len(v) == 0 || v[0] != tagAnswer {
		out, err = db.appendRecord(tx, dst, v, packCtx{id: string(id), text: text})
		return out, err == nil, err
	}
	a, found := ahead.answer(id, v)
	if !found {
		a = db.answerByRef(tx, stage, v[1:])
	}
	if a == nil {
		return nil, false, fmt.Errorf("the cached answer %x it refers to is missing", v[1:])
	}
	if !isStoredAnswer(a) {
		res, err := db.decodeAnswer(tx, a)
		return append(dst, res.Output...), err == nil && res.Output != nil, err
	}
	oe, err := answerOutputRecord(a)
	if err != nil {
		return nil, false, err
	}
	out, err = db.appendRecord(tx, dst, oe, packCtx{})
	return out, err == nil, err
}

// outputs reads the outputs of stages [0, n) of id.
func (db *DB) outputs(tx *bolt.Tx, id []byte, text string, n int) (map[string]json.RawMessage, error) {
	m := make(map[string]json.RawMessage, n)
	textFn := func() string { return text }
	for i := 0; i < n; i++ {
		name := db.stages[i].Name
		o, err := db.output(tx, name, id, textFn)
		if err != nil {
			return nil, err
		}
		if o != nil {
			m[name] = o
		}
	}
	return m, nil
}

// retext rewrites the outputs item id keeps when its text changes from
// old to text, since a packed output may refer to the text.
func (w *writer) retext(id []byte, old, text string) error {
	if old == text {
		return nil
	}
	for _, s := range w.db.stages {
		b := w.bucket(outBucket(s.Name))
		v := b.Get(id)
		if len(v) == 0 || v[0] != tagPacked && v[0] != tagFlate {
			continue
		}
		raw, err := w.db.decodeRecord(w.tx, v, packCtx{id: string(id), text: func() string { return old }})
		if err != nil {
			return pipeline.Damaged(string(id), s.Name, err, "out/%s is damaged", s.Name)
		}
		nv, err := w.db.encodeRecord(w.tx, raw, packCtx{id: string(id), text: func() string { return text }})
		if err != nil {
			return err
		}
		if err := w.put(b, id, nv); err != nil {
			return err
		}
	}
	return nil
}

// encodeAnswer is the stored form of a cached answer.
func (db *DB) encodeAnswer(tx *bolt.Tx, res pipeline.Result) ([]byte, error) {
	u, err := json.Marshal(res.Usage)
	if err != nil {
		return nil, err
	}
	ue, err := db.encodeRecord(tx, u, packCtx{})
	if err != nil {
		return nil, err
	}
	oe, err := db.encodeRecord(tx, res.Output, packCtx{})
	if err != nil {
		return nil, err
	}
	if db.format >= usageInFormat {
		if off, ok := usageIn(ue, oe); ok {
			v := binary.AppendUvarint([]byte{tagUsageIn}, uint64(off))
			v = binary.AppendUvarint(v, uint64(len(ue)-1))
			return append(v, oe...), nil
		}
	}
	v := binary.AppendUvarint([]byte{tagCached}, uint64(len(ue)))
	return append(append(v, ue...), oe...), nil
}

// usageIn reports where in the packed output oe the packed usage ue is
// written, past their tags: an LLM stage's output usually carries the
// usage it was billed (classify's "usage" field), the same object packed
// the same way, so a format 7 answer keeps it once (tagUsageIn) - 19 of a
// classify answer's ~120 bytes. Any place the bytes match will do: the
// usage reads back from them byte for byte.
func usageIn(ue, oe []byte) (off int, ok bool) {
	if len(ue) < 2 || ue[0] != tagPacked || len(oe) < 2 || oe[0] != tagPacked {
		return 0, false
	}
	i := bytes.Index(oe[1:], ue[1:])
	return 1 + i, i >= 0
}

// isStoredAnswer reports whether v is an answer of format 2 or later
// (tagCached, tagUsageIn), not a format 1 JSON one.
func isStoredAnswer(v []byte) bool {
	return len(v) > 0 && (v[0] == tagCached || v[0] == tagUsageIn)
}

// decodeAnswer reads a cached answer: format 1 JSON, or a stored one (tagCached, or tagUsageIn since format 7).
func (db *DB) decodeAnswer(tx *bolt.Tx, v []byte) (pipeline.Result, error) {
	var res pipeline.Result
	if !isStoredAnswer(v) {
		var a cachedAnswer
		if err := json.Unmarshal(v, &a); err != nil {
			return res, err
		}
		return pipeline.Result{Output: a.Output, Usage: a.Usage}, nil
	}
	ue, oe, err := splitAnswer(v)
	if err != nil {
		return res, err
	}
	u, err := db.decodeRecord(tx, ue, packCtx{})
	if err != nil {
		return res, err
	}
	if err := json.Unmarshal(u, &res.Usage); err != nil {
		return res, err
	}
	res.Output, err = db.decodeRecord(tx, oe, packCtx{})
	return res, err
}

// answerOutput is the output of a stored answer, its usage left unread:
// what an output that refers to the answer reads.
func (db *DB) answerOutput(tx *bolt.Tx, v []byte) (json.RawMessage, error) {
	if !isStoredAnswer(v) {
		res, err := db.decodeAnswer(tx, v)
		return res.Output, err
	}
	oe, err := answerOutputRecord(v)
	if err != nil {
		return nil, err
	}
	return db.decodeRecord(tx, oe, packCtx{})
}

// splitAnswer is the usage and output records of v, an answer of format
// 2 or later (isStoredAnswer). The usage of a tagUsageIn answer is a new
// slice, the rest is v's.
func splitAnswer(v []byte) (usage, output []byte, err error) {
	if v[0] == tagUsageIn {
		off, n, oe, err := splitUsageIn(v)
		if err != nil {
			return nil, nil, err
		}
		return append([]byte{tagPacked}, oe[off:off+n]...), oe, nil
	}
	n, k := binary.Uvarint(v[1:])
	if k <= 0 || uint64(len(v)-1-k) < n {
		return nil, nil, errShort
	}
	return v[1+k : 1+k+int(n)], v[1+k+int(n):], nil
}

// answerOutputRecord is the output record of v, an answer of format 2 or
// later, its usage left unread.
func answerOutputRecord(v []byte) ([]byte, error) {
	if v[0] == tagUsageIn {
		_, _, oe, err := splitUsageIn(v)
		return oe, err
	}
	_, oe, err := splitAnswer(v)
	return oe, err
}

// splitUsageIn reads a tagUsageIn answer: the output record oe, and the
// usage's bytes at oe[off:off+n].
func splitUsageIn(v []byte) (off, n int, oe []byte, err error) {
	o, k := binary.Uvarint(v[1:])
	if k <= 0 {
		return 0, 0, nil, errShort
	}
	l, j := binary.Uvarint(v[1+k:])
	if j <= 0 {
		return 0, 0, nil, errShort
	}
	oe = v[1+k+j:]
	if o == 0 || l == 0 || o > uint64(len(oe)) || l > uint64(len(oe))-o {
		return 0, 0, nil, fmt.Errorf("usage at %d+%d outside an output of %d bytes", o, l, len(oe))
	}
	return int(o), int(l), oe, nil
}

// answerKey is the stored form of a cache key: 32 bytes for the usual
// hex SHA-256 key, the key itself otherwise. A non-hex key of exactly 32
// bytes gets a 0 byte appended so it cannot read back as a hex one.
func answerKey(key string) []byte {
	if len(key) == 64 {
		if b, err := hex.DecodeString(key); err == nil && hex.EncodeToString(b) == key {
			return b
		}
	}
	if len(key) == 32 {
		return append([]byte(key), 0)
	}
	return []byte(key)
}

// How much of a 32-byte answer key an output refers to it by. An output
// of a real run (out/classify) is little more than the reference, so
// each byte of it is 100 KB of a 100,000-item file: format 4 and 5 files
// refer by half the hash (answerRefLen), format 6 by a quarter
// (shortRefLen). 8 bytes of a hash are unique among a million answers
// but for a chance of 3 in 10^8; a key whose first 8 bytes another key
// has is not cached (prefixTaken), so a reference never becomes
// ambiguous.
const (
	answerRefLen = 16
	shortRefLen  = 8
)

// answerRef is what an output refers to the answer under key k in b by:
// when k is a hash, its first shortRefLen bytes (a format 6 file) or
// answerRefLen bytes (format 4 and 5), the shorter that no other key
// begins with; else the whole key.
func (db *DB) answerRef(b *bolt.Bucket, k []byte) []byte {
	if db.format < editFormat || len(k) != 32 {
		return k
	}
	for _, n := range []int{shortRefLen, answerRefLen} {
		if n == shortRefLen && db.format < shortRefFormat {
			continue
		}
		first, next, ok := db.answerAndNext(b, k[:n])
		if !ok {
			c := b.Cursor()
			first, _ = c.Seek(k[:n])
			next, _ = c.Next()
		}
		if !bytes.Equal(first, k) || bytes.HasPrefix(next, k[:n]) {
			continue
		}
		return k[:n]
	}
	return k
}

// prefixTaken reports whether b holds a key of 32 bytes, other than k,
// that begins with the shortRefLen bytes k begins with: outputs may
// refer to it by them (or by its first answerRefLen bytes) alone, and
// k, whatever its length, could sort before it and be read in its place.
func prefixTaken(b *bolt.Bucket, k []byte) bool {
	if len(k) < shortRefLen {
		return false
	}
	c := b.Cursor()
	for other, _ := c.Seek(k[:shortRefLen]); bytes.HasPrefix(other, k[:shortRefLen]); other, _ = c.Next() {
		if len(other) == 32 && !bytes.Equal(other, k) {
			return true
		}
	}
	return false
}

// referredAnswer is the stored answer in b an output's reference ref
// refers to (answerRef), nil when there is none.
func referredAnswer(b *bolt.Bucket, ref []byte) []byte {
	if b == nil {
		return nil
	}
	if len(ref) != answerRefLen && len(ref) != shortRefLen {
		return b.Get(ref)
	}
	// A key of answerRefLen bytes (a format 1 key) sorts before the
	// longer keys it begins.
	k, v := b.Cursor().Seek(ref)
	if !bytes.HasPrefix(k, ref) {
		return nil
	}
	return v
}

// answerKeyString is the cache key a stored key stands for.
func answerKeyString(k []byte) string {
	switch {
	case len(k) == 32:
		return hex.EncodeToString(k)
	case len(k) == 33 && k[32] == 0:
		return string(k[:32])
	}
	return string(k)
}

// putAnswer caches res under key at stage unless the key holds a
// readable answer already: the first answer stays, as on PostgreSQL,
// because outputs may refer to it. Keys are hashes, so writes land anywhere in
// the bucket: bbolt's default half-full split packs such pages best
// (measured at 100,000 items: 11 MB against 19 MB at fillPercent).
//
// When it stores res, ref is the stored output of res.Output as
// encodeOutput writes it, a reference to the answer: the answer's output
// was just encoded from those bytes, and a record reads back byte for
// byte (encodeRecord), so reading it again to compare would only repeat
// the work. Otherwise ref is nil and the caller encodes the output.
func (w *writer) putAnswer(stage, key string, res pipeline.Result) (ref []byte, err error) {
	b, err := w.tx.CreateBucketIfNotExists(answersBucket(stage))
	if err != nil {
		return nil, err
	}
	k := answerKey(key)
	if old := b.Get(k); old != nil {
		if _, err := w.db.decodeAnswer(w.tx, old); err == nil {
			return nil, nil
		}
		// A damaged answer made the runner pay for this one: it takes
		// its place, or every item asking the same pays again. Outputs
		// that refer to the key now read this answer: what was noted of
		// them no longer holds.
		w.db.confs.forget()
	} else if prefixTaken(b, k) {
		// Outputs may refer to the answer whose key begins as this one
		// does by that beginning alone (answerRef): a second such key
		// could sort before it and be read in its place. A quarter of a
		// hash in common almost never happens by chance; the question
		// is not cached.
		return nil, nil
	}
	v, err := w.db.encodeAnswer(w.tx, res)
	if err != nil {
		return nil, err
	}
	if err := b.Put(k, v); err != nil {
		return nil, err
	}
	if w.tx == w.db.writing.tx {
		w.db.writing.put(k)
	}
	return append([]byte{tagAnswer}, w.db.answerRef(b, k)...), nil
}
