package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/sawtooth-dev/sawtooth/internal/jsonquote"
	bolt "go.etcd.io/bbolt"
)

// Dict limits: only short strings are worth an entry, and the cache can
// come to hold every entry (a whole-file read), so it is capped.
const (
	dictMaxLen     = 32
	dictMaxEntries = 1 << 16
)

var bucketDict = []byte("dict")

// minTextRef is the shortest string compared with the item's text: a
// short text must not fill the dict, and reading the text costs a
// record decode.
const minTextRef = 8

// dictIDKey and dictStrKey are the dict bucket's two directions.
func dictIDKey(id uint64) []byte { return append([]byte{'i'}, u64(id)...) }
func dictStrKey(s string) []byte { return append([]byte{'s'}, s...) }

// dict caches the committed dict entries. A write transaction finds and
// adds entries through the bucket and publishes them here only once it
// has committed (OnCommit), so a rolled-back id never reaches the cache.
//
// The cache fills as entries are used, not at open: a night uses a few
// dozen of a large file's tens of thousands, and loading them all took
// a few megabytes of its heap and of the file's pages before any work.
// An entry read from the bucket is cached when it is committed: always
// in a read transaction, and in a write transaction when its id is at
// most committed (ids are the bucket's sequence: a higher one may be
// this transaction's own, which a rollback would take back).
//
// Ids are the bucket's sequence, so dense from 1 and at most
// dictMaxEntries: byID is a table indexed by id, since a whole-file read
// (an export) looks up a dozen strings per item and a map's hashing was
// an eighth of its CPU. It is read without a lock: a read lock's two
// atomic adds per string were still 5% of a million items' export.
// Entries are added under mu and published by atomic stores, in pages
// of dictPage entries made as the ids reach them. An id past the cap
// (only a damaged file has one) goes to far, so it cannot make the table
// huge.
type dict struct {
	byID      [dictMaxEntries/dictPage + 1]atomic.Pointer[dictEntries]
	mu        sync.RWMutex // guards the rest, and serializes adds
	far       map[uint64]*dictEntry
	byStr     map[string]uint64
	committed uint64 // the highest id known committed
}

// dictEntry is a dict string with what its readers would otherwise work
// out again at every use: a whole-file read meets the same few strings
// (field names, labels, models) once or more per item, and checked and
// quoted them each time.
type dictEntry struct {
	s      string
	quoted []byte // s as encoding/json writes it
	valid  bool   // s is valid UTF-8 (keyReader leaves one that is not to the decoder)
}

func newDictEntry(s string) *dictEntry {
	return &dictEntry{s: s, quoted: jsonquote.Append(nil, s), valid: utf8.ValidString(s)}
}

// dictPage is how many ids a page of dict.byID holds.
const dictPage = 256

// dictEntries is a page of dict.byID: nil where the id is not cached.
type dictEntries [dictPage]atomic.Pointer[dictEntry]

func newDict() *dict { return &dict{far: map[uint64]*dictEntry{}, byStr: map[string]uint64{}} }

// add caches the entry (id, s) and returns it.
func (d *dict) add(id uint64, s string) *dictEntry {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.byStr[s] = id
	e := newDictEntry(s)
	if id > dictMaxEntries || s == "" {
		d.far[id] = e
		return e
	}
	page := d.byID[id/dictPage].Load()
	if page == nil {
		page = new(dictEntries)
		d.byID[id/dictPage].Store(page)
	}
	page[id%dictPage].Store(e)
	return e
}

