package store

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// An answer whose output carries the usage it was billed (classify's
// "usage") keeps that usage once, as a part of its output (tagUsageIn);
// one whose output does not, or carries another usage, keeps it beside
// the output (tagCached). Every answer reads back with its output and
// usage, so do the outputs that refer to it, and verify finds nothing.
func TestDB_AnswerKeepsTheUsageItsOutputCarriesOnce(t *testing.T) {
	billed := pipeline.Usage{PromptTokens: 125, CandidateTokens: 21, TotalTokens: 146}
	withUsage := func(u pipeline.Usage) json.RawMessage {
		b, err := json.Marshal(struct {
			Label  string         `json:"label"`
			Reason string         `json:"reason"`
			Model  string         `json:"model"`
			Usage  pipeline.Usage `json:"usage"`
		}{"bug", `mentions "crash", which suggests bug`, "gemini-2.5-flash", u})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	long := json.RawMessage(`{"label":"bug","reason":"` + proseOf(9, 6000) + `","usage":{"prompt_tokens":125,"candidate_tokens":21,"total_tokens":146}}`)
	for _, tc := range []struct {
		name string
		out  json.RawMessage
		use  pipeline.Usage
		tag  byte
	}{
		{"output carries the usage", withUsage(billed), billed, tagUsageIn},
		{"output carries another usage", withUsage(pipeline.Usage{PromptTokens: 9}), billed, tagCached},
		{"output without usage", json.RawMessage(`{"label":"bug"}`), billed, tagCached},
		{"no usage billed", json.RawMessage(`{"label":"bug","groups":{}}`), pipeline.Usage{}, tagUsageIn},
		{"a long output, deflated", long, billed, tagCached},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openTest(t)
			qs := queuedAtClassify(t, db, recs("a", "b")...)
			key := strings.Repeat("5a", 32)
			res := pipeline.Result{Output: tc.out, Usage: tc.use}
			var ts []pipeline.Transition
			for _, q := range qs {
				ts = append(ts, pipeline.Transition{Stage: "classify", ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded,
					Result: res, CacheKey: key, Cached: q.Item.ID == "b"})
			}
			if err := db.Commit(ts); err != nil {
				t.Fatal(err)
			}
			var stored []byte
			if err := db.view(func(tx *bolt.Tx) error {
				stored = append(stored, tx.Bucket(answersBucket("classify")).Get(answerKey(key))...)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if len(stored) == 0 || stored[0] != tc.tag {
				t.Fatalf("the answer is stored as % x, want tag %d", stored, tc.tag)
			}
			got, ok, err := db.CachedAnswer("classify", key)
			if err != nil || !ok || string(got.Output) != string(tc.out) || got.Usage != tc.use {
				t.Errorf("cached answer %s %+v (%v, %v), want %s %+v", got.Output, got.Usage, ok, err, tc.out, tc.use)
			}
			n := 0
			if err := db.ForEachAnswer("classify", func(k string, r pipeline.Result) error {
				n++
				if k != key || string(r.Output) != string(tc.out) || r.Usage != tc.use {
					t.Errorf("ForEachAnswer: %s %s %+v", k, r.Output, r.Usage)
				}
				return nil
			}); err != nil || n != 1 {
				t.Errorf("ForEachAnswer: %d answers, %v", n, err)
			}
			for _, id := range []string{"a", "b"} {
				loc, err := db.Locate(id)
				if err != nil || string(loc.Output["classify"]) != string(tc.out) {
					t.Errorf("%s: classify output %s, %v", id, loc.Output["classify"], err)
				}
			}
			if problems, err := db.Check(); err != nil || len(problems) > 0 {
				t.Errorf("verify: %v %v", problems, err)
			}
		})
	}
}

// The usage of a tagUsageIn answer is found by an offset and a length in
// its output's record; a pair pointing outside it is an error, not a
// read past the record or a usage made of the wrong bytes.
func TestSplitUsageIn_damaged(t *testing.T) {
	out := []byte{tagPacked, pObject, 0} // {}
	for _, tc := range []struct {
		name string
		v    []byte
		ok   bool
	}{
		{"whole", append([]byte{tagUsageIn, 1, 2}, out...), true},
		{"no offset", []byte{tagUsageIn}, false},
		{"no length", []byte{tagUsageIn, 1}, false},
		{"offset on the tag", append([]byte{tagUsageIn, 0, 2}, out...), false},
		{"empty usage", append([]byte{tagUsageIn, 1, 0}, out...), false},
		{"past the end", append([]byte{tagUsageIn, 2, 2}, out...), false},
		{"offset past the end", append([]byte{tagUsageIn, 9, 1}, out...), false},
		{"overflowing length", append([]byte{tagUsageIn, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, out...), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			usage, oe, err := splitAnswer(tc.v)
			if (err == nil) != tc.ok {
				t.Fatalf("splitAnswer(% x): %v, want ok %v", tc.v, err, tc.ok)
			}
			if tc.ok && (string(usage) != string(out) || string(oe) != string(out)) {
				t.Errorf("usage % x, output % x; want both % x", usage, oe, out)
			}
			if _, err := answerOutputRecord(tc.v); (err == nil) != tc.ok {
				t.Errorf("answerOutputRecord: %v, want ok %v", err, tc.ok)
			}
		})
	}
}
