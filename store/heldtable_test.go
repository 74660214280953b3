package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// answeredAtClassify is a DB whose n classify outputs refer to five
// cached answers.
func answeredAtClassify(t *testing.T, n int) *DB {
	t.Helper()
	db := openTest(t)
	qs := queuedAtClassify(t, db, recs(numberedIDs("a%03d", n)...)...)
	var ts []pipeline.Transition
	for i, q := range qs {
		out := fmt.Sprintf(`{"label":"bug","shared%d":true}`, i%5)
		ts = append(ts, pipeline.Transition{Stage: "classify", ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded,
			Result: pipeline.Result{Output: json.RawMessage(out)}, CacheKey: cacheKey(i % 5)})
	}
	if err := db.Commit(ts); err != nil {
		t.Fatal(err)
	}
	return db
}

// classifyOutputs are the classify outputs a walk of every item reads,
// by id.
func classifyOutputs(t *testing.T, db *DB) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := db.ForEachItem(func(is pipeline.ItemState) error {
		got[is.Record.ID] = string(is.Outputs["classify"])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestFieldNames_keepsAnswersForTheWalk: reading the field names keeps
// the table of the answers it read for the walk after it, which takes it
// and reads the same outputs as a walk that reads its own.
func TestFieldNames_keepsAnswersForTheWalk(t *testing.T) {
	aheadSizes(t, 1<<16, 1<<10, 16<<20, 64<<20)
	db := answeredAtClassify(t, 40)
	if _, _, err := db.FieldNames(); err != nil {
		t.Fatal(err)
	}
	held := db.held.m["classify"].t
	if held == nil {
		t.Fatal("FieldNames kept no table of classify's answers")
	}
	// Two answers swapped in memory only: a walk that reads them swapped
	// read the kept table, not the file.
	a, b := held.ents[0], held.ents[1]
	va := held.blocks[a.block][a.val:a.end]
	vb := held.blocks[b.block][b.val:b.end]
	if len(va) != len(vb) || bytes.Equal(va, vb) {
		t.Fatalf("the first two answers are %q and %q: want two of one length", va, vb)
	}
	tmp := bytes.Clone(va)
	copy(va, vb)
	copy(vb, tmp)
	withHeld := classifyOutputs(t, db)
	if len(db.held.m) != 0 {
		t.Errorf("the walk left %d tables held, want it to take classify's", len(db.held.m))
	}
	own := classifyOutputs(t, db)
	if len(own) != 40 || len(withHeld) != 40 {
		t.Fatalf("walks read %d and %d classify outputs, want 40", len(withHeld), len(own))
	}
	changed := 0
	for id := range own {
		if withHeld[id] != own[id] {
			changed++
		}
	}
	// Items i and i+5 share an answer: two of the five answers swapped
	// change 16 of 40 outputs.
	if changed != 16 {
		t.Errorf("the walk after FieldNames read %d of 40 outputs otherwise than a walk of its own, want the 16 of the two swapped answers", changed)
	}
}

// TestHeldFor_countsAgainstTheWalksBudget: a kept table counts against
// the walk's table budget, and is not used where it would not fit.
func TestHeldFor_countsAgainstTheWalksBudget(t *testing.T) {
	aheadSizes(t, 1<<16, 1<<10, 16<<20, 64<<20)
	db := answeredAtClassify(t, 40)
	for _, tc := range []struct {
		name   string
		before int // w.tables before the take
		used   bool
	}{
		{"fits", 0, true},
		{"fills the budget", -1, true},
		{"one byte over", -2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := db.FieldNames(); err != nil {
				t.Fatal(err)
			}
			held := db.held.m["classify"].t
			if held == nil {
				t.Fatal("FieldNames kept no table")
			}
			err := db.bolt.View(func(tx *bolt.Tx) error {
				w := &walker{db: db, tx: tx, tables: tc.before}
				switch tc.before {
				case -1:
					w.tables = tableBytes - held.bytes()
				case -2:
					w.tables = tableBytes - held.bytes() + 1
				}
				start := w.tables
				got := heldFor("classify", w)
				if (got != nil) != tc.used {
					t.Errorf("heldFor used the table: %v, want %v", got != nil, tc.used)
				}
				if want := start + map[bool]int{true: held.bytes()}[tc.used]; w.tables != want {
					t.Errorf("the walk's tables count %d bytes, want %d", w.tables, want)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestFieldNames_failedKeepsNoTable: a reading of the names that fails
// keeps no table: no walk follows it to take one.
func TestFieldNames_failedKeepsNoTable(t *testing.T) {
	aheadSizes(t, 1<<16, 1<<10, 16<<20, 64<<20)
	db := answeredAtClassify(t, 40)
	put := func(v []byte) {
		t.Helper()
		if err := db.bolt.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketItems).Put([]byte("a000"), v) }); err != nil {
			t.Fatal(err)
		}
	}
	var record []byte
	_ = db.bolt.View(func(tx *bolt.Tx) error {
		record = bytes.Clone(tx.Bucket(bucketItems).Get([]byte("a000")))
		return nil
	})
	put([]byte("{damaged"))
	_, _, err := db.FieldNames()
	put(record) // the file as it was, for the check on cleanup
	if err == nil {
		t.Fatal("FieldNames read a damaged record without an error")
	}
	if len(db.held.m) != 0 {
		t.Errorf("a failed FieldNames left %d tables held", len(db.held.m))
	}
}

// TestFieldNames_keptAnswersStaleAfterCommit: a commit between the field
// names and the walk makes the kept table stale: the walk reads the
// answers as they are.
func TestFieldNames_keptAnswersStaleAfterCommit(t *testing.T) {
	aheadSizes(t, 1<<16, 1<<10, 16<<20, 64<<20)
	db := answeredAtClassify(t, 40)
	if _, _, err := db.FieldNames(); err != nil {
		t.Fatal(err)
	}
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(answersBucket("classify"))
		return b.ForEach(func(k, _ []byte) error {
			j, _ := json.Marshal(cachedAnswer{Output: json.RawMessage(`{"label":"changed"}`)})
			return b.Put(k, j)
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	for id, out := range classifyOutputs(t, db) {
		if out != `{"label":"changed"}` {
			t.Fatalf("item %s reads %s after the answers changed: the stale table was used", id, out)
		}
	}
	if len(db.held.m) != 0 {
		t.Errorf("%d tables still held after the walk", len(db.held.m))
	}
}
