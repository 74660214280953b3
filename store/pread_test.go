package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// hashKeys returns n keys of 32 bytes, as answers are keyed.
func hashKeys(seed, n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		h := sha256.Sum256(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(seed)), uint64(i)))
		keys[i] = h[:]
	}
	return keys
}

// answersBolt is a bbolt file in t.TempDir with bucket "answers/classify"
// holding keys: values of 40-400 bytes, every 97th one 9,000 bytes (an
// overflow page), and every third key deleted again, so leaves begin
// after the keys their branches name.
func answersBolt(t *testing.T, keys [][]byte) (*bolt.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p.db")
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bdb.Close() })
	r := rand.New(rand.NewSource(1))
	err = bdb.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucket(bucketMeta); err != nil {
			return err
		}
		b, err := tx.CreateBucket([]byte("answers/classify"))
		if err != nil {
			return err
		}
		for i, k := range keys {
			n := 40 + r.Intn(360)
			if i%97 == 0 {
				n = 9000
			}
			if err := b.Put(k, bytes.Repeat([]byte{byte(i)}, n)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = bdb.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("answers/classify"))
		for i := 0; i < len(keys); i += 3 {
			if err := b.Delete(keys[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bdb, path
}

// probes are the keys a lookup may ask for around keys: each key, its
// 8- and 16-byte prefixes (as outputs refer to answers), the key one
// past it, and keys before and after every other.
func probes(keys [][]byte) [][]byte {
	out := [][]byte{{}, {0}, bytes.Repeat([]byte{0xff}, 40)}
	for _, k := range keys {
		past := bytes.Clone(k)
		past[len(past)-1]++
		out = append(out, k, k[:shortRefLen], k[:answerRefLen], past)
	}
	return out
}

// cursorSeek is what bbolt's cursor reads for key: the first key at or
// after it, its value, and the key after that.
func cursorSeek(b *bolt.Bucket, key []byte) (k, v, next []byte) {
	c := b.Cursor()
	k, v = c.Seek(key)
	if k != nil {
		next, _ = c.Next()
	}
	return k, v, next
}

func TestPageReader_readsAsTheCursor(t *testing.T) {
	keys := hashKeys(1, 6000)
	bdb, path := answersBolt(t, keys)
	r := newPageReader(path, bdb)
	if r == nil {
		t.Fatal("no page reader on a bbolt file")
	}
	defer r.close()
	err := bdb.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("answers/classify"))
		if b.Root() == 0 {
			t.Fatal("the bucket is inline: the test reads no page")
		}
		for _, p := range probes(keys) {
			wk, wv, wnext := cursorSeek(b, p)
			k, v, ok := r.seek(uint64(b.Root()), snapshotOf(tx), p)
			if !ok || !bytes.Equal(k, wk) || !bytes.Equal(v, wv) {
				t.Fatalf("seek(%x) = %x (%d bytes) %v; the cursor reads %x (%d bytes)", p, k, len(v), ok, wk, len(wv))
			}
			k, v, next, ok := r.seekNext(uint64(b.Root()), snapshotOf(tx), p, true)
			if !ok || !bytes.Equal(k, wk) || !bytes.Equal(v, wv) || !bytes.Equal(next, wnext) {
				t.Fatalf("seekNext(%x) = %x, next %x, %v; the cursor reads %x, next %x", p, k, next, ok, wk, wnext)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPageReader_branchesOfOneCommit(t *testing.T) {
	keys := hashKeys(2, 2000)
	bdb, path := answersBolt(t, keys)
	r := newPageReader(path, bdb)
	defer r.close()
	name := []byte("answers/classify")
	check := func(tx *bolt.Tx) {
		t.Helper()
		b := tx.Bucket(name)
		for _, p := range probes(keys) {
			wk, wv, _ := cursorSeek(b, p)
			if k, v, ok := r.seek(uint64(b.Root()), snapshotOf(tx), p); !ok || !bytes.Equal(k, wk) || !bytes.Equal(v, wv) {
				t.Fatalf("at commit %d seek(%x) = %x %v; the cursor reads %x", tx.ID(), p, k, ok, wk)
			}
		}
	}
	view := func() {
		t.Helper()
		if err := bdb.View(func(tx *bolt.Tx) error { check(tx); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	// rewrite commits a change under every branch: bbolt writes each page
	// it changes to another page, and gives the freed ones to later
	// commits once no transaction reads them.
	rewrite := func(seed int) {
		t.Helper()
		more := hashKeys(seed, 700)
		err := bdb.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(name)
			for i := seed % 2; i < len(keys); i += 2 {
				if err := b.Delete(keys[i]); err != nil {
					return err
				}
			}
			for _, k := range more {
				if err := b.Put(k, k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, more...)
	}
	// Two commits between lookups: the second reuses the pages the first
	// freed, which the branches kept may name.
	view() // keeps the first commit's branches
	for seed := 3; seed < 13; seed += 2 {
		rewrite(seed)
		rewrite(seed + 1)
		view()
	}

	// A transaction older than the branches kept reads its own pages.
	old, err := bdb.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Rollback()
	oldKeys := slices.Clone(keys)
	rewrite(20)
	view()
	keys, oldKeys = oldKeys, keys
	check(old)
	keys = oldKeys
	view()
}

// TestDB_answerLookupInItsWriteTx: a commit that caches an answer and
// reads it back in the same transaction (an output that refers to it)
// finds it, though the file does not hold it yet.
func TestDB_answerLookupInItsWriteTx(t *testing.T) {
	db := openTest(t)
	if db.pages == nil {
		t.Fatal("no page reader")
	}
	// Enough answers that the bucket has pages of its own.
	var ts []pipeline.Transition
	var ids []string
	for i := 0; i < 300; i++ {
		ids = append(ids, fmt.Sprintf("i%04d", i))
	}
	qs := queuedAtClassify(t, db, recs(ids...)...)
	for _, q := range qs {
		ts = append(ts, pipeline.Transition{Stage: "classify", ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded,
			Result: pipeline.Result{Output: json.RawMessage(`{"label":"praise","reason":"` + q.Item.ID + `"}`)}, CacheKey: keyOf(q.Item.ID)})
	}
	if err := db.Commit(ts); err != nil {
		t.Fatal(err)
	}
	err := db.update(func(tx *bolt.Tx) error {
		w := db.writer(tx)
		ref, err := w.putAnswer("classify", keyOf("new"), pipeline.Result{Output: json.RawMessage(`{"label":"bug"}`)})
		if err != nil || ref == nil {
			t.Fatalf("putAnswer = %x, %v", ref, err)
		}
		if a := db.answerByRef(tx, "classify", ref[1:]); a == nil {
			t.Errorf("the answer cached in this transaction reads as missing")
		}
		old := answerKey(keyOf("i0007"))
		if a := db.answerByRef(tx, "classify", old[:shortRefLen]); a == nil {
			t.Errorf("an answer committed before reads as missing")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"i0000", "i0123", "i0299", "new"} {
		if _, ok, err := db.CachedAnswer("classify", keyOf(id)); !ok || err != nil {
			t.Errorf("CachedAnswer(%s) = %v, %v", id, ok, err)
		}
	}
}

// keyOf is a cache key as the LLM stage makes them: a hex SHA-256.
func keyOf(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// TestPageReader_keepsBranchesOfOneSnapshot: a page id freed by one
// commit is another page in a later one, so a branch page kept is read
// again at any other snapshot.
func TestPageReader_keepsBranchesOfOneSnapshot(t *testing.T) {
	const size = 4096
	path := filepath.Join(t.TempDir(), "pages")
	branch := func(count uint16) []byte {
		p := make([]byte, size)
		binary.NativeEndian.PutUint64(p, 2)
		binary.NativeEndian.PutUint16(p[8:], branchPageFlag)
		binary.NativeEndian.PutUint16(p[10:], count)
		return p
	}
	write := func(p []byte) {
		t.Helper()
		if err := os.WriteFile(path, append(make([]byte, 2*size), p...), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(branch(1))
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	r := &pageReader{f: f, pageSize: size, branches: map[uint64][]byte{}}
	defer r.close()
	count := func(snap uint64) int {
		t.Helper()
		p, ok := r.node(new([]byte), 2, snap)
		if !ok {
			t.Fatalf("page 2 at %d does not read", snap)
		}
		return pageCount(p)
	}
	if n := count(7); n != 1 {
		t.Fatalf("page 2 at 7 has %d elements, want 1", n)
	}
	write(branch(2)) // what a later commit wrote to the freed page
	if n := count(7); n != 1 {
		t.Errorf("page 2 kept at 7 has %d elements, want 1", n)
	}
	if n := count(8); n != 2 {
		t.Errorf("page 2 at 8 has %d elements, want the 2 the file holds", n)
	}
	if n := count(7); n != 2 {
		t.Errorf("page 2 at 7, after 8 was read: %d elements, want it read again (2)", n)
	}
}

// BenchmarkDB_CachedAnswerReleased looks up 1,000 of 100,000 cached
// answers, the mapping released before each op as a night's writes
// release it: what a night pays for its cache lookups, read with pread
// or through the mapping. mapped-kB is the most of the file's mapping
// the lookups left resident (Linux).
func BenchmarkDB_CachedAnswerReleased(b *testing.B) {
	path := filepath.Join(b.TempDir(), "answers.db")
	db, err := Open(path, Options{Stages: testStages, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	const answers = 100_000
	for i := 0; i < answers; i += 10_000 {
		err := db.update(func(tx *bolt.Tx) error {
			w := db.writer(tx)
			for j := i; j < i+10_000; j++ {
				out := json.RawMessage(fmt.Sprintf(`{"label":"bug","confidence":0.9,"reason":"answer %d"}`, j))
				if _, err := w.putAnswer("classify", keyOf(fmt.Sprint(j)), pipeline.Result{Output: out}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	pages := db.pages
	for _, read := range []string{"pread", "mapping"} {
		b.Run("read="+read, func(b *testing.B) {
			db.pages = pages
			if read == "mapping" {
				db.pages = nil
			}
			defer func() { db.pages = pages }()
			r := rand.New(rand.NewSource(1))
			mapped := 0
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				db.releaseMapped()
				keys := make([]string, 1000)
				for i := range keys {
					keys[i] = keyOf(fmt.Sprint(r.Intn(answers)))
				}
				b.StartTimer()
				for _, k := range keys {
					if _, ok, err := db.CachedAnswer("classify", k); !ok || err != nil {
						b.Fatalf("CachedAnswer(%s) = %v, %v", k, ok, err)
					}
				}
				if kb, err := residentKB(path); err == nil {
					mapped = max(mapped, kb)
				}
			}
			b.ReportMetric(float64(mapped), "mapped-kB")
		})
	}
}

func TestTxAnswers_mayBegin(t *testing.T) {
	var w txAnswers
	k := answerKey(keyOf("put"))
	if w.mayBegin(k) {
		t.Error("nothing put, and a key may begin as one put")
	}
	w.put(k)
	w.put([]byte("short"))
	other := answerKey(keyOf("other"))
	for _, c := range []struct {
		name string
		ref  []byte
		want bool
	}{
		{"the key", k, true},
		{"its reference", k[:shortRefLen], true},
		{"its longer reference", k[:answerRefLen], true},
		{"another key", other, false},
		{"another reference", other[:shortRefLen], false},
		{"a short key put", []byte("short"), true},
		{"a ref shorter than a reference", k[:3], true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := w.mayBegin(c.ref); got != c.want {
				t.Errorf("mayBegin(%x) = %v, want %v", c.ref, got, c.want)
			}
		})
	}
}
