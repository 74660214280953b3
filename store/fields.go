package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// NotObjectError is FieldNames' error for a stored output that is not a
// JSON object (a damaged file): Raw is that output.
type NotObjectError struct {
	ID, Stage string
	Raw       json.RawMessage
}

// NotObject is the output: what a caller words its own error from.
func (e *NotObjectError) NotObject() (id, stage string, raw []byte) { return e.ID, e.Stage, e.Raw }

func (e *NotObjectError) Error() string { return e.damaged().Error() }

// Unwrap makes it a *pipeline.DamagedError, which the front end words.
func (e *NotObjectError) Unwrap() error { return e.damaged() }

func (e *NotObjectError) damaged() *pipeline.DamagedError {
	return pipeline.Damaged(e.ID, e.Stage, nil, "the output of %s is not a JSON object", e.Stage)
}

// FieldNames reads the names an export of every item makes columns of:
// the input fields of every record, and the top-level keys of every
// stored output by stage. It reads them from the packed records
// themselves: a key is a dict id or a few bytes, and the values are
// skipped, not decoded, so it costs a fraction of reading the items
// (ForEachItem). A stage's shared record counts when an item uses it. On
// a sound file the names are exactly those ForEachItem's records and
// outputs have; a record or output without a state (an orphan `sawtooth
// verify` reports) adds its names too, as a column no row fills.
//
// The records and the outputs are read side by side, each in a read
// transaction of its own (and the outputs in two, see stagesFieldNames):
// the records are most of the file, and on a read-only open (export) no
// write can come between them. An error reading the records comes
// first, as it did when they were read first.
func (db *DB) FieldNames() (inputs map[string]bool, outputs map[string]map[string]bool, err error) {
	inputs, outputs = map[string]bool{}, map[string]map[string]bool{}
	records := make(chan error, 1)
	go func() {
		records <- db.walk(func(tx *bolt.Tx, w *walker) error {
			return tx.Bucket(bucketItems).ForEach(func(k, v []byte) error {
				w.step()
				return db.recordFieldNames(tx, k, v, inputs)
			})
		})
	}()
	err = db.stagesFieldNames(outputs)
	if rerr := <-records; rerr != nil {
		err = rerr
	}
	if err != nil {
		// No walk follows a failed reading to take what it kept.
		db.held.drop()
	}
	return inputs, outputs, err
}

// answerRefs are the references to cached answers of a stage's outputs,
// one per output: 8 bytes each, 8 MB at a million items.
type answerRefs [][shortRefLen]byte

// freeAfterRefs is how many references make answersFieldNames return
// the heap to the system when it is done: 512 KB of them.
const freeAfterRefs = 1 << 16

// answersFieldNames adds the keys of the answers refs refer to, reading
// each answer once, in the order of the references' bytes (the answers
// bucket's key order). When the walk after it would read the stage's
// answers whole (more than aheadAfter references), it reads them so and
// keeps the table for that walk (heldtable.go). An answer whose keys do
// not read without its item (answerFieldNames) is read the long way for
// every output that refers to it, found by one more walk of the stage's
// outputs, as it would have been in the walk.
func (db *DB) answersFieldNames(tx *bolt.Tx, stage string, refs answerRefs, w *walker, names map[string]bool) error {
	if len(refs) >= freeAfterRefs {
		// The references, and the heap an export's GOGC lets grow
		// around them (5x at 400), are garbage once read: give them back
		// before the export's row pass maps the file's pages (at a
		// million items, 8 MB of references kept 50 MB resident into it).
		defer debug.FreeOSMemory()
	}
	var table *answerTable
	var seek answerSeeker
	if answers := tx.Bucket(answersBucket(stage)); answers != nil {
		if len(refs) > aheadAfter {
			table = readTable(answers, w)
		}
		if table == nil {
			seek.c = answers.Cursor()
		}
	}
	if table != nil {
		defer db.held.keep(tx, stage, table)
	}
	slices.SortFunc(refs, func(x, y [shortRefLen]byte) int { return bytes.Compare(x[:], y[:]) })
	refs = slices.Compact(refs)
	var longWay map[[shortRefLen]byte]bool
	for _, ref := range refs {
		w.step()
		var a []byte
		switch {
		case table != nil:
			a = table.answer(ref[:])
		case seek.c != nil:
			a = seek.answer(ref[:])
		}
		if !db.answerFieldNames(tx, a, names) {
			if longWay == nil {
				longWay = map[[shortRefLen]byte]bool{}
			}
			longWay[ref] = true
		}
	}
	if len(longWay) == 0 {
		return nil
	}
	return tx.Bucket(outBucket(stage)).ForEach(func(k, v []byte) error {
		w.step()
		if len(v) == 1+shortRefLen && v[0] == tagAnswer && longWay[[shortRefLen]byte(v[1:])] {
			return db.outputFieldNames(tx, stage, k, v, names)
		}
		return nil
	})
}

