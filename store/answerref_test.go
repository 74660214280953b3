package store

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// An output equal to its cached answer refers to it by the first half of
// its 32-byte key. A second key sharing that half (a hash collision, made
// here by hand) is not cached, since it could sort before the first and
// be read in its place: its output is stored whole. Every output reads
// back, verify finds nothing, and the answers keep their whole keys.
func TestDB_OutputsReferToAnswersByHalfTheirKey(t *testing.T) {
	db := openTest(t)
	ids := []string{"a", "b", "c", "d", "e"}
	if _, err := db.Ingest(recs(ids...)); err != nil {
		t.Fatal(err)
	}
	advance(t, db, "sanitize", jsonOut)
	qs, err := db.Queued("classify", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	half := strings.Repeat("ab", 16)
	keys := map[string]string{
		"a": half + strings.Repeat("01", 16), // unique
		"b": half + strings.Repeat("01", 16), // a's twin: the same answer
		"c": strings.Repeat("cd", 16) + strings.Repeat("02", 16),
		"d": strings.Repeat("cd", 16) + strings.Repeat("00", 16), // shares c's first half, sorts before it
		"e": "not-a-hash",
	}
	wantRef := map[string]int{"a": 1 + answerRefLen, "b": 1 + answerRefLen, "c": 1 + answerRefLen, "e": 1 + len("not-a-hash")}
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
	// one beginning with the same half.
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
	got := map[string]string{}
	if err := db.ForEachOutput("classify", func(rec pipeline.Record, out json.RawMessage) error {
		got[rec.ID] = string(out)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
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
