package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// hexKey is a cache key as the LLM stage makes them: a hex SHA-256.
func hexKey(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// classifyOut is an answer as classify stores it.
func classifyOut(label string, n int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"label":%q,"confidence":0.9,"reason":"the review says so %d","model":"gemini-2.5-flash-lite","usage":{"prompt_tokens":%d,"candidate_tokens":20}}`, label, n, 100+n))
}

// TestDB_CommitStoresAnswersAsBefore: an answer committed with its cache
// key stores its output as the reference encodeOutput writes (the bytes
// a commit stored before it stopped reading the answer back), for a new
// key, a key already answered, a cached answer, a key that is not a hash
// and an output that is not the answer's; and the items' facts fold into
// the tally as their stored outputs read (openTest's Check recounts it).
func TestDB_CommitStoresAnswersAsBefore(t *testing.T) {
	db := openTest(t)
	ids := []string{"new", "same key", "cached", "plain key", "other output", "empty output"}
	if _, err := db.Ingest(recs(ids...)); err != nil {
		t.Fatal(err)
	}
	advance(t, db, "sanitize", jsonOut)
	shared := hexKey("shared question")
	tr := map[string]pipeline.Transition{
		"new":          {CacheKey: hexKey("new"), Result: pipeline.Result{Output: classifyOut("bug", 1), Usage: pipeline.Usage{PromptTokens: 101}}},
		"same key":     {CacheKey: shared, Result: pipeline.Result{Output: classifyOut("ux", 2)}},
		"cached":       {CacheKey: shared, Cached: true, Result: pipeline.Result{Output: classifyOut("ux", 2)}},
		"plain key":    {CacheKey: "not-a-hash", Result: pipeline.Result{Output: classifyOut("praise", 3)}},
		"other output": {CacheKey: shared, Result: pipeline.Result{Output: classifyOut("bug", 4)}},
		"empty output": {CacheKey: hexKey("empty"), Result: pipeline.Result{Output: json.RawMessage(`{}`)}},
	}
	qs, err := db.Queued("classify", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var ts []pipeline.Transition
	for _, q := range qs {
		x := tr[q.Item.ID]
		x.Stage, x.ID, x.Seq, x.Outcome = "classify", q.Item.ID, q.Seq, pipeline.Succeeded
		ts = append(ts, x)
	}
	if err := db.Commit(ts); err != nil {
		t.Fatal(err)
	}
	advance(t, db, "aggregate", func(id string) json.RawMessage { return fact("bug") })
	for _, id := range ids {
		t.Run(id, func(t *testing.T) {
			x := tr[id]
			err := db.view(func(tx *bolt.Tx) error {
				got := tx.Bucket(outBucket("classify")).Get([]byte(id))
				want, err := db.encodeOutput(tx, "classify", []byte(id), x.Result.Output, db.textOf(tx, []byte(id)), x.CacheKey)
				if err != nil {
					return err
				}
				if !bytes.Equal(got, want) {
					t.Errorf("stored % x, encodeOutput % x", got, want)
				}
				out, err := db.output(tx, "classify", []byte(id), db.textOf(tx, []byte(id)))
				if err != nil {
					return err
				}
				if !bytes.Equal(out, x.Result.Output) {
					t.Errorf("output reads %s, want %s", out, x.Result.Output)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// BenchmarkDB_CommitAnswers is classify's commits of a night: 1,000
// answers, each under its own cache key, 50 a commit.
func BenchmarkDB_CommitAnswers(b *testing.B) {
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		db, err := Open(fmt.Sprintf("%s/c%d.db", b.TempDir(), i), Options{Stages: testStages, NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := db.Ingest(nightRecs(0, 1000)); err != nil {
			b.Fatal(err)
		}
		advance(b, db, "sanitize", jsonOut)
		qs, err := db.Queued("classify", 0, 1000)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for len(qs) > 0 {
			n := min(50, len(qs))
			ts := make([]pipeline.Transition, n)
			for j, q := range qs[:n] {
				ts[j] = pipeline.Transition{Stage: "classify", ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded,
					CacheKey: hexKey(q.Item.ID), Result: pipeline.Result{Output: classifyOut("bug", j), Usage: pipeline.Usage{PromptTokens: 100}}}
			}
			if err := db.Commit(ts); err != nil {
				b.Fatal(err)
			}
			qs = qs[n:]
		}
		b.StopTimer()
		db.Close()
		b.StartTimer()
	}
}
