package report

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

// peakWriter discards what it is given and samples the live heap (after
// a collection, so garbage awaiting the collector does not count) every
// 10,000 lines.
type peakWriter struct {
	lines int
	peak  uint64
	ms    runtime.MemStats
}

func (w *peakWriter) Write(p []byte) (int, error) {
	for _, c := range p {
		if c == '\n' {
			w.lines++
			if w.lines%10_000 == 0 {
				runtime.GC()
				runtime.ReadMemStats(&w.ms)
				w.peak = max(w.peak, w.ms.HeapAlloc)
			}
		}
	}
	return len(p), nil
}

// BenchmarkExport_Store exports every item of a real store (half done,
// half queued at classify) as JSONL and reports the peak live heap: it stays
// about the same whatever the item count, since the rows stream from one
// cursor over the store.
//
//	go test ./report -run '^$' -bench Export_Store -benchtime 1x
func BenchmarkExport_Store(b *testing.B) {
	for _, items := range []int{20_000, 200_000} {
		b.Run(fmt.Sprintf("items=%d", items), func(b *testing.B) {
			defs := []store.StageDef{{Name: "sanitize", Fingerprint: "s1"}, {Name: "classify", Fingerprint: "c1"}}
			db, err := store.Open(filepath.Join(b.TempDir(), "b.db"), store.Options{Stages: defs, NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			for lo := 0; lo < items; lo += 10_000 {
				var recs []pipeline.Record
				for i := lo; i < min(lo+10_000, items); i++ {
					recs = append(recs, pipeline.Record{ID: fmt.Sprintf("r%07d", i), Text: "The app crashes when I open it.", Fields: map[string]string{"app": "TaskFlow", "rating": "2"}})
				}
				if _, err := db.Ingest(recs); err != nil {
					b.Fatal(err)
				}
			}
			for _, stage := range []string{"sanitize", "classify"} {
				for after := uint64(0); ; {
					qs, err := db.Queued(stage, after, 10_000)
					if err != nil {
						b.Fatal(err)
					}
					if len(qs) == 0 {
						break
					}
					after = qs[len(qs)-1].Seq
					var ts []pipeline.Transition
					for _, q := range qs {
						if stage == "classify" && q.Item.ID[len(q.Item.ID)-1]%2 == 1 {
							continue // leave the odd ids queued
						}
						ts = append(ts, pipeline.Transition{Stage: stage, ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded,
							Result: pipeline.Result{Output: json.RawMessage(`{"label":"bug","confidence":0.8300000000000001}`)}})
					}
					if err := db.Commit(ts); err != nil {
						b.Fatal(err)
					}
				}
			}
			w := &peakWriter{}
			for b.Loop() {
				w.lines = 0
				if err := Export(w, db, ExportOptions{Format: FormatJSONL}); err != nil {
					b.Fatal(err)
				}
			}
			if w.lines != items {
				b.Fatalf("%d rows, want %d", w.lines, items)
			}
			b.ReportMetric(float64(w.peak)/(1<<20), "peak-live-heap-MiB")
		})
	}
}
