package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

func TestDeflateRecord(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	noise := make([]byte, 4000)
	for i := range noise {
		noise[i] = byte(rng.IntN(256))
	}
	for _, tc := range []struct {
		name     string
		v        []byte
		deflated bool
	}{
		{"short", append([]byte{tagPacked}, "a short review"...), false},
		{"long text", append([]byte{tagPacked}, longReview...), true},
		{"long raw JSON", append([]byte{tagRaw}, `{"text":"`+longReview+`"}`...), true},
		{"long but incompressible", append([]byte{tagPacked}, noise...), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := deflateRecord(tc.v)
			if (got[0] == tagFlate) != tc.deflated {
				t.Fatalf("deflated: %v, want %v", got[0] == tagFlate, tc.deflated)
			}
			if !tc.deflated {
				if !bytes.Equal(got, tc.v) {
					t.Error("a record left as it is was changed")
				}
				return
			}
			if len(got) > len(tc.v)/3 {
				t.Errorf("deflated to %d bytes of %d", len(got), len(tc.v))
			}
			back, err := inflateRecord(got)
			if err != nil || !bytes.Equal(back, tc.v) {
				t.Fatalf("inflated %d bytes, %v; want the record (%d bytes)", len(back), err, len(tc.v))
			}
		})
	}
}

// A damaged deflated record is an error, never a panic; so is one that
// holds another deflated record.
func TestInflateRecord_damaged(t *testing.T) {
	v := deflateRecord(append([]byte{tagPacked}, longReview...))
	for cut := 1; cut < len(v); cut += 7 {
		if _, err := inflateRecord(v[:cut]); err == nil {
			t.Errorf("cut at %d of %d: no error", cut, len(v))
		}
	}
	inner := append([]byte{tagFlate}, v...)
	if _, err := inflateRecord(deflateRecord(append(inner, longReview...))); err == nil {
		t.Error("a deflated record inside another: no error")
	}
}

// Long reviews took pages of their own each (a 7 KB one two, a 14 KB one
// four); deflated they share pages, and every read (the record, the
// sanitize output that is an edit of its text, verify) gets them back.
func TestDB_LongItemsDeflated(t *testing.T) {
	db := openTest(t)
	const n = 200
	var rs []pipeline.Record
	for i := range n {
		rs = append(rs, pipeline.Record{ID: fmt.Sprintf("r%04d", i), Text: fmt.Sprintf("review %d. %s", i, longReview),
			Fields: map[string]string{"app": "a"}})
	}
	if _, err := db.Ingest(rs); err != nil {
		t.Fatal(err)
	}
	var st bolt.BucketStats
	if err := db.view(func(tx *bolt.Tx) error { st = tx.Bucket(bucketItems).Stats(); return nil }); err != nil {
		t.Fatal(err)
	}
	if pages := st.LeafPageN + st.LeafOverflowN; pages > 30 {
		t.Errorf("items: %d pages for %d reviews of %d bytes, want at most 30", pages, n, len(rs[0].Text))
	}
	want := map[string]string{}
	advance(t, db, "sanitize", func(id string) json.RawMessage {
		var i int
		fmt.Sscanf(id, "r%d", &i)
		out := sanitizeOut(t, rs[i].Text)
		want[id] = string(out)
		return out
	})
	got := map[string]string{}
	if err := db.ForEachOutput("sanitize", func(rec pipeline.Record, out json.RawMessage) error {
		var i int
		fmt.Sscanf(rec.ID, "r%d", &i)
		if rec.Text != rs[i].Text {
			t.Errorf("%s: text read back as %d bytes, want %d", rec.ID, len(rec.Text), len(rs[i].Text))
		}
		got[rec.ID] = string(out)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s: sanitize output read back as\n%s\nwant\n%s", id, got[id], w)
		}
	}
}

// A record past maxFlate (an item of a text the user let through with a
// raised --max-line-bytes, a long output copied from PostgreSQL) is one
// bbolt stores, but a deflated one that long would not inflate: it is
// stored as it is and reads back, as does one exactly at the cap.
func TestDB_RecordPastFlateCapReadsBack(t *testing.T) {
	defer func(was int) { maxFlate = was }(maxFlate)
	maxFlate = 1 << 16 // the cap's logic at a size a test can afford
	db := openTest(t)
	const line = "a review that repeats itself. "
	past := strings.Repeat(line, maxFlate/len(line)+1)
	if _, err := db.Ingest([]pipeline.Record{{ID: "past", Text: past}}); err != nil {
		t.Fatal(err)
	}
	loc, err := db.Locate("past")
	if err != nil || loc.Record.Text != past {
		t.Fatalf("an item of %d bytes (past the %d-byte cap) read back as %d bytes, %v", len(past), maxFlate, len(loc.Record.Text), err)
	}
	at := bytes.Repeat([]byte{'x'}, maxFlate)
	at[0] = tagRaw
	got := deflateRecord(at)
	if got[0] != tagFlate {
		t.Fatal("a record exactly at the cap was not deflated")
	}
	if back, err := inflateRecord(got); err != nil || !bytes.Equal(back, at) {
		t.Fatalf("a record exactly at the cap inflated to %d bytes, %v", len(back), err)
	}
}