// answerFieldNames adds the keys of the stored answer a when they read
// from its packed record alone; false when the record reads the long way
// (not packed, or a key it cannot read without an item) or the answer is
// missing (nil) or damaged, which outputFieldNames reports.
func (db *DB) answerFieldNames(tx *bolt.Tx, a []byte, names map[string]bool) bool {
	if !isStoredAnswer(a) {
		return false
	}
	rec, err := answerOutputRecord(a)
	if err != nil || len(rec) == 0 || rec[0] != tagPacked {
		return false
	}
	// No id: answers are packed without an item (packCtx{}), so none
	// holds "the item's id"; a damaged one that does reads the long way,
	// as outputFieldNames read it before. The keys added before a
	// failure are the answer's too.
	k := keyReader{db: db, tx: tx, in: rec[1:]}
	return k.keys(names) == nil && len(k.in) == 0
}

// sharedFieldNames adds the keys of stage si's shared record to names
// when an item's output is that record, and reports whether one is. The
// keys are read once, unless one refers to the item (its text): then
// they are read for each item whose output it is.
func (db *DB) sharedFieldNames(tx *bolt.Tx, si int, w *walker, names map[string]bool) (used bool, err error) {
	if !db.mayShare(tx, si) {
		return false, nil
	}
	stage := db.stages[si].Name
	v := tx.Bucket(bucketMeta).Get(sharedKey(stage))
	keys, alike := db.itemlessKeys(tx, v)
	c := tx.Bucket(bucketState).Cursor()
	for k, sv := c.First(); k != nil; k, sv = c.Next() {
		w.step()
		if s, ok := decodeState(sv); !ok || s.Shared&sharedBit(si) == 0 {
			continue
		}
		used = true
		if alike {
			maps.Copy(names, keys)
			return true, nil
		}
		if err := db.outputFieldNames(tx, stage, k, v, names); err != nil {
			return true, err
		}
	}
	return used, nil
}

// itemlessKeys are the top-level keys of the packed record v when they
// read without an item; alike is false when one refers to the item (its
// id or text) or v reads the long way.
func (db *DB) itemlessKeys(tx *bolt.Tx, v []byte) (keys map[string]bool, alike bool) {
	if len(v) == 0 || v[0] != tagPacked {
		return nil, false
	}
	keys = map[string]bool{}
	k := keyReader{db: db, tx: tx, in: v[1:]}
	if k.keys(keys) != nil || len(k.in) != 0 {
		return nil, false
	}
	return keys, true
}

// recordKeys are the top-level keys of a stored record, pipeline.Record's
// JSON names, by whether they hold the record's fields. They come from
// the type, so a key added to Record is known here too: a list written
// by hand missed "line", added later, and sent every record of a file
// ingested since the long way (a full decode: a sixth of a million
// items' export).
var recordKeys = func() map[string]bool {
	keys := map[string]bool{}
	t := reflect.TypeFor[pipeline.Record]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			keys[name] = name == "fields"
		}
	}
	return keys
}()

// recordFieldNames adds the names of record v's fields to names.
func (db *DB) recordFieldNames(tx *bolt.Tx, id, v []byte, names map[string]bool) error {
	if db.packedFieldNames(tx, id, v, names) {
		return nil
	}
	r, _, err := db.record(tx, id)
	for name := range r.Fields {
		names[name] = true
	}
	return err
}

// packedFieldNames adds the names of record v's fields to names when
// they read from its packed bytes alone: false when v must be read the
// long way (not packed, or a key Record does not have: a later format).
// The names added before a false are v's too.
func (db *DB) packedFieldNames(tx *bolt.Tx, id, v []byte, names map[string]bool) bool {
	if len(v) == 0 || v[0] != tagPacked {
		return false
	}
	k := keyReader{db: db, tx: tx, in: v[1:], id: id}
	return k.object(func(key string) (bool, error) {
		fields, known := recordKeys[key]
		switch {
		case !known:
			return true, nil
		case fields:
			return false, k.keys(names)
		default:
			return false, k.skip(0)
		}
	}) == nil
}

