package batch

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// withRepeats ingests n items of which every third after the first
// distinct ones asks an earlier item's question (30% duplicates), ids
// prefixed by prefix; it returns how many questions are distinct.
func withRepeats(t *testing.T, f *fixture, prefix string, n int) int {
	t.Helper()
	distinct := n - n*3/10
	var recs []pipeline.Record
	for i := range n {
		text := fmt.Sprintf("review %d: %s", i, reviewTexts[i%len(reviewTexts)])
		if i >= distinct {
			j := (i - distinct) * 2
			text = fmt.Sprintf("review %d: %s", j, reviewTexts[j%len(reviewTexts)])
		}
		recs = append(recs, pipeline.Record{ID: fmt.Sprintf("%s%03d", prefix, i), Text: text})
	}
	if _, err := f.db.Ingest(recs); err != nil {
		t.Fatal(err)
	}
	return distinct
}

// TestDriver_AsksEachQuestionOnce: of 60 items with 30% duplicate texts,
// in jobs of 25 (so duplicates meet inside a job and across jobs in
// flight together), only the distinct questions are sent and paid; every
// duplicate gets its original's answer; a second run over the same texts
// under other ids creates no job at all. With the cache off, every item is
// sent, as before.
func TestDriver_AsksEachQuestionOnce(t *testing.T) {
	for _, noCache := range []bool{false, true} {
		t.Run(fmt.Sprintf("no-cache=%v", noCache), func(t *testing.T) {
			f := newFixture(t, 0, geminisim.BatchConfig{Shuffle: true, Pending: time.Minute})
			const n = 60
			distinct := withRepeats(t, f, "a", n)
			sum, err := f.driver(f.db, Config{Size: 25, NoCache: noCache}).Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			wantRows, wantCached := distinct, n-distinct
			if noCache {
				wantRows, wantCached = n, 0
			}
			if rows := f.sim.BatchStats().Rows; rows != wantRows {
				t.Errorf("the simulator answered %d batch requests, want %d", rows, wantRows)
			}
			if sum.Answered != n || sum.Cached != wantCached {
				t.Errorf("summary %+v: want %d answered, %d of them without a request", sum, n, wantCached)
			}
			if done, _, queued := f.state(t); done != n || queued != 0 {
				t.Errorf("done %d, queued %d: want %d done", done, queued, n)
			}
			labels := outputs(t, f)
			for i := distinct; i < n; i++ {
				dup, orig := fmt.Sprintf("a%03d", i), fmt.Sprintf("a%03d", (i-distinct)*2)
				if labels[dup] != labels[orig] || labels[dup] == "" {
					t.Errorf("item %s answered %q, its original %s %q", dup, labels[dup], orig, labels[orig])
				}
			}
			ledgers, err := f.db.Ledgers()
			if err != nil {
				t.Fatal(err)
			}
			if l := ledgers["classify"]; l.Paid != int64(wantRows) || l.Cached != int64(wantCached) || (wantCached > 0) != (l.SavedUSD > 0) {
				t.Errorf("ledger %+v: want %d paid, %d cached", l, wantRows, wantCached)
			}
			if noCache {
				return
			}

			withRepeats(t, f, "b", n)
			again, err := f.driver(f.db, Config{Size: 25}).Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if rows := f.sim.BatchStats().Rows; rows != wantRows || again.Created != 0 || again.Answered != n || again.Cached != n || again.CostUSD != 0 {
				t.Errorf("second run over the same texts: %d requests in all (want %d), summary %+v", rows, wantRows, again)
			}
			if done, _, _ := f.state(t); done != 2*n {
				t.Errorf("done %d, want %d", done, 2*n)
			}
		})
	}
}

// outputs is each item's stored answer, its label and reason.
func outputs(t *testing.T, f *fixture) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := f.db.ForEachOutput("classify", func(rec pipeline.Record, o json.RawMessage) error {
		var c struct{ Label, Reason string }
		if err := json.Unmarshal(o, &c); err != nil {
			return err
		}
		out[rec.ID] = c.Label + "/" + c.Reason
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
