package store

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// A cached answer that cannot be read makes the runner call the API
// ("answer cache unreadable: calling instead"); the fresh answer must
// replace the damaged one, or every later item with that key pays again.
func TestDB_Commit_healsDamagedAnswer(t *testing.T) {
	db := openTest(t)
	key := strings.Repeat("cd", 32)
	if _, err := db.Ingest([]pipeline.Record{{ID: "a", Text: "same text"}}); err != nil {
		t.Fatal(err)
	}
	advance(t, db, "sanitize", jsonOut)
	if err := db.bolt.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(answersBucket("classify"))
		if err != nil {
			return err
		}
		return b.Put(answerKey(key), []byte{tagCached, 0x7f}) // damaged
	}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.CachedAnswer("classify", key); err == nil {
		t.Fatal("the damaged answer reads without error")
	}
	qs, err := db.Queued("classify", 0, 10)
	if err != nil || len(qs) != 1 {
		t.Fatalf("queued %d, %v", len(qs), err)
	}
	fresh := json.RawMessage(`{"label":"praise","reason":"fresh"}`)
	if err := db.Commit([]pipeline.Transition{{Stage: "classify", ID: "a", Seq: qs[0].Seq,
		Outcome: pipeline.Succeeded, Result: pipeline.Result{Output: fresh}, CacheKey: key}}); err != nil {
		t.Fatal(err)
	}
	res, ok, err := db.CachedAnswer("classify", key)
	if err != nil || !ok || string(res.Output) != string(fresh) {
		t.Errorf("CachedAnswer after a fresh answer = %s %v %v: the damaged answer stays, every twin pays again", res.Output, ok, err)
	}
}
