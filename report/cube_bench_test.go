package report

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sawtooth-dev/sawtooth/internal/reviewgen"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
)

// benchDB opens the database the report benchmarks read: n generated
// reviews (internal/reviewgen) taken through sanitize, classify (its
// theme as the label) and aggregate. SAWTOOTH_BENCH_DB names a file kept
// between runs (built when missing), so a million items are built once.
func benchDB(b *testing.B, n int) *store.DB {
	b.Helper()
	defs := []store.StageDef{{Name: "sanitize"}, {Name: "classify"}, {Name: "aggregate"}}
	path := os.Getenv("SAWTOOTH_BENCH_DB")
	if path == "" {
		path = filepath.Join(b.TempDir(), "bench.db")
	}
	_, statErr := os.Stat(path)
	db, err := store.Open(path, store.Options{Stages: defs, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	if statErr == nil {
		return db
	}
	g := reviewgen.New(1)
	const chunk = 10_000
	for lo := 0; lo < n; lo += chunk {
		var recs []pipeline.Record
		for range min(chunk, n-lo) {
			rv := g.Next()
			recs = append(recs, pipeline.Record{ID: rv.ID, Text: rv.Text, Fields: map[string]string{
				"app": rv.App, "date": rv.Date, "rating": strconv.Itoa(rv.Rating), "locale": rv.Locale,
			}})
		}
		if _, err := db.Ingest(recs); err != nil {
			b.Fatal(err)
		}
	}
	agg := &stages.Aggregate{}
	for _, stage := range []string{"sanitize", "classify", "aggregate"} {
		for {
			qs, err := db.Queued(stage, 0, chunk)
			if err != nil {
				b.Fatal(err)
			}
			if len(qs) == 0 {
				break
			}
			ts := make([]pipeline.Transition, 0, len(qs))
			for i, q := range qs {
				tr := pipeline.Transition{Stage: stage, ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded}
				switch stage {
				case "sanitize":
					tr.Result.Output, _ = json.Marshal(map[string]string{"text": q.Item.Text})
				case "classify":
					tr.Result.Output, _ = json.Marshal(map[string]any{"label": []string{"bug", "pricing", "feature", "ux", "praise"}[(len(q.Item.Text)+i)%5],
						"confidence": float64(50+(len(q.Item.Text)*7+i)%50) / 100})
				case "aggregate":
					q.Item.Prev = q.Item.Outputs["classify"]
					if tr.Result, err = agg.Process(context.Background(), q.Item); err != nil {
						b.Fatal(err)
					}
				}
				ts = append(ts, tr)
			}
			if err := db.Commit(ts); err != nil {
				b.Fatal(err)
			}
		}
	}
	return db
}

// BenchmarkLoad_ByAppMonth is `report --by app,month`: Load with the
// store's cube ("stored") and with a pass over every done item
// ("streamed"), on SAWTOOTH_BENCH_ITEMS generated items (default 20,000).
//
//	SAWTOOTH_BENCH_ITEMS=1000000 SAWTOOTH_BENCH_DB=/tmp/1m.db go test ./report -run '^$' -bench Load_ByAppMonth -benchtime 3x
func BenchmarkLoad_ByAppMonth(b *testing.B) {
	n := 20_000
	if v, err := strconv.Atoi(os.Getenv("SAWTOOTH_BENCH_ITEMS")); err == nil && v > 0 {
		n = v
	}
	db := benchDB(b, n)
	counts, err := db.Counts()
	if err != nil {
		b.Fatal(err)
	}
	for name, src := range map[string]pipeline.Database{"stored": db, "streamed": streamed{db}} {
		b.Run(fmt.Sprintf("%s/items=%d", name, counts.Done), func(b *testing.B) {
			for b.Loop() {
				d, err := Load(src, LoadOptions{By: []string{"app", "month"}})
				if err != nil {
					b.Fatal(err)
				}
				if d.Pivot == nil || d.Pivot.Total.Items != int64(counts.Done) {
					b.Fatalf("pivot of %v items, want %d", d.Pivot.Total.Items, counts.Done)
				}
			}
		})
	}
}

// BenchmarkExport_All is `export --all --format jsonl` (and csv) of the
// database BenchmarkLoad_ByAppMonth reads, in rows per second.
//
//	SAWTOOTH_BENCH_ITEMS=100000 SAWTOOTH_BENCH_DB=/tmp/100k.db go test ./report -run '^$' -bench Export_All -benchtime 1x
func BenchmarkExport_All(b *testing.B) {
	n := 20_000
	if v, err := strconv.Atoi(os.Getenv("SAWTOOTH_BENCH_ITEMS")); err == nil && v > 0 {
		n = v
	}
	db := benchDB(b, n)
	counts, err := db.Counts()
	if err != nil {
		b.Fatal(err)
	}
	for _, format := range []string{FormatJSONL, FormatCSV} {
		b.Run(format, func(b *testing.B) {
			for b.Loop() {
				if err := Export(io.Discard, db, ExportOptions{Format: format}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(counts.Items)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkLoad_Where is `report --where app=sleep-sounds`, and with a
// --by field outside the stored cube: one pass over the items.
//
//	SAWTOOTH_BENCH_ITEMS=100000 SAWTOOTH_BENCH_DB=/tmp/100k.db go test ./report -run '^$' -bench Load_Where -benchmem -benchtime 3x
func BenchmarkLoad_Where(b *testing.B) {
	n := 20_000
	if v, err := strconv.Atoi(os.Getenv("SAWTOOTH_BENCH_ITEMS")); err == nil && v > 0 {
		n = v
	}
	db := benchDB(b, n)
	for name, by := range map[string][]string{"no-by": nil, "by-app,locale": {"app", "locale"}} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				d, err := Load(db, LoadOptions{By: by, Where: []Filter{{"app", "sleep-sounds"}}})
				if err != nil {
					b.Fatal(err)
				}
				if d.Counts.Items == 0 {
					b.Fatal("no item matched app=sleep-sounds")
				}
			}
		})
	}
}