// entry is the cached entry of id, nil when it is not cached.
func (d *dict) entry(id uint64) *dictEntry {
	if id <= dictMaxEntries {
		if page := d.byID[id/dictPage].Load(); page != nil {
			if e := page[id%dictPage].Load(); e != nil {
				return e
			}
		}
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.far[id]
}

func (d *dict) id(s string) (uint64, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	id, ok := d.byStr[s]
	return id, ok
}

// lookup is the entry of dict id in tx.
func (d *dict) lookup(tx *bolt.Tx, id uint64) (*dictEntry, error) {
	if e := d.entry(id); e != nil {
		return e, nil
	}
	b := tx.Bucket(bucketDict)
	var v []byte
	if b != nil {
		v = b.Get(dictIDKey(id))
	}
	if v == nil {
		return nil, fmt.Errorf("dict entry %d is missing", id)
	}
	return d.found(tx, id, string(v)), nil
}

// found is the entry (id, s) read from the bucket in tx, cached if it is
// committed.
func (d *dict) found(tx *bolt.Tx, id uint64, s string) *dictEntry {
	if tx.Writable() {
		d.mu.RLock()
		committed := id <= d.committed
		d.mu.RUnlock()
		if !committed {
			return newDictEntry(s)
		}
	}
	return d.add(id, s)
}

// committedUpTo records that the entries up to id are committed.
func (d *dict) committedUpTo(id uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.committed = max(d.committed, id)
}

// intern is s's dict id, adding it in tx (writable) when there is room;
// ok is false when s stays inline.
func (d *dict) intern(tx *bolt.Tx, s string) (uint64, bool, error) {
	if len(s) > dictMaxLen || s == "" {
		return 0, false, nil
	}
	if id, ok := d.id(s); ok {
		return id, true, nil
	}
	if b := tx.Bucket(bucketDict); b != nil {
		if v := b.Get(dictStrKey(s)); v != nil {
			id, n := binary.Uvarint(v)
			if n <= 0 {
				return 0, false, fmt.Errorf("dict entry %q is damaged", s)
			}
			if string(b.Get(dictIDKey(id))) != s {
				// A damaged entry: cached, it would make id read as s,
				// in every record that refers to id and in the read-back
				// that keeps a record packed only if it reads as written.
				// s stays inline; Check names the entry.
				return 0, false, nil
			}
			d.found(tx, id, s)
			return id, true, nil
		}
	}
	if !tx.Writable() {
		return 0, false, nil
	}
	b, err := tx.CreateBucketIfNotExists(bucketDict)
	if err != nil {
		return 0, false, err
	}
	if b.Sequence() >= dictMaxEntries {
		return 0, false, nil
	}
	id, err := b.NextSequence()
	if err != nil {
		return 0, false, err
	}
	if err := b.Put(dictIDKey(id), []byte(s)); err != nil {
		return 0, false, err
	}
	if err := b.Put(dictStrKey(s), binary.AppendUvarint(nil, id)); err != nil {
		return 0, false, err
	}
	tx.OnCommit(func() {
		d.add(id, s)
		d.committedUpTo(id)
	})
	return id, true, nil
}

// open readies the cache for the file tx reads: the entries it holds
// are committed. It reads none of them (see dict).
func (d *dict) open(tx *bolt.Tx) {
	if b := tx.Bucket(bucketDict); b != nil {
		d.committedUpTo(b.Sequence())
	}
}

// checkDict adds a problem for each dict entry that would make a record
// read or be written wrong: a key of neither direction, an id past the
// bucket's sequence (a later entry would be given it), a string's entry
// that is damaged or names an id that does not hold the string. Open
// reads no entry (see dict), so this is where a damaged one is seen.
func checkDict(tx *bolt.Tx, w *walker, add func(string, ...any)) {
	b := tx.Bucket(bucketDict)
	if b == nil {
		return
	}
	seq := b.Sequence()
	_ = b.ForEach(func(k, v []byte) error {
		w.step()
		switch {
		case len(k) == 9 && k[0] == 'i':
			if id := binary.BigEndian.Uint64(k[1:]); id == 0 || id > seq {
				add("dict: entry %d (%q) is past the dictionary's sequence %d", id, v, seq)
			}
		case len(k) > 1 && k[0] == 's':
			id, n := binary.Uvarint(v)
			if n <= 0 || n != len(v) {
				add("dict: the entry of %q is damaged (%x)", k[1:], v)
				return nil
			}
			if got := b.Get(dictIDKey(id)); !bytes.Equal(got, k[1:]) {
				add("dict: the entry of %q names id %d, which holds %q", k[1:], id, got)
			}
		default:
			add("dict: damaged key %q", k)
		}
		return nil
	})
}
