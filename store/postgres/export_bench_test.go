package postgres

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/report"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// exportBenchItems is how many done items BenchmarkExport exports.
const exportBenchItems = 20000

// BenchmarkExport exports every item of one pipeline (exportBenchItems
// done items shaped as the engine bench's: a review's record, a clean
// text's sanitize output, the stand-in's classify output, aggregate's
// fact), stored as schema 12 stored it (JSON records, outputs whole or
// marked) and as schema 13 stores it (binary records, packed outputs):
// the same rows, read by this build, and reports rows/s.
func BenchmarkExport(b *testing.B) {
	for _, form := range []string{"schema12", "schema13"} {
		b.Run(form, func(b *testing.B) {
			db, u := openNew(b, Options{})
			fillExportBench(b, db)
			if form == "schema12" {
				asSchema12(b, u)
			}
			b.ResetTimer()
			for b.Loop() {
				if err := report.Export(io.Discard, db, report.ExportOptions{Format: report.FormatJSONL}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(exportBenchItems)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

func fillExportBench(b *testing.B, db *DB) {
	b.Helper()
	apps := []string{"budget-buddy", "sleep-sounds", "photo-fix", "run-tracker"}
	var recs []pipeline.Record
	for i := range exportBenchItems {
		text := fmt.Sprintf("Review %d: the %s app %s after the last update, %s.", i, apps[i%4],
			[]string{"crashes", "works fine", "is slow", "lost my data"}[i%4/1], strings.Repeat("really ", i%5))
		recs = append(recs, pipeline.Record{ID: fmt.Sprintf("r%06d", i+1), Text: text, Line: i + 1, Fields: map[string]string{
			"app": apps[i%4], "date": fmt.Sprintf("2025-%02d-%02d", i%12+1, i%28+1), "locale": "en",
			"rating": fmt.Sprint(i%5 + 1), "version": fmt.Sprintf("2.%d.0", i%9)}})
	}
	if _, err := db.Ingest(recs); err != nil {
		b.Fatal(err)
	}
	outputs := map[string]func(it pipeline.Item) []byte{
		"sanitize": func(it pipeline.Item) []byte { return sanitizeOut(b, it.Record.Text, it.Record.Text, true) },
		"classify": func(it pipeline.Item) []byte {
			return []byte(`{"label":"ux","confidence":0.9,"reason":"instant stand-in","model":"none (instant stand-in)","usage":{"prompt_tokens":50,"candidate_tokens":20,"total_tokens":70}}`)
		},
		"aggregate": func(it pipeline.Item) []byte {
			return []byte(`{"label":"ux","groups":{"app":"` + it.Record.Fields["app"] + `","month":"` + it.Record.Fields["date"][:7] + `"},"rating":` + it.Record.Fields["rating"] + `}`)
		},
	}
	for _, s := range storetest.Stages {
		for {
			qs, err := db.Queued(s.Name, 0, 2000)
			if err != nil {
				b.Fatal(err)
			}
			if len(qs) == 0 {
				break
			}
			ts := make([]pipeline.Transition, len(qs))
			for i, q := range qs {
				ts[i] = pipeline.Transition{Stage: s.Name, ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded,
					Result: pipeline.Result{Output: outputs[s.Name](q.Item)}}
			}
			if err := db.Commit(ts); err != nil {
				b.Fatal(err)
			}
		}
	}
	if c, err := db.Counts(); err == nil && c.Done != exportBenchItems {
		b.Fatalf("%d items done, want %d", c.Done, exportBenchItems)
	}
}
