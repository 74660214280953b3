package store

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// proseOf is n bytes of words that deflate about as little as prose:
// random letters, so that the stored record stays long.
func proseOf(seed uint64, n int) string {
	r := rand.New(rand.NewPCG(seed, 7))
	var b strings.Builder
	for b.Len() < n {
		for range 2 + r.IntN(8) {
			b.WriteByte(byte('a' + r.IntN(26)))
		}
		b.WriteByte(" .,"[r.IntN(3)])
	}
	return b.String()[:n]
}

// itemValue is the value the items bucket holds for id and how many
// chunks the longs bucket holds in all.
func itemValue(t *testing.T, db *DB, id string) (v []byte, longs int) {
	t.Helper()
	if err := db.view(func(tx *bolt.Tx) error {
		v = append([]byte(nil), tx.Bucket(bucketItems).Get([]byte(id))...)
		if b := tx.Bucket(bucketLongs); b != nil {
			longs = b.Stats().KeyN
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return v, longs
}

// A stored record of minLong bytes or more is kept in chunks of the
// longs bucket and reads back as it was; a shorter one stays in items.
func TestDB_LongItemsInChunks(t *testing.T) {
	for _, tc := range []struct {
		name string
		text string
		long bool
	}{
		{"short", "Crashed three times today.", false},
		{"long but deflates short", longReview, false},
		{"just past a quarter page", proseOf(1, 2000), true},
		{"past a page", proseOf(2, 7000), true},
		{"many pages", proseOf(3, 60000), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openTest(t)
			rec := pipeline.Record{ID: "x", Text: tc.text, Fields: map[string]string{"app": "a"}}
			if _, err := db.Ingest([]pipeline.Record{rec}); err != nil {
				t.Fatal(err)
			}
			v, longs := itemValue(t, db, "x")
			if got := v[0] == tagLong; got != tc.long {
				t.Fatalf("stored in chunks: %v, want %v (items value of %d bytes)", got, tc.long, len(v))
			}
			if tc.long {
				_, n, rest, ok := longRef(v)
				if !ok || len(rest) >= longChunk || longs != int(n) {
					t.Errorf("reference %x: %d chunks and %d bytes, the bucket holds %d", v[:8], n, len(rest), longs)
				}
			} else if longs != 0 {
				t.Errorf("longs holds %d chunks, want none", longs)
			}
			loc, err := db.Locate("x")
			if err != nil || loc.Record.Text != tc.text || loc.Record.Fields["app"] != "a" {
				t.Fatalf("read back %d bytes, fields %v, %v; want %d bytes", len(loc.Record.Text), loc.Record.Fields, err, len(tc.text))
			}
			if problems, err := db.Check(); err != nil || len(problems) > 0 {
				t.Errorf("verify: %v %v", problems, err)
			}
		})
	}
}

// Long items among short ones, ingested in id order, leave items' and
// longs' pages nearly full: kept in items, each long record closed the
// page before it early and rounded its own node up to whole pages (0.80
// full here).
func TestDB_LongItemsFillTheirPages(t *testing.T) {
	db := openTest(t)
	r := rand.New(rand.NewPCG(5, 5))
	for batch := range 30 {
		var recs []pipeline.Record
		for i := range 100 {
			n := batch*100 + i
			text := fmt.Sprintf("Review %d: the app crashed on start and lost my notes.", n)
			if n%20 == 0 {
				text = proseOf(uint64(n), 3000+r.IntN(9000))
			}
			recs = append(recs, pipeline.Record{ID: fmt.Sprintf("r%06d", n), Text: text})
		}
		if _, err := db.Ingest(recs); err != nil {
			t.Fatal(err)
		}
	}
	var inuse, alloc int
	if err := db.view(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketItems, bucketLongs} {
			if b := tx.Bucket(name); b != nil {
				s := b.Stats()
				inuse += s.LeafInuse
				alloc += s.LeafAlloc
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fill := float64(inuse) / float64(alloc); fill < 0.93 {
		t.Errorf("items and longs: %d bytes in %d of leaf pages (%.2f full), want >= 0.93", inuse, alloc, fill)
	}
}

// An item's chunks go with its record: an edit replaces them, an edit to
// a short text and a prune drop them, and verify finds nothing left over.
func TestDB_LongItemChunksFollowTheRecord(t *testing.T) {
	db := openTest(t)
	ingest := func(text string) {
		t.Helper()
		if _, err := db.Ingest([]pipeline.Record{{ID: "x", Text: text}}); err != nil {
			t.Fatal(err)
		}
	}
	wantChunks := func(step string, text string) {
		t.Helper()
		v, longs := itemValue(t, db, "x")
		want := 0
		if len(v) > 0 && v[0] == tagLong {
			_, n, _, _ := longRef(v)
			want = int(n)
		}
		if longs != want {
			t.Errorf("%s: longs holds %d chunks, the item refers to %d", step, longs, want)
		}
		if text != "" {
			if loc, err := db.Locate("x"); err != nil || loc.Record.Text != text {
				t.Errorf("%s: read back %d bytes, %v; want %d", step, len(loc.Record.Text), err, len(text))
			}
		}
		if problems, err := db.Check(); err != nil || len(problems) > 0 {
			t.Errorf("%s: verify: %v %v", step, problems, err)
		}
	}
	first, second := proseOf(1, 9000), proseOf(2, 5000)
	ingest(first)
	wantChunks("ingest", first)
	ingest(second)
	wantChunks("edit to another long text", second)
	ingest("now short")
	wantChunks("edit to a short text", "now short")
	ingest(first)
	wantChunks("long again", first)
	if n, err := db.Prune(func(string) bool { return false }, false); err != nil || n != 1 {
		t.Fatalf("pruned %d, %v; want 1", n, err)
	}
	if _, longs := itemValue(t, db, "x"); longs != 0 {
		t.Errorf("after prune longs holds %d chunks, want none", longs)
	}
}

// A long item whose chunk is gone or cut reads as damaged, named by its
// id, and verify says so; nothing panics.
func TestDB_LongItemDamaged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(b *bolt.Bucket, first uint64) error
	}{
		{"chunk missing", func(b *bolt.Bucket, first uint64) error { return b.Delete(u64(first + 1)) }},
		{"chunk cut", func(b *bolt.Bucket, first uint64) error { return b.Put(u64(first+1), []byte("cut")) }},
		{"chunk too long", func(b *bolt.Bucket, first uint64) error {
			return b.Put(u64(first+2), []byte(strings.Repeat("z", longChunk+1)))
		}},
		{"a chunk's key skipped", func(b *bolt.Bucket, first uint64) error {
			v := append([]byte(nil), b.Get(u64(first+1))...)
			if err := b.Delete(u64(first + 1)); err != nil {
				return err
			}
			return b.Put(u64(first+1000), v)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, err := Open(filepath.Join(t.TempDir(), "st.db"), Options{Stages: testStages})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Ingest([]pipeline.Record{{ID: "x", Text: proseOf(9, 9000)}}); err != nil {
				t.Fatal(err)
			}
			if err := db.update(func(tx *bolt.Tx) error {
				first, _, _, _ := longRef(tx.Bucket(bucketItems).Get([]byte("x")))
				return tc.damage(tx.Bucket(bucketLongs), first)
			}); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Locate("x"); err == nil || !strings.Contains(err.Error(), `"x"`) {
				t.Errorf("Locate of a damaged long item: %v, want an error naming it", err)
			}
			if problems, err := db.Check(); err != nil || len(problems) == 0 {
				t.Errorf("verify of a damaged long item: %v %v, want a problem", problems, err)
			}
		})
	}
}

// verify finds a chunk of longs no item refers to, one past the bucket's
// sequence, and two items whose references share chunks.
func TestCheck_longsOrphanAndShared(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(tx *bolt.Tx) error
		want   string
	}{
		{"orphan chunk", func(tx *bolt.Tx) error {
			return tx.Bucket(bucketLongs).Put(u64(1<<40), []byte("left behind"))
		}, "belongs to no item"},
		{"chunk past the sequence", func(tx *bolt.Tx) error {
			// The next long item would be given a's chunks' keys and
			// overwrite them.
			return tx.Bucket(bucketLongs).SetSequence(0)
		}, "past the bucket's sequence"},
		{"chunks shared", func(tx *bolt.Tx) error {
			items := tx.Bucket(bucketItems)
			return items.Put([]byte("b"), append([]byte(nil), items.Get([]byte("a"))...))
		}, "overlap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, err := Open(filepath.Join(t.TempDir(), "st.db"), Options{Stages: testStages})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Ingest([]pipeline.Record{{ID: "a", Text: proseOf(1, 6000)}, {ID: "b", Text: proseOf(2, 6000)}}); err != nil {
				t.Fatal(err)
			}
			if problems, err := db.Check(); err != nil || len(problems) > 0 {
				t.Fatalf("verify before the damage: %v %v", problems, err)
			}
			if err := db.update(tc.damage); err != nil {
				t.Fatal(err)
			}
			problems, err := db.Check()
			if err != nil || !strings.Contains(strings.Join(problems, "\n"), tc.want) {
				t.Errorf("verify: %v %v, want a problem saying %q", problems, err, tc.want)
			}
		})
	}
}

