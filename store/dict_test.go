package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// entryString is the string of d's entry id, false when it is not cached.
func entryString(d *dict, id uint64) (string, bool) {
	if e := d.entry(id); e != nil {
		return e.s, true
	}
	return "", false
}

// TestDict_str: the cache finds every id it was given, dense or past the
// cap (a damaged file's), says so for ids it was not, and an id past the
// cap is kept apart from the dense table.
func TestDict_str(t *testing.T) {
	d := newDict()
	given := map[uint64]string{1: "bug", 2: "app", 7: "gemini-2.5-flash", dictMaxEntries: "last", dictMaxEntries + 1: "past", 1 << 62: "far"}
	for id, s := range given {
		d.add(id, s)
	}
	for _, tc := range []struct {
		name string
		id   uint64
	}{{"first", 1}, {"dense", 2}, {"after a gap", 7}, {"at the cap", dictMaxEntries}, {"past the cap", dictMaxEntries + 1}, {"far past", 1 << 62},
		{"in a gap", 5}, {"zero", 0}, {"never given", 1 << 40}} {
		t.Run(tc.name, func(t *testing.T) {
			s, ok := entryString(d, tc.id)
			want, wantOK := given[tc.id]
			if s != want || ok != wantOK {
				t.Errorf("entry(%d) = %q, %v; want %q, %v", tc.id, s, ok, want, wantOK)
			}
			if id, ok := d.id(want); wantOK && (!ok || id != tc.id) {
				t.Errorf("id(%q) = %d, %v; want %d", want, id, ok, tc.id)
			}
		})
	}
	if len(d.far) != 2 {
		t.Errorf("%d ids past the cap, want 2: %v", len(d.far), d.far)
	}
}

// TestDict_entryQuotedAndValid: an entry carries its string quoted as
// encoding/json writes it and whether it is valid UTF-8, for strings
// that need escapes and for bytes that are not UTF-8.
func TestDict_entryQuotedAndValid(t *testing.T) {
	d := newDict()
	for i, s := range []string{"bug", `say "hi"`, "<b>&amp;", "tab\there", "\u2028 line", "caf\xe9", "\xff\xfe", "ok \u00e9"} {
		id := uint64(i + 1)
		d.add(id, s)
		e := d.entry(id)
		if e == nil || e.s != s {
			t.Fatalf("entry(%d) = %v, want %q", id, e, s)
		}
		if want, _ := json.Marshal(s); string(e.quoted) != string(want) {
			t.Errorf("%q quoted %s, want %s", s, e.quoted, want)
		}
		if e.valid != utf8.ValidString(s) {
			t.Errorf("%q: valid %v", s, e.valid)
		}
	}
}

// TestDict_filledAsUsed: a reopened file's dictionary holds nothing until
// records use it; a record written then refers to the entries the file
// already has (the same bytes as before the reopen, and no new entry),
// and every record reads back.
func TestDict_filledAsUsed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dict.db")
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	rec := func(id string) pipeline.Record {
		return pipeline.Record{ID: id, Text: "a review", Fields: map[string]string{"app": "com.example.app", "month": "2026-11"}}
	}
	encode := func(db *DB, r pipeline.Record) (v []byte, seq uint64) {
		t.Helper()
		// Encoded in a transaction that is rolled back: what a commit
		// would write, without writing it.
		errRollback := errors.New("rollback")
		err := db.update(func(tx *bolt.Tx) error {
			var err error
			if v, err = db.encodeItem(tx, r); err != nil {
				return err
			}
			seq = tx.Bucket(bucketDict).Sequence()
			return errRollback
		})
		if !errors.Is(err, errRollback) {
			t.Fatal(err)
		}
		return v, seq
	}
	if _, err := db.Ingest([]pipeline.Record{rec("a"), rec("b")}); err != nil {
		t.Fatal(err)
	}
	before, seqBefore := encode(db, rec("c"))
	db.Close()

	db, err = Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if n := len(db.dict.byStr); n != 0 {
		t.Errorf("%d dictionary entries cached at open, want none", n)
	}
	after, seqAfter := encode(db, rec("c"))
	if !bytes.Equal(before, after) || seqAfter != seqBefore {
		t.Errorf("after a reopen record %x (dict sequence %d), before %x (%d)", after, seqAfter, before, seqBefore)
	}
	for _, id := range []string{"a", "b"} {
		err := db.view(func(tx *bolt.Tx) error {
			r, _, err := db.record(tx, []byte(id))
			if err == nil && !reflect.DeepEqual(r, rec(id)) {
				t.Errorf("record %+v, want %+v", r, rec(id))
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := len(db.dict.byStr); n == 0 {
		t.Error("no entry cached after records were read")
	}
}

// TestDict_damagedStrEntryPoisonsNothing: a string's entry ('s', string
// -> id) damaged to name another string's id is not taken for the id's
// string: records read as written in the handle that met it, and a
// record written then reads back after a reopen (the cache held the
// string under the other's id, so the read-back that guards every record
// agreed with what the file does not hold).
func TestDict_damagedStrEntryPoisonsNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dict.db")
	rec := func(id string) pipeline.Record {
		if id == "b" { // a record holding the damaged entry's string alone
			return pipeline.Record{ID: id, Text: "another review", Fields: map[string]string{"app": "com.example.app"}}
		}
		return pipeline.Record{ID: id, Text: "a review", Fields: map[string]string{"app": "com.example.app", "month": "2026-11"}}
	}
	open := func() *DB {
		t.Helper()
		db, err := Open(path, Options{Stages: testStages})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	db := open()
	if _, err := db.Ingest([]pipeline.Record{rec("a")}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	db = open()
	// The entry of "com.example.app" now names the id of "2026-11" (a
	// flipped bit); the cache of this handle holds nothing yet.
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketDict)
		return b.Put(dictStrKey("com.example.app"), bytes.Clone(b.Get(dictStrKey("2026-11"))))
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Ingest([]pipeline.Record{rec("b")}); err != nil {
		t.Fatal(err)
	}
	readBack := func(db *DB, when string) {
		t.Helper()
		for _, id := range []string{"a", "b"} {
			err := db.view(func(tx *bolt.Tx) error {
				r, _, err := db.record(tx, []byte(id))
				if err == nil && !reflect.DeepEqual(r, rec(id)) {
					t.Errorf("%s: record %+v, want %+v", when, r, rec(id))
				}
				return err
			})
			if err != nil {
				t.Errorf("%s: %v", when, err)
			}
		}
	}
	readBack(db, "in the handle that met the damage")
	db.Close()
	db = open()
	defer db.Close()
	readBack(db, "after a reopen")
}

// TestDict_readsWhileAdding: str reads without a lock while entries are
// added: a reader finds every id either not yet cached or with its
// string, never another (run with -race).
func TestDict_readsWhileAdding(t *testing.T) {
	d := newDict()
	const n = 3 * dictPage
	done := make(chan struct{})
	go func() {
		defer close(done)
		for id := uint64(1); id <= n; id++ {
			d.add(id, fmt.Sprint("s", id))
		}
	}()
	for reading := true; reading; {
		select {
		case <-done:
			reading = false
		default:
		}
		for id := uint64(1); id <= n; id++ {
			if s, ok := entryString(d, id); ok && s != fmt.Sprint("s", id) {
				t.Fatalf("entry(%d) = %q while adding", id, s)
			}
		}
	}
	for id := uint64(1); id <= n; id++ {
		if s, ok := entryString(d, id); !ok || s != fmt.Sprint("s", id) {
			t.Fatalf("entry(%d) = %q, %v after adding", id, s, ok)
		}
	}
}
