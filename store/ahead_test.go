package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// TestAnswersAhead_readsAsLookups: answers read ahead are the answers
// each output's reference finds looked up alone, in chunks of every
// size: shared answers, outputs of their own between them, a reference
// by a whole key (not a hash), a missing answer, and a byte budget the
// chunks overrun (the rest is looked up, and the next chunk is smaller).
// ForEachItem and ForEachOutput read the same outputs as a lookup per
// item.
func TestAnswersAhead_readsAsLookups(t *testing.T) {
	db := openTest(t)
	qs := queuedAtClassify(t, db, recs(numberedIDs("i%03d", 150)...)...)
	var ts []pipeline.Transition
	for i, q := range qs {
		out := fmt.Sprintf(`{"label":"bug","answer":%d,"pad":"%0*d"}`, i%23, 10+i%23*7, 0)
		key := cacheKey(i % 23)
		switch {
		case i%11 == 0:
			out, key = fmt.Sprintf(`{"label":"praise","own":%d}`, i), ""
		case i%23 == 5:
			key = "not-a-hash" // referred to by the whole key
		}
		ts = append(ts, pipeline.Transition{Stage: "classify", ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded,
			Result: pipeline.Result{Output: json.RawMessage(out)}, CacheKey: key})
	}
	if err := db.Commit(ts); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	if err := db.ForEachOutput("classify", func(rec pipeline.Record, out json.RawMessage) error {
		want[rec.ID] = string(out)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// The answer of i%23 == 7 goes missing: its outputs then fail to read.
	if err := db.bolt.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(answersBucket("classify")).Delete(answerKey(cacheKey(7)))
	}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name           string
		size, min, max int
		wantLookups    bool // some answers do not fit and are looked up
	}{
		{"one chunk", 1 << 16, 1 << 10, 16 << 20, false},
		{"chunks of 1", 1, 1, 16 << 20, false},
		{"chunks of 7", 7, 1, 16 << 20, false},
		{"bytes run out", 40, 4, 200, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func(n, m, b int) { aheadMax, aheadMin, aheadBytes = n, m, b }(aheadMax, aheadMin, aheadBytes)
			aheadMax, aheadMin, aheadBytes = tc.size, tc.min, tc.max
			refs, lookups, missing := 0, 0, 0
			err := db.walk(func(tx *bolt.Tx, w *walker) error {
				p := readAhead(tx, "classify", w)
				answers := tx.Bucket(answersBucket("classify"))
				return tx.Bucket(outBucket("classify")).ForEach(func(k, v []byte) error {
					a, found := p.answer(k, v)
					if v[0] != tagAnswer {
						if found {
							t.Errorf("%s: an output of its own reads as an answer read ahead", k)
						}
						return nil
					}
					refs++
					want := referredAnswer(answers, v[1:])
					if want == nil {
						missing++
					}
					if !found {
						lookups++
						return nil
					}
					if !bytes.Equal(a, want) {
						t.Errorf("%s: read ahead %q, looked up %q", k, a, want)
					}
					return nil
				})
			})
			if err != nil {
				t.Fatal(err)
			}
			if refs < 100 || missing == 0 {
				t.Fatalf("%d references, %d to the missing answer: the fixture tests too little", refs, missing)
			}
			if got := lookups > 0; got != tc.wantLookups {
				t.Errorf("%d of %d answers looked up, want some: %v", lookups, refs, tc.wantLookups)
			}
		})
	}

	// The missing answer's items fail as before; the others read as a
	// lookup per item read them.
	if err := db.bolt.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(answersBucket("classify")).Put(answerKey(cacheKey(7)), mustAnswer(t, db, tx, 7))
	}); err != nil {
		t.Fatal(err)
	}
	defer func(n, m, b int) { aheadMax, aheadMin, aheadBytes = n, m, b }(aheadMax, aheadMin, aheadBytes)
	aheadMax, aheadMin, aheadBytes = 5, 2, 300
	got := map[string]string{}
	if err := db.ForEachItem(func(is pipeline.ItemState) error {
		got[is.Record.ID] = string(is.Outputs["classify"])
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	byOutput := map[string]string{}
	if err := db.ForEachOutput("classify", func(rec pipeline.Record, out json.RawMessage) error {
		byOutput[rec.ID] = string(out)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for id, w := range want {
		if got[id] != w || byOutput[id] != w {
			t.Errorf("%s: ForEachItem %s, ForEachOutput %s, want %s", id, got[id], byOutput[id], w)
		}
	}
}

// mustAnswer is the stored form of answer n as the fixture above caches it.
func mustAnswer(t *testing.T, db *DB, tx *bolt.Tx, n int) []byte {
	t.Helper()
	v, err := db.encodeAnswer(tx, pipeline.Result{Output: json.RawMessage(fmt.Sprintf(`{"label":"bug","answer":%d,"pad":"%0*d"}`, n, 10+n*7, 0))})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestAnswerSeeker_findsAsReferredAnswer: references asked in ascending
// order find what referredAnswer finds, whether the next key is a step
// away, more than seekSteps away or past the bucket's end; references
// by a whole key and by a beginning, found or not.
func TestAnswerSeeker_findsAsReferredAnswer(t *testing.T) {
	db := openTest(t)
	var keys [][]byte
	for n := range 200 {
		if n%3 == 0 {
			continue // gaps a reference can fall in
		}
		k := answerKey(cacheKey(n))
		keys = append(keys, k)
	}
	keys = append(keys, []byte("plain-key"), []byte("zz"))
	refs := [][]byte{{0x00}, []byte("plain-key"), []byte("plain"), []byte("zz"), []byte("zzz"), {0xff, 0xff}}
	for n := range 200 {
		k := answerKey(cacheKey(n))
		refs = append(refs, k[:shortRefLen], k[:answerRefLen])
	}
	slices.SortFunc(refs, bytes.Compare)
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("seeker"))
		if err != nil {
			return err
		}
		for _, k := range keys {
			if err := b.Put(k, append([]byte("answer of "), k...)); err != nil {
				return err
			}
		}
		for _, from := range []int{0, 1, 17, len(refs) / 2} { // the first ask anywhere
			s := answerSeeker{c: b.Cursor()}
			found := 0
			for i, ref := range refs[from:] {
				if i%5 == 4 || (i/30)%2 == 1 {
					continue // gaps of a step, and of more than seekSteps keys
				}
				got, want := s.answer(ref), referredAnswer(b, ref)
				if !bytes.Equal(got, want) {
					t.Errorf("from %d, ref %x: %q, referredAnswer %q", from, ref, got, want)
				}
				if want != nil {
					found++
				}
			}
			if found < 50 {
				t.Errorf("from %d: %d references found: the fixture tests too little", from, found)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
