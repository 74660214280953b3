package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
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
	want := stageOutputs(t, db, "classify")
	// The answer of i%23 == 7 goes missing: its outputs then fail to read.
	if err := db.bolt.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(answersBucket("classify")).Delete(answerKey(cacheKey(7)))
	}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name                  string
		size, min, max, table int
		wantLookups           bool // some answers do not fit and are looked up
		wantTable             bool // the answers are read whole
	}{
		{"the whole table", 1 << 16, 1 << 10, 16 << 20, 1 << 20, false, true},
		{"one chunk", 1 << 16, 1 << 10, 16 << 20, 0, false, false},
		{"a table too large, then one chunk", 1 << 16, 1 << 10, 16 << 20, 1000, false, false},
		{"chunks of 1", 1, 1, 16 << 20, 0, false, false},
		{"chunks of 7", 7, 1, 16 << 20, 0, false, false},
		{"bytes run out", 40, 4, 200, 0, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			aheadSizes(t, tc.size, tc.min, tc.max, tc.table)
			refs, lookups, missing, table := 0, 0, 0, false
			err := db.walk(func(tx *bolt.Tx, w *walker) error {
				p := readAhead(tx, "classify", w)
				defer func() { table = p.table != nil }()
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
			if table != tc.wantTable {
				t.Errorf("the answers read whole: %v, want %v", table, tc.wantTable)
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
	aheadSizes(t, 5, 2, 300, 0)
	got := map[string]string{}
	if err := db.ForEachItem(func(is pipeline.ItemState) error {
		got[is.Record.ID] = string(is.Outputs["classify"])
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	byOutput := stageOutputs(t, db, "classify")
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

// TestAnswersAhead_randomBuckets compares answersAhead and answerSeeker
// with referredAnswer on random buckets: 32-byte keys sharing 8- or
// 12-byte beginnings, 16-byte keys that begin them, short keys, nested
// buckets and empty answers; references by 8 bytes, 16 bytes and whole
// keys, to answers there or not; outputs of their own, bare tags and
// nested buckets among the outputs; a walk that skips ids and asks some
// twice; chunks of 1-10 references and 0-300 bytes, or a whole table
// of up to 6,000 bytes in blocks of 1-200. Seed i replays round i.
func TestAnswersAhead_randomBuckets(t *testing.T) {
	defer func(n int) { tableBlock = n }(tableBlock)
	db := bareBolt(t)
	const stage = "classify"
	found, looked, tables, overflows := 0, 0, 0, 0
	for round := range 300 {
		r := rand.New(rand.NewPCG(uint64(round), 7))
		beginnings := randomBeginnings(r)
		var keys [][]byte
		err := db.Update(func(tx *bolt.Tx) error {
			_ = tx.DeleteBucket(answersBucket(stage))
			_ = tx.DeleteBucket(outBucket(stage))
			answers, err := tx.CreateBucket(answersBucket(stage))
			if err != nil {
				return err
			}
			outs, err := tx.CreateBucket(outBucket(stage))
			if err != nil {
				return err
			}
			for range r.IntN(60) {
				k := randomAnswerKey(r, beginnings)
				if answers.Get(k) != nil || answers.Bucket(k) != nil {
					continue
				}
				switch r.IntN(12) {
				case 0:
					_, err = answers.CreateBucket(k)
				case 1:
					err = answers.Put(k, []byte{})
				default:
					err = answers.Put(k, fmt.Appendf(nil, "answer %x %s", k, bytes.Repeat([]byte("p"), r.IntN(30))))
				}
				if err != nil {
					return err
				}
				keys = append(keys, k)
			}
			for i := range r.IntN(80) {
				id := fmt.Appendf(nil, "id%04d", i)
				switch r.IntN(10) {
				case 0:
					err = outs.Put(id, []byte{tagPacked, 'x'})
				case 1:
					err = outs.Put(id, []byte{tagAnswer})
				case 2:
					_, err = outs.CreateBucket(id)
				default:
					err = outs.Put(id, append([]byte{tagAnswer}, randomRef(r, keys, beginnings)...))
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		size := 1 + r.IntN(10)
		table := 0 // chunks; a table the answers fit, or one they overflow
		if r.IntN(2) == 0 {
			table = r.IntN(6000)
		}
		aheadSizes(t, size, 1+r.IntN(size), r.IntN(300), table)
		tableBlock = 1 + r.IntN(200) // some answers larger than a block
		err = db.View(func(tx *bolt.Tx) error {
			answers := tx.Bucket(answersBucket(stage))
			p := readAhead(tx, stage, nil)
			err := tx.Bucket(outBucket(stage)).ForEach(func(k, v []byte) error {
				if v == nil || r.IntN(4) == 0 { // a nested bucket, or an id the walk skips
					return nil
				}
				for range 1 + r.IntN(2) { // asked twice, as ForEachOutput's merge may
					a, ok := p.answer(k, v)
					if !ok {
						looked++
						continue
					}
					found++
					if want := referredAnswer(answers, v[1:]); !bytes.Equal(a, want) || (a == nil) != (want == nil) {
						t.Errorf("seed %d (%d/%d/%d/%d): %s refers to %x: read ahead %q (nil %v), looked up %q (nil %v)",
							round, aheadMax, aheadMin, aheadBytes, tableBytes, k, v[1:], a, a == nil, want, want == nil)
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			switch {
			case p.table != nil:
				tables++
			case p.tried && tableBytes > 0:
				overflows++
			}
			var refs [][]byte
			for range 100 {
				refs = append(refs, randomRef(r, keys, beginnings))
			}
			slices.SortFunc(refs, bytes.Compare)
			s := answerSeeker{c: answers.Cursor()}
			for _, ref := range refs[r.IntN(len(refs)):] {
				if r.IntN(3) == 0 {
					continue
				}
				if got, want := s.answer(ref), referredAnswer(answers, ref); !bytes.Equal(got, want) || (got == nil) != (want == nil) {
					t.Errorf("seed %d: the seeker finds %q for %x, referredAnswer %q", round, got, ref, want)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if found < 1000 || looked < 100 || tables < 50 || overflows < 20 {
		t.Errorf("%d answers read ahead, %d looked up, %d whole tables, %d too large: the rounds test too little", found, looked, tables, overflows)
	}
}

// randomBeginnings are the few first bytes random keys share.
func randomBeginnings(r *rand.Rand) [][]byte {
	var bs [][]byte
	for range 1 + r.IntN(4) {
		b := make([]byte, 8+4*r.IntN(2))
		for i := range b {
			b[i] = byte(r.IntN(2))
		}
		bs = append(bs, b)
	}
	return bs
}

// randomAnswerKey is a hash's 32 bytes, a format 1 key of 16 bytes or a
// short key, most beginning as others do.
func randomAnswerKey(r *rand.Rand, beginnings [][]byte) []byte {
	alphabet := []byte{0x00, 0x01, 0x7f, 0x80, 0xff}
	fill := func(k []byte, n int) []byte {
		for len(k) < n {
			k = append(k, alphabet[r.IntN(len(alphabet))])
		}
		return k[:n]
	}
	b := beginnings[r.IntN(len(beginnings))]
	switch r.IntN(6) {
	case 0, 1, 2:
		return fill(slices.Clone(b), 32)
	case 3:
		return fill(slices.Clone(b), 16)
	}
	n := 1 + r.IntN(40)
	if r.IntN(2) == 0 && n >= 8 {
		return fill(slices.Clone(b[:8]), n)
	}
	return fill(nil, n)
}

// randomRef refers to one of keys, or to a key that may not be there, by
// its first 8 or 16 bytes or whole.
func randomRef(r *rand.Rand, keys, beginnings [][]byte) []byte {
	var k []byte
	if r.IntN(5) == 0 || len(keys) == 0 {
		k = randomAnswerKey(r, beginnings)
	} else {
		k = keys[r.IntN(len(keys))]
	}
	switch n := r.IntN(4); {
	case n == 0 && len(k) >= shortRefLen:
		return slices.Clone(k[:shortRefLen])
	case n == 1 && len(k) >= answerRefLen:
		return slices.Clone(k[:answerRefLen])
	}
	return slices.Clone(k)
}

// TestAnswersAhead_chunksFollowTheBytes: a chunk that runs out of bytes
// makes the next one hold as many references as fitted, the size holds
// while the answers stay long, and chunks grow back by doubling once
// they are short again.
func TestAnswersAhead_chunksFollowTheBytes(t *testing.T) {
	db := referringBolt(t, 1000, func(i int) int {
		if i < 600 {
			return 1000 // the first 600 outputs' answers: 10 fit a chunk
		}
		return 1
	})
	aheadSizes(t, 400, 1, 10_000, 0)
	err := db.View(func(tx *bolt.Tx) error {
		p := readAhead(tx, "classify", nil)
		looked, sizes := 0, []int{}
		return tx.Bucket(outBucket("classify")).ForEach(func(k, v []byte) error {
			if _, ok := p.answer(k, v); !ok {
				looked++
			}
			if len(sizes) == 0 || sizes[len(sizes)-1] != p.size {
				sizes = append(sizes, p.size)
			}
			if string(k) == "id000999" {
				if looked != 390 {
					t.Errorf("%d of 1,000 answers looked up one by one, want the first chunk's 390", looked)
				}
				// 10 fit of the first 400, 390 are looked up; chunks of
				// 10 long answers stay at 10 (twice would not fit); then
				// chunks of short answers double until the last (100) is
				// not full.
				if want := []int{10, 20, 40, 80, 160, 320}; !slices.Equal(sizes, want) {
					t.Errorf("chunk sizes %v, want %v", sizes, want)
				}
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// referringBolt is a bare bbolt file whose n classify outputs (id%06d)
// each refer to an answer of its own (key-%06d) of size(i) bytes.
func referringBolt(t *testing.T, n int, size func(i int) int) *bolt.DB {
	db := bareBolt(t)
	err := db.Update(func(tx *bolt.Tx) error {
		answers, err := tx.CreateBucket(answersBucket("classify"))
		if err != nil {
			return err
		}
		outs, err := tx.CreateBucket(outBucket("classify"))
		if err != nil {
			return err
		}
		for i := range n {
			k := fmt.Appendf(nil, "key-%06d", i)
			if err := answers.Put(k, bytes.Repeat([]byte("a"), size(i))); err != nil {
				return err
			}
			if err := outs.Put(fmt.Appendf(nil, "id%06d", i), append([]byte{tagAnswer}, k...)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// aheadSizes sets the read-ahead's bounds for the rest of the test: the
// references and bytes of a chunk, and the bytes of a whole table (0:
// chunks only); the walk reads ahead from its first reference.
func aheadSizes(t *testing.T, size, min, bytes, table int) {
	old := [5]int{aheadMax, aheadMin, aheadBytes, tableBytes, aheadAfter}
	t.Cleanup(func() {
		aheadMax, aheadMin, aheadBytes, tableBytes, aheadAfter = old[0], old[1], old[2], old[3], old[4]
	})
	aheadMax, aheadMin, aheadBytes, tableBytes, aheadAfter = size, min, bytes, table, 0
}

// bareBolt is a bare bbolt file, for tests of the buckets alone.
func bareBolt(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "bare.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestAnswersAhead_looksUpFirst: a walk looks its first aheadAfter
// references up one by one, and reads the answers ahead only past them,
// so a walk that stops after a few items (a job check's sample) reads
// no more than those.
func TestAnswersAhead_looksUpFirst(t *testing.T) {
	db := referringBolt(t, 20, func(int) int { return 6 })
	aheadSizes(t, 1<<16, 1<<10, 16<<20, 1<<20)
	aheadAfter = 5
	err := db.View(func(tx *bolt.Tx) error {
		p := readAhead(tx, "classify", nil)
		var found []bool
		err := tx.Bucket(outBucket("classify")).ForEach(func(k, v []byte) error {
			_, ok := p.answer(k, v)
			found = append(found, ok)
			if len(found) == 5 && p.tried {
				t.Error("the answers were read ahead within the first 5 references")
			}
			return nil
		})
		if want := append(slices.Repeat([]bool{false}, 5), slices.Repeat([]bool{true}, 15)...); !slices.Equal(found, want) {
			t.Errorf("read ahead: %v, want %v", found, want)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestReadTable_oneBudgetPerWalk: the answer tables a walk holds share
// tableBytes: a second stage's table that would fit alone is not read
// when the first took the room, and the walk reads ahead in chunks there.
func TestReadTable_oneBudgetPerWalk(t *testing.T) {
	db := bareBolt(t)
	err := db.Update(func(tx *bolt.Tx) error {
		for _, stage := range []string{"classify", "tone"} {
			answers, err := tx.CreateBucket(answersBucket(stage))
			if err != nil {
				return err
			}
			for i := range 10 {
				if err := answers.Put(fmt.Appendf(nil, "key-%06d", i), bytes.Repeat([]byte("a"), 100)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	aheadSizes(t, 1<<16, 1<<10, 16<<20, 2000) // one table of ~1,300 bytes fits, not two
	err = db.View(func(tx *bolt.Tx) error {
		w := &walker{} // fewer entries than a release's
		if readTable(tx.Bucket(answersBucket("classify")), w) == nil || w.tables == 0 {
			t.Fatalf("the first table is not read (%d bytes held)", w.tables)
		}
		if readTable(tx.Bucket(answersBucket("tone")), w) != nil {
			t.Errorf("a second table is read beside the first: %d bytes held, at most %d", w.tables, tableBytes)
		}
		if readTable(tx.Bucket(answersBucket("tone")), &walker{}) == nil {
			t.Error("the second table alone is not read")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