// outputFieldNames adds the top-level keys of stage's stored output v of
// item id to names.
func (db *DB) outputFieldNames(tx *bolt.Tx, stage string, id, v []byte, names map[string]bool) error {
	rec := v
	if len(v) > 0 && v[0] == tagAnswer {
		a := referredAnswer(tx.Bucket(answersBucket(stage)), v[1:])
		rec = nil
		if isStoredAnswer(a) {
			if oe, err := answerOutputRecord(a); err == nil {
				rec = oe
			}
		}
	}
	if len(rec) > 0 && rec[0] == tagPacked {
		k := keyReader{db: db, tx: tx, in: rec[1:], id: id}
		if k.keys(names) == nil && len(k.in) == 0 {
			return nil
		}
	}
	text := db.textOf(tx, id)
	out, err := db.decodeOutput(tx, stage, id, v, text, nil)
	if err != nil {
		return pipeline.Damaged(string(id), stage, err, "out/%s is damaged", stage)
	}
	if len(out) == 0 {
		return nil // an empty output (or an old answer without one) has no keys, as the export reads it
	}
	// As the export reads an output: its first JSON value.
	var m map[string]json.RawMessage
	if json.NewDecoder(bytes.NewReader(out)).Decode(&m) != nil {
		return &NotObjectError{ID: string(id), Stage: stage, Raw: out}
	}
	for name := range m {
		names[name] = true
	}
	return nil
}

// errLongWay is keyReader's word for a record it leaves to the decoder.
var errLongWay = errors.New("read the record the long way")

// keyReader reads the keys of a packed record (codec.go) and skips its
// values. Anything it does not read as a decoder would (a key that
// refers to the item's text, a key that is not valid UTF-8, a value that
// is not an object) is errLongWay: the caller decodes the record.
type keyReader struct {
	db *DB
	tx *bolt.Tx
	in []byte
	id []byte
}

func (k *keyReader) uvarint() (uint64, error) {
	n, rest, err := uvarintAt(k.in)
	k.in = rest
	return n, err
}

// object reads an object, calling each for every key with the reader at
// its value: each reads or skips the value, or says to stop (longWay).
func (k *keyReader) object(each func(key string) (longWay bool, err error)) error {
	if len(k.in) == 0 || k.in[0] != pObject {
		return errLongWay
	}
	k.in = k.in[1:]
	n, err := k.uvarint()
	if err != nil {
		return err
	}
	for range n {
		key, err := k.key()
		if err != nil {
			return err
		}
		longWay, err := each(key)
		if err != nil {
			return err
		}
		if longWay {
			return errLongWay
		}
	}
	return nil
}

// keys adds the keys of the object at the reader to names.
func (k *keyReader) keys(names map[string]bool) error {
	return k.object(func(key string) (bool, error) {
		if !names[key] {
			names[key] = true
		}
		return false, k.skip(0)
	})
}

// key reads an object key.
func (k *keyReader) key() (string, error) {
	if len(k.in) == 0 {
		return "", errShort
	}
	kind := k.in[0]
	k.in = k.in[1:]
	var s string
	switch kind {
	case pString:
		n, err := k.uvarint()
		if err != nil || uint64(len(k.in)) < n {
			return "", errShort
		}
		s = string(k.in[:n])
		k.in = k.in[n:]
	case pDict:
		id, err := k.uvarint()
		if err != nil {
			return "", err
		}
		e, err := k.db.dict.lookup(k.tx, id)
		if err != nil {
			return "", err
		}
		if !e.valid {
			return "", errLongWay
		}
		return e.s, nil
	case pID:
		if k.id == nil {
			return "", errLongWay
		}
		s = string(k.id)
	default:
		return "", errLongWay
	}
	if !utf8.ValidString(s) {
		return "", errLongWay
	}
	return s, nil
}

