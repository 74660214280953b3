package store

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// TestDB_RecordReadsAsItsJSON: an item's record read straight from its
// packed form (queue reads, commits) is the record its JSON decodes to,
// for every shape a record takes, and its text alone is that record's.
func TestDB_RecordReadsAsItsJSON(t *testing.T) {
	// Not openTest: the records have no states, which Check reports.
	db, err := Open(filepath.Join(t.TempDir(), "rec.db"), Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	long := strings.Repeat("a long review that deflates well ", 200)
	tests := []struct {
		name string
		rec  pipeline.Record
		// packed: read without its JSON (what a night's items are).
		packed bool
	}{
		{"text only", pipeline.Record{ID: "a", Text: "Great app"}, true},
		{"fields", pipeline.Record{ID: "b", Text: "Crashes", Fields: map[string]string{"app": "x", "month": "2026-11"}}, true},
		{"types", pipeline.Record{ID: "c", Text: "Slow", Fields: map[string]string{"rating": "4"}, Types: map[string]pipeline.FieldType{"rating": "number"}}, true},
		{"line", pipeline.Record{ID: "d", Text: "Ok", Line: 42}, true},
		{"empty fields", pipeline.Record{ID: "e", Text: "Fine", Fields: map[string]string{}}, true},
		{"a field equal to the id", pipeline.Record{ID: "f", Text: "Meh", Fields: map[string]string{"ref": "f", "f": "x"}}, true},
		{"text equal to the id", pipeline.Record{ID: "same", Text: "same"}, true},
		{"empty text", pipeline.Record{ID: "g", Text: ""}, true},
		{"invalid UTF-8", pipeline.Record{ID: "h", Text: "bad \xff", Fields: map[string]string{"k\xfe": "v\xff"}}, false},
		{"escapes and HTML", pipeline.Record{ID: "i", Text: "<b>\"q\"</b>\n\t\u2028", Fields: map[string]string{"<k>": "&"}}, true},
		{"long text (deflated)", pipeline.Record{ID: "j", Text: long, Fields: map[string]string{"app": long}}, true},
	}
	err = db.update(func(tx *bolt.Tx) error {
		for _, tc := range tests {
			v, err := db.encodeItem(tx, tc.rec)
			if err != nil {
				return err
			}
			if err := tx.Bucket(bucketItems).Put([]byte(tc.rec.ID), v); err != nil {
				return err
			}
		}
		// A format 1 record: plain JSON.
		return tx.Bucket(bucketItems).Put([]byte("old"), []byte(`{"id":"old","text":"From format 1","fields":{"app":"y"}}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	tests = append(tests, struct {
		name   string
		rec    pipeline.Record
		packed bool
	}{"format 1", pipeline.Record{ID: "old", Text: "From format 1", Fields: map[string]string{"app": "y"}}, false})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := db.view(func(tx *bolt.Tx) error {
				id := []byte(tc.rec.ID)
				v := tx.Bucket(bucketItems).Get(id)
				want, err := db.recordJSON(tx, id, v)
				if err != nil {
					return err
				}
				got, ok, err := db.record(tx, id)
				if err != nil || !ok {
					return fmt.Errorf("record: %v %v", ok, err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("record %#v, its JSON %#v", got, want)
				}
				if _, packed := db.packedRecord(tx, id, v); packed != tc.packed {
					t.Errorf("read without its JSON: %v, want %v", packed, tc.packed)
				}
				if text := db.textOf(tx, id)(); text != want.Text {
					t.Errorf("text %q, its JSON's %q", text, want.Text)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// BenchmarkDB_Queued is a dispatcher's queue read: 1,000 items queued at
// the second stage, each with its record and the first stage's output.
func BenchmarkDB_Queued(b *testing.B) {
	db := openTest(b)
	if _, err := db.Ingest(nightRecs(0, 1000)); err != nil {
		b.Fatal(err)
	}
	advance(b, db, "sanitize", jsonOut)
	b.ReportAllocs()
	for b.Loop() {
		qs, err := db.Queued("classify", 0, 1000)
		if err != nil || len(qs) != 1000 {
			b.Fatalf("%d queued, %v", len(qs), err)
		}
	}
}
