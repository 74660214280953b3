package store

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// An output equal to its cached answer refers to it by the first quarter
// (8 bytes) of its 32-byte key. A second key sharing that quarter (a hash
// collision, made here by hand) is not cached, since it could sort before
// the first and be read in its place: its output is stored whole. Every
// output reads back, verify finds nothing, and the answers keep their
// whole keys.
func TestDB_OutputsReferToAnswersByAQuarterOfTheirKey(t *testing.T) {
	db := openTest(t)
	ids := []string{"a", "b", "c", "d", "e"}
	qs := queuedAtClassify(t, db, recs(ids...)...)
	half := strings.Repeat("ab", 16)
	keys := map[string]string{
		"a": half + strings.Repeat("01", 16), // unique
		"b": half + strings.Repeat("01", 16), // a's twin: the same answer
		"c": strings.Repeat("cd", 16) + strings.Repeat("02", 16),
		"d": strings.Repeat("cd", 8) + strings.Repeat("00", 24), // shares c's first quarter, sorts before it
		"e": "not-a-hash",
	}
	wantRef := map[string]int{"a": 1 + shortRefLen, "b": 1 + shortRefLen, "c": 1 + shortRefLen, "e": 1 + len("not-a-hash")}
	answer := func(id string) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"label":"praise","reason":"answer under %s"}`, keys[id][:8]))
	}
	var ts []pipeline.Transition
	for _, q := range qs {
		id := q.Item.ID
		ts = append(ts, pipeline.Transition{Stage: "classify", ID: id, Seq: q.Seq, Outcome: pipeline.Succeeded,
			Result: pipeline.Result{Output: answer(id)}, CacheKey: keys[id], Cached: id == "b"})
	}
	// c's answer is cached first, so d's key joins a bucket that holds
	// one beginning with the same quarter.
	if err := db.Commit(ts[2:3]); err != nil {
		t.Fatal(err)
	}
	if err := db.Commit(append(ts[:2], ts[3:]...)); err != nil {
		t.Fatal(err)
	}
	if err := db.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(outBucket("classify"))
		for id, n := range wantRef {
			if v := b.Get([]byte(id)); len(v) != n || v[0] != tagAnswer {
				t.Errorf("%s: out/classify holds % x, want a reference of %d bytes", id, v, n)
			}
		}
		if v := b.Get([]byte("d")); len(v) == 0 || v[0] == tagAnswer {
			t.Errorf("d: out/classify holds % x, want its output", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got := stageOutputs(t, db, "classify")
	for _, id := range ids {
		if got[id] != string(answer(id)) {
			t.Errorf("%s: output %s, want %s", id, got[id], answer(id))
		}
	}
	stored := map[string]bool{}
	if err := db.ForEachAnswer("classify", func(key string, _ pipeline.Result) error {
		stored[key] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for id, k := range keys {
		if stored[k] != (id != "d") {
			t.Errorf("the answer of %s under its whole key %s: %v, want %v", id, k, stored[k], id != "d")
		}
	}
}

// A key that is not a hash but begins with the quarter of a hash key an
// output refers to by (made by hand: a cache key is a hex hash) would
// sort before that key and be read in its place: it is not cached, and
// the output still reads as its own answer.
func TestDB_KeyOfOtherLengthSharingQuarterNotCached(t *testing.T) {
	db := openTest(t)
	qs := queuedAtClassify(t, db, recs("a", "b")...)
	half := strings.Repeat("ab", answerRefLen)
	keys := map[string]string{
		"a": half + strings.Repeat("ff", 32-answerRefLen),
		"b": string(answerKey(half + strings.Repeat("00", 32-answerRefLen))[:shortRefLen]) + "\x00", // sorts before a's
	}
	answer := func(id string) json.RawMessage {
		return json.RawMessage(`{"label":"praise","reason":"the answer of ` + id + `"}`)
	}
	for _, q := range qs {
		id := q.Item.ID
		if err := db.Commit([]pipeline.Transition{{Stage: "classify", ID: id, Seq: q.Seq, Outcome: pipeline.Succeeded,
			Result: pipeline.Result{Output: answer(id)}, CacheKey: keys[id]}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := storedLen(t, db, "out/classify", "a"); n != 1+shortRefLen {
		t.Fatalf("a's output is %d bytes, want a reference by a quarter of its key", n)
	}
	for _, id := range []string{"a", "b"} {
		loc, err := db.Locate(id)
		if err != nil || string(loc.Output["classify"]) != string(answer(id)) {
			t.Errorf("%s: output %s, %v; want %s", id, loc.Output["classify"], err, answer(id))
		}
	}
	if _, ok, err := db.CachedAnswer("classify", keys["b"]); ok || err != nil {
		t.Errorf("b's key: cached %v, %v; want not cached", ok, err)
	}
}

// Two keys of a file written before format 6 may share their first 8
// bytes (a chance of 2^-64 a pair: made here by hand), since outputs then
// referred by 16: an output equal to either answer refers to it by half
// its key, the longer reference that is unique, and reads back as it.
func TestDB_ReferenceLengthensWhenTheQuarterIsShared(t *testing.T) {
	db := openTest(t)
	if _, err := db.Ingest(recs("x", "y")); err != nil {
		t.Fatal(err)
	}
	advance(t, db, "sanitize", jsonOut)
	quarter := strings.Repeat("ef", shortRefLen)
	keys := map[string]string{
		"x": quarter + strings.Repeat("01", 32-shortRefLen),
		"y": quarter + strings.Repeat("02", 32-shortRefLen),
	}
	answer := func(id string) json.RawMessage {
		return json.RawMessage(`{"label":"praise","reason":"the answer of ` + id + `"}`)
	}
	// Both answers in place as a format 5 file could hold them.
	if err := db.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(answersBucket("classify"))
		if err != nil {
			return err
		}
		for id, k := range keys {
			v, err := db.encodeAnswer(tx, pipeline.Result{Output: answer(id)})
			if err != nil {
				return err
			}
			if err := b.Put(answerKey(k), v); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	qs, err := db.Queued("classify", 0, 10)
	if err != nil || len(qs) != 2 {
		t.Fatalf("queued %d, %v", len(qs), err)
	}
	var ts []pipeline.Transition
	for _, q := range qs {
		id := q.Item.ID
		ts = append(ts, pipeline.Transition{Stage: "classify", ID: id, Seq: q.Seq, Outcome: pipeline.Succeeded,
			Result: pipeline.Result{Output: answer(id)}, CacheKey: keys[id], Cached: true})
	}
	if err := db.Commit(ts); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"x", "y"} {
		if n := storedLen(t, db, "out/classify", id); n != 1+answerRefLen {
			t.Errorf("%s's output is %d bytes, want a reference by half its key", id, n)
		}
		loc, err := db.Locate(id)
		if err != nil || string(loc.Output["classify"]) != string(answer(id)) {
			t.Errorf("%s: output %s, %v; want %s", id, loc.Output["classify"], err, answer(id))
		}
	}
}
