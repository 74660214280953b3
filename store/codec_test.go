package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

func TestDB_encodeRecord(t *testing.T) {
	db := openTest(t)
	long := strings.Repeat("a long text that is the item's own ", 3)
	ctx := packCtx{id: "r1", text: func() string { return long }}
	tests := []struct {
		name string
		in   string
		raw  bool // kept as given, not packed
	}{
		{name: "classify output", in: `{"label":"praise","confidence":0.65,"reason":"mentions \"amazing\", which suggests praise","model":"gemini-2.5-flash","usage":{"prompt_tokens":137,"total_tokens":165}}`},
		{name: "sanitize output that changed nothing", in: `{"text":"` + long + `","chars":105,"truncated":false,"original_chars":105,"changes":[]}`},
		{name: "the item's id", in: `{"id":"r1","x":["r1","r2"]}`},
		{name: "the item's text cut short", in: `{"text":"` + long[:40] + `","chars":40,"truncated":true}`},
		{name: "numbers", in: `[0,1,-1,1.5,1e9,18446744073709551615,18446744073709551616,-0,0.0]`},
		{name: "null true false", in: `[null,true,false,{},[],""]`},
		{name: "escapes", in: `{"s":"a\u003cb\u0026c\n\t\"\\é😀"}`},
		{name: "a string past the dict's length", in: `"` + strings.Repeat("x", dictMaxLen+1) + `"`},
		{name: "nested", in: `{"a":{"b":{"c":[1,[2,[3]]]}}}`},
		{name: "whitespace stays as given", in: `{ "a": 1 }`, raw: true},
		{name: "an escape encoding/json does not write", in: `"\/"`, raw: true},
		{name: "not JSON", in: `{"a":`, raw: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var enc, dec []byte
			err := db.bolt.Update(func(tx *bolt.Tx) error {
				var err error
				if enc, err = db.encodeRecord(tx, []byte(tt.in), ctx); err != nil {
					return err
				}
				dec, err = db.decodeRecord(tx, enc, ctx)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if string(dec) != tt.in {
				t.Errorf("round trip = %s, want %s", dec, tt.in)
			}
			if got := enc[0] == tagRaw; got != tt.raw {
				t.Errorf("kept raw = %v, want %v (%d bytes from %d)", got, tt.raw, len(enc), len(tt.in))
			}
			if !tt.raw && len(tt.in) > 40 && len(enc) >= len(tt.in) {
				t.Errorf("packed %d bytes into %d", len(tt.in), len(enc))
			}
		})
	}
}

// TestDB_dictAfterReopen: dict ids written by one handle read back
// through another, and a rolled-back id never reaches the cache.
func TestDB_dictAfterReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.db")
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	_ = db.bolt.Update(func(tx *bolt.Tx) error {
		_, _, err := db.dict.intern(tx, "rolled-back")
		if err != nil {
			t.Fatal(err)
		}
		return errors.New("roll back")
	})
	if _, ok := db.dict.id("rolled-back"); ok {
		t.Error("an id of a rolled-back transaction is cached")
	}
	in := `{"label":"praise","app":"budget-buddy"}`
	var enc []byte
	if err := db.bolt.Update(func(tx *bolt.Tx) error {
		enc, err = db.encodeRecord(tx, []byte(in), packCtx{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, ro := range []bool{false, true} {
		db, err := Open(path, Options{Stages: testStages, ReadOnly: ro})
		if err != nil {
			t.Fatal(err)
		}
		_ = db.bolt.View(func(tx *bolt.Tx) error {
			got, err := db.decodeRecord(tx, enc, packCtx{})
			if err != nil || string(got) != in {
				t.Errorf("read-only %v: %s, %v; want %s", ro, got, err, in)
			}
			return nil
		})
		db.Close()
	}
}

// TestDB_answerStoredOnce: an output equal to its cached answer is a
// reference to it, read back whole by every reader; a second answer for
// the key keeps the first and stores its own output inline.
func TestDB_answerStoredOnce(t *testing.T) {
	db := openTest(t)
	key := strings.Repeat("ab", 32)
	if _, err := db.Ingest([]pipeline.Record{{ID: "a", Text: "same"}, {ID: "b", Text: "same"}, {ID: "c", Text: "same"}}); err != nil {
		t.Fatal(err)
	}
	advance(t, db, "sanitize", jsonOut)
	first := json.RawMessage(`{"label":"praise","reason":"first answer"}`)
	second := json.RawMessage(`{"label":"bug","reason":"second answer"}`)
	qs, err := db.Queued("classify", 0, 10)
	if err != nil || len(qs) != 3 {
		t.Fatalf("queued %d, %v", len(qs), err)
	}
	ts := []pipeline.Transition{
		{Stage: "classify", ID: "a", Seq: qs[0].Seq, Outcome: pipeline.Succeeded, Result: pipeline.Result{Output: first}, CacheKey: key},
		{Stage: "classify", ID: "b", Seq: qs[1].Seq, Outcome: pipeline.Succeeded, Result: pipeline.Result{Output: first}, CacheKey: key, Cached: true},
		{Stage: "classify", ID: "c", Seq: qs[2].Seq, Outcome: pipeline.Succeeded, Result: pipeline.Result{Output: second}, CacheKey: key},
	}
	if err := db.Commit(ts); err != nil {
		t.Fatal(err)
	}
	_ = db.bolt.View(func(tx *bolt.Tx) error {
		out := tx.Bucket(outBucket("classify"))
		for id, ref := range map[string]bool{"a": true, "b": true, "c": false} {
			if got := out.Get([]byte(id))[0] == tagAnswer; got != ref {
				t.Errorf("out/classify %s is a reference: %v, want %v", id, got, ref)
			}
		}
		return nil
	})
	for id, want := range map[string]json.RawMessage{"a": first, "b": first, "c": second} {
		loc, err := db.Locate(id)
		if err != nil || string(loc.Output["classify"]) != string(want) {
			t.Errorf("Locate(%s) classify = %s, %v; want %s", id, loc.Output["classify"], err, want)
		}
	}
	res, ok, err := db.CachedAnswer("classify", key)
	if err != nil || !ok || string(res.Output) != string(first) {
		t.Errorf("CachedAnswer = %s %v %v, want the first answer", res.Output, ok, err)
	}
	n := 0
	if err := db.ForEachAnswer("classify", func(k string, _ pipeline.Result) error {
		if k != key {
			t.Errorf("ForEachAnswer key %q, want %q", k, key)
		}
		n++
		return nil
	}); err != nil || n != 1 {
		t.Errorf("ForEachAnswer: %d answers, %v", n, err)
	}
	if p, err := db.Check(); err != nil || len(p) > 0 {
		t.Errorf("Check: %v %v", p, err)
	}
}

func TestAnswerKey(t *testing.T) {
	for _, k := range []string{strings.Repeat("0f", 32), "k1", strings.Repeat("x", 32), strings.Repeat("AB", 32), strings.Repeat("zz", 32)} {
		if got := answerKeyString(answerKey(k)); got != k {
			t.Errorf("answerKeyString(answerKey(%q)) = %q", k, got)
		}
	}
	if n := len(answerKey(strings.Repeat("0f", 32))); n != 32 {
		t.Errorf("a hex SHA-256 key takes %d bytes, want 32", n)
	}
}

// TestDB_Ingest_editKeepsOutputs: an output kept across an edit of the
// text (no stage that passed reads it) still reads as it was written,
// though it was packed against the old text.
func TestDB_Ingest_editKeepsOutputs(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "p.db"), Options{Stages: []StageDef{{Name: "tag", Reads: []string{"app"}}, {Name: "classify"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	old := "the original text of the item"
	if _, err := db.Ingest([]pipeline.Record{{ID: "a", Text: old, Fields: map[string]string{"app": "x"}}}); err != nil {
		t.Fatal(err)
	}
	out := json.RawMessage(`{"echo":"` + old + `","cut":"` + old[:12] + `"}`)
	advance(t, db, "tag", func(string) json.RawMessage { return out })
	if _, err := db.Ingest([]pipeline.Record{{ID: "a", Text: "an edited text", Fields: map[string]string{"app": "x"}}}); err != nil {
		t.Fatal(err)
	}
	loc, err := db.Locate("a")
	if err != nil || string(loc.Output["tag"]) != string(out) {
		t.Errorf("out/tag after the edit = %s, %v; want %s", loc.Output["tag"], err, out)
	}
}

// TestDB_decodeRecord_damaged: a record cut short or with a byte
// changed reads as an error or as some JSON, never a panic.
func TestDB_decodeRecord_damaged(t *testing.T) {
	db := openTest(t)
	in := `{"label":"praise","n":[1,2.5,null,true],"s":"a long enough string to stay inline, past the dict"}`
	_ = db.bolt.Update(func(tx *bolt.Tx) error {
		enc, err := db.encodeRecord(tx, []byte(in), packCtx{})
		if err != nil || enc[0] != tagPacked {
			t.Fatalf("encode: %v %q", err, enc)
		}
		for i := 1; i < len(enc); i++ {
			if _, err := db.decodeRecord(tx, enc[:i], packCtx{}); err == nil {
				t.Errorf("a record cut to %d of %d bytes read without error", i, len(enc))
			}
			bad := bytes.Clone(enc)
			bad[i] ^= 0xff
			_, _ = db.decodeRecord(tx, bad, packCtx{}) // must not panic
		}
		return nil
	})
}
