package store

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// TestStageFieldNames_asTheRows: the names StageFieldNames and
// FieldNames give are those of the records and outputs ForEachOutput and
// ForEachItem give, on a file with the cases a reader of keys alone can
// get wrong: a stage's shared record whose key is the item's text (a key
// per item, not one for all), an empty output, an output of its own, and
// an out/<stage> entry that is a nested bucket (a damaged file: the item
// has no output there).
func TestStageFieldNames_asTheRows(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "n.db"), Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close() // not openTest: its check would find the nested bucket
	var rs []pipeline.Record
	for i, id := range []string{"a", "b", "c", "d", "e", "f"} {
		rs = append(rs, pipeline.Record{ID: id, Text: "the text of " + id, Fields: map[string]string{fmt.Sprint("field", i%3): "x"}})
	}
	if _, err := db.Ingest(rs); err != nil {
		t.Fatal(err)
	}
	outs := map[string]string{
		"a": `{"the text of a":true}`, "b": `{"the text of b":true}`, "c": `{"the text of c":true}`,
		"d": ``, "e": `{"own":1,"label":"x"}`,
	}
	var ts []pipeline.Transition
	qs, err := db.Queued("sanitize", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if out, ok := outs[q.Item.ID]; ok {
			ts = append(ts, pipeline.Transition{Stage: "sanitize", ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded,
				Result: pipeline.Result{Output: json.RawMessage(out)}})
		}
	}
	if err := db.Commit(ts); err != nil {
		t.Fatal(err)
	}
	err = db.bolt.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketMeta).Get(sharedKey("sanitize")) == nil {
			t.Error("the fixture has no shared record")
		}
		_, err := tx.Bucket(outBucket("sanitize")).CreateBucket([]byte("f"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	keysOf := func(out json.RawMessage, names map[string]bool) {
		var m map[string]json.RawMessage
		if len(out) > 0 {
			if err := json.Unmarshal(out, &m); err != nil {
				t.Fatalf("output %s: %v", out, err)
			}
		}
		for k := range m {
			names[k] = true
		}
	}
	wantIn, wantOut, rows := map[string]bool{}, map[string]bool{}, 0
	err = db.ForEachOutput("sanitize", func(rec pipeline.Record, out json.RawMessage) error {
		rows++
		for k := range rec.Fields {
			wantIn[k] = true
		}
		keysOf(out, wantOut)
		return nil
	})
	if err != nil || rows != 6 {
		t.Fatalf("ForEachOutput: %d rows, %v; want 6 (five outputs and the nested bucket)", rows, err)
	}
	in, out, err := db.StageFieldNames("sanitize")
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(in, wantIn) || !maps.Equal(out, wantOut) {
		t.Errorf("StageFieldNames = %v, %v; the rows have %v, %v", in, out, wantIn, wantOut)
	}

	allIn, allOut := map[string]bool{}, map[string]bool{}
	err = db.ForEachItem(func(is pipeline.ItemState) error {
		for k := range is.Record.Fields {
			allIn[k] = true
		}
		if o, ok := is.Outputs["sanitize"]; ok {
			keysOf(o, allOut)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	in, outs2, err := db.FieldNames()
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(in, allIn) || !maps.Equal(outs2["sanitize"], allOut) {
		t.Errorf("FieldNames = %v, %v; the rows have %v, %v", in, outs2["sanitize"], allIn, allOut)
	}
}
