package store

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// BenchmarkDB_ForEachItem is the store's part of `export --all`: every
// item of a drained database read with its record and its three
// outputs (a sanitize output shared with the text, a classify answer, an
// aggregate fact), in rows per second; B/op and allocs/op are per walk,
// so divide by the items for a row's.
//
//	go test ./store -run '^$' -bench DB_ForEachItem -benchmem
func BenchmarkDB_ForEachItem(b *testing.B) {
	const items = 50_000
	db, err := Open(filepath.Join(b.TempDir(), "b.db"), Options{Stages: testStages, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	for lo := 0; lo < items; lo += 10_000 {
		if _, err := db.Ingest(nightRecs(lo, 10_000)); err != nil {
			b.Fatal(err)
		}
	}
	for _, st := range db.stages {
		for {
			qs, err := db.Queued(st.Name, 0, 10_000)
			if err != nil {
				b.Fatal(err)
			}
			if len(qs) == 0 {
				break
			}
			ts := make([]pipeline.Transition, len(qs))
			for i, q := range qs {
				var out json.RawMessage
				switch st.Name {
				case "sanitize":
					out = cleanOut(b, q.Item.Text)
				case "classify":
					out = json.RawMessage(fmt.Sprintf(`{"label":"bug","confidence":0.%02d,"reason":"mentions a crash in %s","model":"gemini-2.5-flash",`+
						`"usage":{"prompt_tokens":%d,"candidate_tokens":28,"total_tokens":%d}}`, i%100, q.Item.ID, 100+i%50, 128+i%50))
				default:
					out = fact("bug")
				}
				ts[i] = pipeline.Transition{Stage: st.Name, ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded, Result: pipeline.Result{Output: out}}
			}
			if err := db.Commit(ts); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for b.Loop() {
		n := 0
		err := db.ForEachItem(func(is pipeline.ItemState) error {
			if len(is.Outputs) != 3 {
				return fmt.Errorf("item %s: %d outputs, want 3", is.ID, len(is.Outputs))
			}
			n++
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		if n != items {
			b.Fatalf("%d items, want %d", n, items)
		}
	}
	b.ReportMetric(float64(items)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}
