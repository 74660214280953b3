package store

import (
	"errors"
	"fmt"
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
