package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// TestDB_ForEachItemAsLocate reads every item (and every done one) of a file whose records
// and outputs take every stored form (typed fields, no fields, invalid
// UTF-8, a text equal to the id, shared and cached outputs, dead and
// queued items) through ForEachItem's cursors and straight packed
// reading, and through Locate, which looks each item up and decodes its
// JSON: both give the same record and outputs.
func TestDB_ForEachItemAsLocate(t *testing.T) {
	db := openTest(t)
	var rs []pipeline.Record
	for i := range 30 {
		r := pipeline.Record{ID: fmt.Sprintf("i%02d", i), Text: fmt.Sprintf("text of i%02d", i), Fields: map[string]string{"app": "a", "n": fmt.Sprint(i)}}
		switch i % 6 {
		case 1:
			r.Types = map[string]pipeline.FieldType{"n": pipeline.FieldNumber}
		case 2:
			r.Fields = nil
		case 3:
			r.Fields["bad"] = "x \xff y"
			r.Text = "caf\u00e9 <&> \u2028"
		case 4:
			r.Text = r.ID
			r.Fields = map[string]string{}
		case 5:
			r.Fields["k\u00e9y"] = r.ID
		}
		rs = append(rs, r)
	}
	if _, err := db.Ingest(rs); err != nil {
		t.Fatal(err)
	}
	advance(t, db, "sanitize", func(id string) json.RawMessage {
		for _, r := range rs {
			if r.ID == id && id != "i07" {
				b, _ := json.Marshal(map[string]string{"text": r.Text}) // the shared record
				return b
			}
		}
		return json.RawMessage(`{"text":"changed"}`)
	})
	qs, err := db.Queued("classify", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var ts []pipeline.Transition
	for i, q := range qs {
		tr := pipeline.Transition{Stage: "classify", ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded,
			Result: pipeline.Result{Output: json.RawMessage(fmt.Sprintf(`{"label":"bug","i":%d}`, i%3))}}
		switch i % 4 {
		case 0:
			tr.CacheKey = fmt.Sprintf("%064x", i%3)
		case 1:
			tr.Outcome, tr.Dead = pipeline.DeadLettered, pipeline.DeadLetter{Class: pipeline.ClassPermanent, Message: "no"}
		case 2:
			continue
		}
		ts = append(ts, tr)
	}
	if err := db.Commit(ts); err != nil {
		t.Fatal(err)
	}
	advance(t, db, "aggregate", func(string) json.RawMessage { return fact("bug") })
	n := 0
	err = db.ForEachItem(func(it pipeline.ItemState) error {
		n++
		loc, err := db.Locate(it.ID)
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(it.Record, loc.Record) {
			t.Errorf("item %s: record %+v, Locate %+v", it.ID, it.Record, loc.Record)
		}
		if !reflect.DeepEqual(it.Outputs, loc.Output) {
			t.Errorf("item %s: outputs %s, Locate %s", it.ID, it.Outputs, loc.Output)
		}
		if it.Stage != loc.Stage || it.Status.String() != loc.Status || (it.Dead == nil) != (loc.Dead == nil) {
			t.Errorf("item %s: at %s %s, Locate %s %s", it.ID, it.Stage, it.Status, loc.Stage, loc.Status)
		}
		return nil
	})
	if err != nil || n != len(rs) {
		t.Fatalf("walked %d items, err %v", n, err)
	}
	done := 0
	err = db.ForEachDone(func(it pipeline.Item) error {
		done++
		loc, err := db.Locate(it.ID)
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(it.Record, loc.Record) || !reflect.DeepEqual(it.Outputs, loc.Output) {
			t.Errorf("done item %s: %+v %s, Locate %+v %s", it.ID, it.Record, it.Outputs, loc.Record, loc.Output)
		}
		return nil
	})
	if err != nil || done == 0 {
		t.Fatalf("%d done items, err %v", done, err)
	}
	for _, stage := range []string{"sanitize", "classify"} {
		err = db.ForEachOutput(stage, func(r pipeline.Record, out json.RawMessage) error {
			loc, err := db.Locate(r.ID)
			if err != nil {
				return err
			}
			if !reflect.DeepEqual(r, loc.Record) || string(out) != string(loc.Output[stage]) {
				t.Errorf("%s output of %s: %+v %s, Locate %+v %s", stage, r.ID, r, out, loc.Record, loc.Output[stage])
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The packed reading took the short way for these records.
	err = db.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketItems).ForEach(func(k, v []byte) error {
			if v[0] != tagPacked {
				return nil
			}
			k2 := keyReader{db: db, tx: tx, in: v[1:], id: k}
			return k2.object(func(string) (bool, error) { return false, k2.skip(0) })
		})
	})
	if err != nil {
		t.Errorf("packed records not read straight: %v", err)
	}
}

// TestFieldNames_recordsReadPacked: a record with every key a Record
// stores (fields, types, the input line) gives its field names from its
// packed bytes, not the long way; the names are its fields. A Record key
// this reader did not know ("line", before recordKeys came from the type)
// sent every record the long way, a full decode, with the right names:
// only this test sees it.
func TestFieldNames_recordsReadPacked(t *testing.T) {
	db := openTest(t)
	r := pipeline.Record{ID: "a", Text: "some text", Line: 7,
		Fields: map[string]string{"app": "x", "n": "3"}, Types: map[string]pipeline.FieldType{"n": pipeline.FieldNumber}}
	if v := reflect.ValueOf(r); slices.ContainsFunc(reflect.VisibleFields(v.Type()), func(f reflect.StructField) bool { return v.FieldByIndex(f.Index).IsZero() }) {
		t.Fatal("the record leaves a key of Record unset: set every one")
	}
	if _, err := db.Ingest([]pipeline.Record{r}); err != nil {
		t.Fatal(err)
	}
	err := db.bolt.View(func(tx *bolt.Tx) error {
		names := map[string]bool{}
		if !db.packedFieldNames(tx, []byte("a"), tx.Bucket(bucketItems).Get([]byte("a")), names) {
			t.Error("the record's field names read the long way")
		}
		if want := map[string]bool{"app": true, "n": true}; !maps.Equal(names, want) {
			t.Errorf("names %v, want %v", names, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestFieldNames_whichDamageFirst: the records and the outputs are
// read side by side, and the outputs of stages with cached answers
// beside the others' (fieldstages.go); the error is the one a reading in
// turn would have met first, whichever read ends first: a damaged record
// before any damaged output, and among outputs the first stage's.
func TestFieldNames_whichDamageFirst(t *testing.T) {
	for _, tc := range []struct {
		name        string
		damage      func(tx *bolt.Tx) error
		item, stage string
	}{
		{"a record before an output", func(tx *bolt.Tx) error {
			if err := tx.Bucket(bucketItems).Put([]byte("b"), []byte{tagRaw, '{', 'x'}); err != nil {
				return err
			}
			return tx.Bucket(outBucket("sanitize")).Put([]byte("c"), []byte{tagRaw, '[', '1', ']'})
		}, "b", ""},
		{"the first stage across walks", func(tx *bolt.Tx) error {
			// classify has cached answers, aggregate not: two walks.
			if _, err := tx.CreateBucketIfNotExists(answersBucket("classify")); err != nil {
				return err
			}
			if err := tx.Bucket(outBucket("classify")).Put([]byte("c"), []byte{tagRaw, '[', '1', ']'}); err != nil {
				return err
			}
			return tx.Bucket(outBucket("aggregate")).Put([]byte("a"), []byte{tagRaw, '[', '2', ']'})
		}, "c", "classify"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 20 { // either read may end first
				db, err := Open(filepath.Join(t.TempDir(), fmt.Sprint(i, ".db")), Options{Stages: testStages})
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close() // not openTest's: its check would find the damage
				queuedAtClassify(t, db, recs("a", "b", "c")...)
				if err := db.bolt.Update(tc.damage); err != nil {
					t.Fatal(err)
				}
				_, _, err = db.FieldNames()
				var damaged *pipeline.DamagedError
				if !errors.As(err, &damaged) || damaged.Item != tc.item || damaged.Stage != tc.stage {
					t.Fatalf("FieldNames: %v, want item %s's damage at %q", err, tc.item, tc.stage)
				}
			}
		})
	}
}