// skip passes over one value.
func (k *keyReader) skip(depth int) error {
	if len(k.in) == 0 || depth > maxDepth {
		return errShort
	}
	kind := k.in[0]
	k.in = k.in[1:]
	switch kind {
	case pNull, pFalse, pTrue, pID, pText, pRunes:
		return nil
	case pUint, pDict, pPrefix:
		_, err := k.uvarint()
		return err
	case pEdit:
		rest, err := skipEdit(k.in)
		k.in = rest
		return err
	case pNumber, pString:
		n, err := k.uvarint()
		if err != nil || uint64(len(k.in)) < n {
			return errShort
		}
		k.in = k.in[n:]
		return nil
	case pArray, pObject:
		n, err := k.uvarint()
		if err != nil {
			return err
		}
		for range n {
			if kind == pObject {
				if err := k.skip(depth + 1); err != nil {
					return err
				}
			}
			if err := k.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown value kind %d", kind)
}

// str reads a string value as encoding/json would decode its JSON.
func (k *keyReader) str() (string, error) {
	if len(k.in) > 0 && k.in[0] == pText {
		return "", errLongWay // an item record never refers to its own text
	}
	return k.key()
}

// strings reads an object of string values into a new map.
func (k *keyReader) strings() (map[string]string, error) {
	size := 0
	if len(k.in) > 1 && k.in[0] == pObject && k.in[1] < 0x80 {
		size = int(k.in[1]) // the map made at its size, not grown as filled
	}
	m := make(map[string]string, size)
	err := k.object(func(key string) (bool, error) {
		v, err := k.str()
		if err != nil {
			return false, err
		}
		m[key] = v
		return false, nil
	})
	return m, err
}

// itemRecord is the record item id stores as v: read straight from the
// packed form, which is what the items of format 2 and later are, else
// (or when it holds anything unusual) through its JSON (recordJSON).
// Every read of an item goes through it: a night's queue reads and
// commits decoded each record to JSON and parsed that again.
func (db *DB) itemRecord(tx *bolt.Tx, id, v []byte) (pipeline.Record, error) {
	if r, ok := db.packedRecord(tx, id, v); ok {
		return r, nil
	}
	return db.recordJSON(tx, id, v)
}

// packedRecord is itemRecord's straight read; ok is false for a record
// it leaves to the JSON.
func (db *DB) packedRecord(tx *bolt.Tx, id, v []byte) (r pipeline.Record, ok bool) {
	if len(v) > 0 && v[0] == tagLong {
		whole, err := longRecord(tx, v)
		if err != nil {
			return r, false
		}
		v = whole
	}
	if len(v) > 0 && v[0] == tagFlate {
		inner, err := inflateRecord(v)
		if err != nil {
			return r, false
		}
		v = inner
	}
	if len(v) > 0 && v[0] == tagPacked {
		k := keyReader{db: db, tx: tx, in: v[1:], id: id}
		err := k.object(func(key string) (bool, error) {
			var err error
			switch key {
			case "id":
				r.ID, err = k.str()
			case "text":
				r.Text, err = k.str()
			case "fields":
				r.Fields, err = k.strings()
			case "types":
				var types map[string]string
				if types, err = k.strings(); err == nil {
					r.Types = make(map[string]pipeline.FieldType, len(types))
					for f, t := range types {
						r.Types[f] = pipeline.FieldType(t)
					}
				}
			case "line":
				r.Line, err = k.smallInt()
			default:
				return true, nil
			}
			return false, err
		})
		if err == nil && len(k.in) == 0 {
			return r, true
		}
	}
	return pipeline.Record{}, false
}

// itemText is the text of the record item id stores as v, read as
// itemRecord reads it without the record's other fields.
func (db *DB) itemText(tx *bolt.Tx, id, v []byte) (string, error) {
	if len(v) > 0 && v[0] == tagPacked {
		var text string
		k := keyReader{db: db, tx: tx, in: v[1:], id: id}
		err := k.object(func(key string) (bool, error) {
			switch key {
			case "id", "fields", "types", "line":
				return false, k.skip(0)
			case "text":
				var err error
				text, err = k.str()
				return false, err
			}
			return true, nil
		})
		if err == nil && len(k.in) == 0 {
			return text, nil
		}
	}
	r, err := db.recordJSON(tx, id, v)
	return r.Text, err
}

// smallInt reads a non-negative integer that fits an int, as
// encoding/json would decode its JSON into an int.
func (k *keyReader) smallInt() (int, error) {
	if len(k.in) == 0 || k.in[0] != pUint {
		return 0, errLongWay
	}
	k.in = k.in[1:]
	n, err := k.uvarint()
	if err != nil || n > math.MaxInt {
		return 0, errLongWay
	}
	return int(n), nil
}
