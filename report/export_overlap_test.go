package report

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// countingSource hands out n items with ids in order, failing at item
// failAt (when >= 0), and counts the items it handed out.
func countingSource(n, failAt int, handed *int) FlatSource {
	return func(fn func(FlatItem) error) error {
		for i := range n {
			if i == failAt {
				return fmt.Errorf("source failed at %d", i)
			}
			*handed++
			if err := fn(FlatItem{Record: pipeline.Record{ID: fmt.Sprintf("r%06d", i)}}); err != nil {
				return err
			}
		}
		return nil
	}
}

// TestOverlapped: the rows see the source's items in its order, across
// batches; a failing row writer stops the walk early with its own error;
// a failing source's error comes back after rows for every item it
// handed out before, and a row failing among those wins, as it would
// without the goroutine. TestMain's goleak check proves no walk outlives the call.
func TestOverlapped(t *testing.T) {
	fnErr := errors.New("disk full")
	for _, tc := range []struct {
		name          string
		n, failAt     int
		fnFailsAt     int
		wantErr       string
		wantAllRows   bool
		wantEarlyStop bool
		wantRows      int // when the source fails: every item it handed out before
	}{
		{name: "empty", n: 0, failAt: -1, fnFailsAt: -1, wantAllRows: true},
		{name: "less than a batch", n: overlapBatch - 1, failAt: -1, fnFailsAt: -1, wantAllRows: true},
		{name: "many batches and a part", n: overlapBatch*(overlapDepth+5) + 7, failAt: -1, fnFailsAt: -1, wantAllRows: true},
		{name: "the rows fail", n: overlapBatch * 100, failAt: -1, fnFailsAt: 300, wantErr: "disk full", wantEarlyStop: true},
		{name: "the source fails", n: overlapBatch * 10, failAt: overlapBatch*3 + 5, fnFailsAt: -1, wantErr: fmt.Sprintf("source failed at %d", overlapBatch*3+5), wantRows: overlapBatch*3 + 5},
		// As without the goroutine: the rows fail first, at an item the
		// source handed out before it failed.
		{name: "the rows fail, then the source", n: overlapBatch * 10, failAt: overlapBatch*3 + 5, fnFailsAt: overlapBatch*3 + 2, wantErr: "disk full", wantRows: overlapBatch*3 + 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			handed := 0
			var got []string
			err := overlapped(countingSource(tc.n, tc.failAt, &handed))(func(it FlatItem) error {
				if len(got) == tc.fnFailsAt {
					return fnErr
				}
				got = append(got, it.Record.ID)
				return nil
			})
			if (err == nil) != (tc.wantErr == "") || (err != nil && err.Error() != tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			for i, id := range got {
				if id != fmt.Sprintf("r%06d", i) {
					t.Fatalf("row %d is %s: out of order", i, id)
				}
			}
			if tc.wantAllRows && len(got) != tc.n {
				t.Errorf("%d rows, want %d", len(got), tc.n)
			}
			if tc.failAt >= 0 && len(got) != tc.wantRows {
				t.Errorf("%d rows, want %d: the items the source handed out before it failed", len(got), tc.wantRows)
			}
			if tc.wantEarlyStop && handed > tc.fnFailsAt+overlapBatch*(overlapDepth+3) {
				t.Errorf("the source handed out %d items after the rows failed at %d: not stopped", handed, tc.fnFailsAt)
			}
		})
	}
}
