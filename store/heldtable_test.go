package store

import (
	"encoding/json"
	"fmt"
	"maps"
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
	if db.held.m["classify"].t == nil {
		t.Fatal("FieldNames kept no table of classify's answers")
	}
	withHeld := classifyOutputs(t, db)
	if len(db.held.m) != 0 {
		t.Errorf("the walk left %d tables held, want it to take classify's", len(db.held.m))
	}
	if own := classifyOutputs(t, db); !maps.Equal(withHeld, own) || len(own) != 40 {
		t.Errorf("a walk with the kept table read\n%v\na walk reading its own\n%v", withHeld, own)
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
