package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"
)

// TestDB_ForEachItem_scan: ForEachItem's cursors move in a goroutine of
// their own (walkscan.go), batches of items ahead of the decoding. The
// items come in id order across the batches; an error of fn, or a
// damaged state, stops the walk at that item, after every item before
// it and none after; a damaged file that panics in the scan's goroutine
// is ErrCorrupt, not a crash; and the scan is never left running.
func TestDB_ForEachItem_scan(t *testing.T) {
	const n = 3*scanBatches*scanBatchItems + 7
	errFn := errors.New("fn failed")
	cases := []struct {
		name   string
		damage func(tx *bolt.Tx) error
		stopAt int // fn fails at the item with this index (-1: never)
		calls  int // the items fn is called with
		err    func(error) bool
	}{
		{name: "every item", stopAt: -1, calls: n, err: func(err error) bool { return err == nil }},
		{name: "fn fails past the first batches", stopAt: 2*scanBatchItems + 5, calls: 2*scanBatchItems + 6,
			err: func(err error) bool { return errors.Is(err, errFn) }},
		{name: "a damaged state past the first batches", stopAt: -1, calls: scanBatches*scanBatchItems + 1,
			damage: func(tx *bolt.Tx) error {
				return tx.Bucket(bucketState).Put(fmt.Appendf(nil, "id%05d", scanBatches*scanBatchItems+1), []byte{9})
			},
			err: func(err error) bool {
				var d *pipeline.DamagedError
				return errors.As(err, &d) && d.Item == fmt.Sprintf("id%05d", scanBatches*scanBatchItems+1)
			}},
		// The scan decodes the records: one it cannot read still stops the
		// walk at its own item, after every item before it.
		{name: "a damaged record past the first batches", stopAt: -1, calls: scanBatches*scanBatchItems + 1,
			damage: func(tx *bolt.Tx) error {
				return tx.Bucket(bucketItems).Put(fmt.Appendf(nil, "id%05d", scanBatches*scanBatchItems+1), []byte("\x05\xff"))
			},
			err: func(err error) bool {
				var d *pipeline.DamagedError
				return errors.As(err, &d) && d.Item == fmt.Sprintf("id%05d", scanBatches*scanBatchItems+1) && !strings.Contains(err.Error(), "state")
			}},
		{name: "a damaged state and record: the state's error", stopAt: -1, calls: scanBatches*scanBatchItems + 1,
			damage: func(tx *bolt.Tx) error {
				id := fmt.Appendf(nil, "id%05d", scanBatches*scanBatchItems+1)
				if err := tx.Bucket(bucketState).Put(id, []byte{9}); err != nil {
					return err
				}
				return tx.Bucket(bucketItems).Put(id, []byte("\x05\xff"))
			},
			err: func(err error) bool {
				var d *pipeline.DamagedError
				return errors.As(err, &d) && d.Item == fmt.Sprintf("id%05d", scanBatches*scanBatchItems+1) && strings.Contains(err.Error(), "corrupt state record")
			}},
		{name: "no state bucket", stopAt: -1, calls: 0,
			damage: func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketState) },
			err:    func(err error) bool { return errors.Is(err, ErrCorrupt) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path, _ := filledDB(t, n)
			if tc.damage != nil {
				bdb, err := bolt.Open(path, 0o600, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := bdb.Update(tc.damage); err != nil {
					t.Fatal(err)
				}
				bdb.Close()
			}
			db, err := Open(path, Options{Stages: testStages, ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			before := goleak.IgnoreCurrent()
			calls := 0
			err = db.ForEachItem(func(it pipeline.ItemState) error {
				if want := fmt.Sprintf("id%05d", calls); it.ID != want {
					t.Fatalf("item %d is %s, want %s", calls, it.ID, want)
				}
				if it.Text == "" || it.Stage != "sanitize" {
					t.Errorf("item %s: text %q, stage %q", it.ID, it.Text, it.Stage)
				}
				calls++
				if calls-1 == tc.stopAt {
					return errFn
				}
				return nil
			})
			if !tc.err(err) {
				t.Errorf("err = %v", err)
			}
			if calls != tc.calls {
				t.Errorf("fn called %d times, want %d", calls, tc.calls)
			}
			goleak.VerifyNone(t, before)
		})
	}
}

// TestDB_ForEachItem_recordsInTheScan: the scan decodes records in a
// goroutine of its own, on the walk's read transaction, while the walk
// decodes outputs (walkscan.go). Run under -race (CI does), it checks
// what that relies on in bbolt and in the dict: records kept in chunks
// (tagLong) and deflated (tagFlate) read from the scan's goroutine, and
// dict strings that neither goroutine has cached yet, shared by the
// records and the outputs, so both look the same ids up at once. Every
// item reads back as it was ingested.
func TestDB_ForEachItem_recordsInTheScan(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 1500
	path := filepath.Join(t.TempDir(), "scan.db")
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields("the app crashes when I open a review of sleep sounds battery drains fast please add dark mode sync across devices")
	prose := func(words_ int) string {
		var b strings.Builder
		for range words_ {
			b.WriteString(words[rnd.IntN(len(words))])
			b.WriteString(fmt.Sprint(" ", rnd.IntN(1000), " "))
		}
		return b.String()
	}
	var recs []pipeline.Record
	for i := range n {
		text := fmt.Sprintf("text %d", i)
		switch {
		case i%10 == 0:
			text = prose(2000) // deflated past a quarter page: kept in chunks
		case i%7 == 0:
			text = strings.Repeat("a short review said again and again ", 40) // deflated, in items
		}
		fields := map[string]string{}
		for j := range 6 {
			fields[fmt.Sprintf("k%d", (i*7+j)%400)] = fmt.Sprintf("v%d", (i*13+j)%900)
		}
		recs = append(recs, pipeline.Record{ID: fmt.Sprintf("id%05d", i), Text: text, Fields: fields})
	}
	var ts []pipeline.Transition
	for i, q := range queuedAtClassify(t, db, recs...) {
		out, _ := json.Marshal(map[string]string{fmt.Sprintf("k%d", (i*7)%400): fmt.Sprintf("v%d", (i*13)%900), "label": fmt.Sprintf("v%d", i%900)})
		ts = append(ts, pipeline.Transition{Stage: "classify", ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded, Result: pipeline.Result{Output: out}})
	}
	if err := db.Commit(ts); err != nil {
		t.Fatal(err)
	}
	tags := map[byte]int{}
	if err := db.bolt.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketItems).ForEach(func(_, v []byte) error {
			tags[v[0]]++
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	if tags[tagLong] == 0 || tags[tagFlate] == 0 {
		t.Fatalf("records by tag %v: want some kept in chunks and some deflated", tags)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		// A reopened file's dict cache is empty (dict.go): every string
		// is a miss the first time either goroutine meets it.
		ro, err := Open(path, Options{Stages: testStages, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		i := 0
		err = ro.ForEachItem(func(is pipeline.ItemState) error {
			want := recs[i]
			if is.ID != want.ID || is.Text != want.Text || !maps.Equal(is.Fields, want.Fields) {
				t.Fatalf("round %d, item %d: %s with %d bytes of text and fields %v; want %s, %d bytes, %v",
					round, i, is.ID, len(is.Text), is.Fields, want.ID, len(want.Text), want.Fields)
			}
			if got, wantOut := string(is.Outputs["classify"]), string(ts[i].Result.Output); got != wantOut {
				t.Fatalf("round %d, item %s: classify output %s, want %s", round, is.ID, got, wantOut)
			}
			i++
			return nil
		})
		if err != nil || i != n {
			t.Fatalf("round %d: %d items, %v; want %d", round, i, err, n)
		}
		if err := ro.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
