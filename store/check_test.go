package store

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
	bolt "go.etcd.io/bbolt"
)

// checkFixture is a consistent DB: a and d done, b dead at classify (with
// a history entry), c queued at classify.
func checkFixture(t *testing.T) *DB {
	t.Helper()
	db, err := Open(filepath.Join(t.TempDir(), "check.db"), Options{Stages: storetest.Stages})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Ingest([]pipeline.Record{
		storetest.Record("a", "bug a", "x", "4"), storetest.Record("b", "bug b", "x", ""),
		storetest.Record("c", "ux c", "x", ""), storetest.Record("d", "ux d", "y", "2"),
	}); err != nil {
		t.Fatal(err)
	}
	storetest.Advance(t, db, "sanitize")
	storetest.Advance(t, db, "classify", "b")
	if _, err := db.Requeue("classify", []string{"b"}); err != nil {
		t.Fatal(err)
	}
	storetest.Advance(t, db, "classify", "b")
	storetest.Advance(t, db, "aggregate")
	if _, err := db.Ingest([]pipeline.Record{storetest.Record("c", "ux c", "x", "")}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Rerun("classify"); err != nil {
		t.Fatal(err)
	}
	storetest.Advance(t, db, "classify", "b")
	storetest.Advance(t, db, "aggregate")
	if n, err := db.Ingest([]pipeline.Record{storetest.Record("c", "ux c, edited", "x", "")}); err != nil || n.Changed != 1 {
		t.Fatal(n, err)
	}
	storetest.Advance(t, db, "sanitize")
	if problems, err := db.Check(); err != nil || len(problems) > 0 {
		t.Fatalf("the fixture is not consistent: %v %v", err, problems)
	}
	if loc, _ := db.Locate("c"); loc.Status != "queued" || loc.Stage != "classify" {
		t.Fatalf("fixture: c is %s at %s", loc.Status, loc.Stage)
	}
	return db
}

// TestDB_CheckReportsDamage tampers with one bucket per case, behind the
// transitions' back, and expects Check to name the item and the bucket.
func TestDB_CheckReportsDamage(t *testing.T) {
	put := func(bucket, key, val string) func(*bolt.Tx) error {
		return func(tx *bolt.Tx) error { return tx.Bucket([]byte(bucket)).Put([]byte(key), []byte(val)) }
	}
	del := func(bucket, key string) func(*bolt.Tx) error {
		return func(tx *bolt.Tx) error { return tx.Bucket([]byte(bucket)).Delete([]byte(key)) }
	}
	seqKey := func(n uint64) string { return string(binary.BigEndian.AppendUint64(nil, n)) }
	tests := []struct {
		name   string
		tamper func(*bolt.Tx) error
		want   []string // every one must appear in one reported line
	}{
		{"orphan todo entry", put("todo/classify", seqKey(999), "ghost"), []string{"todo/classify", `"ghost"`, "not queued there"}},
		{"todo entry for an item queued elsewhere", put("todo/aggregate", seqKey(999), "c"), []string{"todo/aggregate", `"c"`, "not queued there"}},
		{"queued item missing from its queue", func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("todo/classify")).ForEach(func(k, _ []byte) error {
				return tx.Bucket([]byte("todo/classify")).Delete(k)
			})
		}, []string{`item "c"`, "queued at classify"}},
		{"dead letter without state", put("dead/classify", "ghost", `{"class":"permanent"}`), []string{"dead/classify", `"ghost"`, "no state"}},
		{"dead letter of an item that is not dead", put("dead/sanitize", "a", `{"class":"permanent"}`), []string{`item "a"`, "dead/sanitize"}},
		{"dead item without its dead letter", del("dead/classify", "b"), []string{`item "b"`, "dead/classify"}},
		{"damaged dead letter", put("dead/classify", "b", "garbage{"), []string{`item "b"`, "dead/classify", "damaged"}},
		{"damaged history entry", put("history", string(historyKey([]byte("b"), 7)), "garbage{"), []string{"history", `item "b"`, "damaged"}},
		{"missing output", del("out/sanitize", "a"), []string{`item "a"`, "out/sanitize", "want true"}},
		{"extra output", put("out/aggregate", "c", `{"label":"ux"}`), []string{`item "c"`, "out/aggregate", "want false"}},
		{"output without state", put("out/classify", "ghost", `{}`), []string{"out/classify", `"ghost"`, "no state"}},
		{"history without state", put("history", string(historyKey([]byte("ghost"), 7)), `{}`), []string{"history", `"ghost"`, "no state"}},
		{"state without record", del("items", "d"), []string{`item "d"`, "without record"}},
		// Format 4 records read whole or not at all; run and export say
		// to run verify on one, so verify reads each, not only the last
		// stage's output of a done item.
		{"damaged deflated output of a queued item", put("out/sanitize", "c", "\x05\xff\xff"),
			[]string{`item "c"`, "out/sanitize is damaged", "does not inflate"}},
		{"an edit past the item's text", put("out/sanitize", "c", string([]byte{tagPacked, pEdit, 1, 0, 0, 0xc8, 0x01})),
			[]string{`item "c"`, "out/sanitize is damaged", "more of the item's text"}},
		{"damaged record of a queued item", put("items", "c", "\x05\xff"), []string{`item "c"`, "bad record"}},
		{"damaged output of a done item before the last stage", put("out/classify", "a", "\x05\xff"),
			[]string{`item "a"`, "out/classify is damaged"}},
		{"corrupt state", put("state", "a", "junk"), []string{`item "a"`, "corrupt state"}},
		{"tampered label count", func(tx *bolt.Tx) error {
			return addCount(tx.Bucket(bucketAgg), aggKey(aggLabel, "bug"), 1)
		}, []string{"aggregate", `label "bug"`}},
		{"tampered group count", func(tx *bolt.Tx) error {
			return addCount(tx.Bucket(bucketAgg), groupKey("app", "y", "ux"), -1)
		}, []string{"aggregate", `app="y"`}},
		{"tampered rating sum", func(tx *bolt.Tx) error {
			r := 1.0
			return foldAgg(tx.Bucket(bucketAgg), nil, "zz", pipeline.Fact{Label: "ux", Rating: &r}, +1)
		}, []string{"aggregate", `rating "ux"`}},
		{"tampered item count", func(tx *bolt.Tx) error {
			return addCount(tx.Bucket(bucketAgg), aggItems, 5)
		}, []string{"aggregate", "items"}},
		{"dict key of the wrong length", put("dict", "i\x00\x01", "x"), []string{"dict", `"i\x00\x01"`}},
		{"dict string entry naming another string's id", func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketDict)
			return b.Put(dictStrKey("x"), bytes.Clone(b.Get(dictStrKey("y"))))
		}, []string{"dict", `"x"`, `holds "y"`}},
		{"dict string entry damaged", put("dict", "sx", "\xff"), []string{"dict", `"x"`, "damaged"}},
		{"dict entry past the sequence", func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketDict)
			return b.Put(dictIDKey(b.Sequence()+1), []byte("later"))
		}, []string{"dict", `"later"`, "sequence"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db := checkFixture(t)
			if err := db.update(tc.tamper); err != nil {
				t.Fatal(err)
			}
			problems, err := db.Check()
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range problems {
				if containsAll(p, tc.want) {
					return
				}
			}
			t.Fatalf("Check did not report %q; it reported %q", tc.want, problems)
		})
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
