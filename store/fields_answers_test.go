package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// cacheKey is a question's cache key as the runner makes them: a hash.
func cacheKey(n int) string {
	h := sha256.Sum256([]byte(fmt.Sprint("question ", n)))
	return hex.EncodeToString(h[:])
}

// TestFieldNames_answersOnceInKeyOrder: classify outputs that refer to
// cached answers name the answers' keys, read once per answer after the
// walk, exactly as the outputs' own keys: answers shared by many items,
// an answer with a key that is its first item's id (answers are packed
// without an item, so it stays that key for every item), an answer in
// format 1's JSON (read the long way, for every item that refers to it),
// and outputs of their own beside them.
func TestFieldNames_answersOnceInKeyOrder(t *testing.T) {
	db := openTest(t)
	qs := queuedAtClassify(t, db, recs(numberedIDs("a%02d", 60)...)...)
	var ts []pipeline.Transition
	for i, q := range qs { // in id order: a04 is the first of answer 99
		out := fmt.Sprintf(`{"label":"bug","shared%d":true,"confidence":0.5}`, i%5)
		key := cacheKey(i % 5)
		switch {
		case i%5 == 4:
			// The first item of this answer names a key after itself.
			out, key = `{"label":"ux","a04":1}`, cacheKey(99)
		case i%5 == 3:
			// Rewritten below as a format 1 file stored it: it reads the
			// long way for every item that refers to it.
			out, key = `{"label":"ux","once":0,"also":[1]}`, cacheKey(98)
		case i%7 == 0 && i%5 != 4:
			out, key = fmt.Sprintf(`{"label":"praise","own%d":1}`, i), ""
		}
		ts = append(ts, pipeline.Transition{Stage: "classify", ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded,
			Result: pipeline.Result{Output: json.RawMessage(out)}, CacheKey: key})
	}
	if err := db.Commit(ts); err != nil {
		t.Fatal(err)
	}

	// Answer 98 as a format 1 file stored it (JSON): not packed, so its
	// keys read the long way.
	rewritten := 0
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(answersBucket("classify"))
		return b.ForEach(func(k, v []byte) error {
			res, err := db.decodeAnswer(tx, v)
			if err != nil || !strings.Contains(string(res.Output), "once") {
				return err
			}
			rewritten++
			j, _ := json.Marshal(cachedAnswer{Output: res.Output})
			return b.Put(k, j)
		})
	})
	if err != nil || rewritten != 1 {
		t.Fatalf("rewrote %d answers as JSON (%v), want 1", rewritten, err)
	}

	want := map[string]bool{}
	err = db.ForEachItem(func(is pipeline.ItemState) error {
		var m map[string]json.RawMessage
		if out, ok := is.Outputs["classify"]; ok {
			if err := json.Unmarshal(out, &m); err != nil {
				return err
			}
		}
		for k := range m {
			want[k] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_, outputs, err := db.FieldNames()
	if err != nil {
		t.Fatal(err)
	}
	got := outputs["classify"]
	if !maps.Equal(got, want) {
		t.Errorf("classify's names %v, want those of its outputs %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	for _, k := range []string{"shared0", "shared2", "own7", "a04", "also", "once", "label"} {
		if !got[k] {
			t.Errorf("no %q among %v", k, slices.Sorted(maps.Keys(got)))
		}
	}
}