// Compact keeps the longs bucket's sequence: a long item added after it
// takes new chunks, not those of an item already stored.
func TestCompact_longsKeepTheirSequence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "st.db")
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	a, b := proseOf(1, 6000), proseOf(2, 6000)
	if _, err := db.Ingest([]pipeline.Record{{ID: "a", Text: a}}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Compact(path, 0); err != nil {
		t.Fatal(err)
	}
	db, err = Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Ingest([]pipeline.Record{{ID: "b", Text: b}}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"a": a, "b": b} {
		if loc, err := db.Locate(id); err != nil || loc.Record.Text != want {
			t.Errorf("%s read back %d bytes, %v; want %d", id, len(loc.Record.Text), err, len(want))
		}
	}
	if problems, err := db.Check(); err != nil || len(problems) > 0 {
		t.Errorf("verify: %v %v", problems, err)
	}
}

// A long item whose chunks hold a deflated record that inflates to the
// item's own reference reads as damaged: appendRecord followed it round
// and round until the stack overflowed, a fatal error no recover catches
// (verify, export and report died on such a file).
func TestDB_LongItemReferringToItself(t *testing.T) {
	defer debug.SetMaxStack(debug.SetMaxStack(1 << 20)) // an overflow fails fast
	db, err := Open(filepath.Join(t.TempDir(), "st.db"), Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Ingest([]pipeline.Record{{ID: "x", Text: proseOf(9, 3000)}}); err != nil {
		t.Fatal(err)
	}
	if err := db.update(func(tx *bolt.Tx) error {
		longs := tx.Bucket(bucketLongs)
		first := longs.Sequence() + 1
		ref := binary.AppendUvarint([]byte{tagLong}, first)
		ref = binary.AppendUvarint(ref, 1)
		var buf bytes.Buffer
		buf.WriteByte(tagFlate)
		fw, _ := flate.NewWriter(&buf, flate.BestCompression)
		fw.Write(ref)
		fw.Close()
		chunk := append(buf.Bytes(), make([]byte, longChunk-buf.Len())...) // trailing bytes inflate ignores
		if err := longs.Put(u64(first), chunk); err != nil {
			return err
		}
		if err := longs.SetSequence(first); err != nil {
			return err
		}
		return tx.Bucket(bucketItems).Put([]byte("x"), ref)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Locate("x"); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("Locate of an item referring to itself: %v, want an error naming it", err)
	}
	if problems, err := db.Check(); err != nil || len(problems) == 0 {
		t.Errorf("verify of an item referring to itself: %v %v, want a problem", problems, err)
	}
}

// Pruning a long item whose reference is damaged leaves the chunks it
// names to verify: it deleted as many as the reference said from its
// first on, the next item's among them (and a count of 2^40 held prune's
// write transaction open for days, deleting keys that are not there).
func TestDB_PruneOfADamagedLongItemKeepsOthersChunks(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    func(na, nb uint64) uint64
	}{
		{"count past its own chunks", func(na, nb uint64) uint64 { return na + nb }},
		{"count past any chunk", func(uint64, uint64) uint64 { return 1 << 40 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, err := Open(filepath.Join(t.TempDir(), "st.db"), Options{Stages: testStages})
			if err != nil {
				t.Fatal(err)
			}
			b := proseOf(2, 6000)
			if _, err := db.Ingest([]pipeline.Record{{ID: "a", Text: proseOf(1, 6000)}, {ID: "b", Text: b}}); err != nil {
				t.Fatal(err)
			}
			if err := db.update(func(tx *bolt.Tx) error {
				items := tx.Bucket(bucketItems)
				first, na, rest, _ := longRef(items.Get([]byte("a")))
				_, nb, _, _ := longRef(items.Get([]byte("b")))
				ref := binary.AppendUvarint([]byte{tagLong}, first)
				ref = binary.AppendUvarint(ref, tc.n(na, nb))
				return items.Put([]byte("a"), append(ref, rest...))
			}); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := db.Prune(func(id string) bool { return id != "a" }, false)
				done <- err
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("prune of a damaged long item did not end in 30s") // db left open: Close would wait for it
			}
			defer db.Close()
			if loc, err := db.Locate("b"); err != nil || loc.Record.Text != b {
				t.Errorf("b after a damaged a was pruned: %d bytes, %v; want %d", len(loc.Record.Text), err, len(b))
			}
			problems, err := db.Check()
			if err != nil || !strings.Contains(strings.Join(problems, "\n"), "belongs to no item") {
				t.Errorf("verify: %v %v, want a's chunks named as orphans", problems, err)
			}
		})
	}
}
