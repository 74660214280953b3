package store

import (
	"encoding/binary"
	"fmt"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// Dict limits: only short strings are worth an entry, and the dict is
// loaded whole, so it is capped.
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
// Ids are the bucket's sequence, so dense from 1 and at most
// dictMaxEntries: byID is a slice indexed by id, since a whole-file read
// (an export) looks up a dozen strings per item and a map's hashing was
// an eighth of its CPU. An id past the cap (only a damaged file has one)
// goes to far, so it cannot make the slice huge.
type dict struct {
	mu    sync.RWMutex
	byID  []string // "" where the id is not cached: dict strings are never empty
	far   map[uint64]string
	byStr map[string]uint64
}

func newDict() *dict { return &dict{far: map[uint64]string{}, byStr: map[string]uint64{}} }

func (d *dict) add(id uint64, s string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.byStr[s] = id
	if id > dictMaxEntries || s == "" {
		d.far[id] = s
		return
	}
	if id >= uint64(len(d.byID)) {
		d.byID = append(d.byID, make([]string, int(id)+1-len(d.byID))...)
	}
	d.byID[id] = s
}

func (d *dict) str(id uint64) (string, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if id < uint64(len(d.byID)) && d.byID[id] != "" {
		return d.byID[id], true
	}
	s, ok := d.far[id]
	return s, ok
}

func (d *dict) id(s string) (uint64, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	id, ok := d.byStr[s]
	return id, ok
}

// lookup is the string of dict id in tx.
func (d *dict) lookup(tx *bolt.Tx, id uint64) (string, error) {
	if s, ok := d.str(id); ok {
		return s, nil
	}
	b := tx.Bucket(bucketDict)
	var v []byte
	if b != nil {
		v = b.Get(dictIDKey(id))
	}
	if v == nil {
		return "", fmt.Errorf("dict entry %d is missing", id)
	}
	s := string(v)
	if !tx.Writable() {
		d.add(id, s) // committed: a read transaction sees nothing else
	}
	return s, nil
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
	if !tx.Writable() {
		return 0, false, nil
	}
	b, err := tx.CreateBucketIfNotExists(bucketDict)
	if err != nil {
		return 0, false, err
	}
	if v := b.Get(dictStrKey(s)); v != nil {
		id, n := binary.Uvarint(v)
		if n <= 0 {
			return 0, false, fmt.Errorf("dict entry %q is damaged", s)
		}
		return id, true, nil
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
	tx.OnCommit(func() { d.add(id, s) })
	return id, true, nil
}

// load fills the cache from the file.
func (d *dict) load(tx *bolt.Tx) error {
	b := tx.Bucket(bucketDict)
	if b == nil {
		return nil
	}
	c := b.Cursor()
	prefix := []byte{'i'}
	for k, v := c.Seek(prefix); k != nil && k[0] == 'i'; k, v = c.Next() {
		if len(k) != 9 {
			return fmt.Errorf("dict: damaged key %q", k)
		}
		d.add(binary.BigEndian.Uint64(k[1:]), string(v))
	}
	return nil
}
