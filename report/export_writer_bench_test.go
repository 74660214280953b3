//go:build unix

package report

import (
	"context"
	"encoding/json"
	"io"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/internal/reviewgen"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
)

// writerItems are n items as the bench database's walk hands them to
// the rows' writer: generated reviews with their sanitize, classify and
// aggregate outputs (the shapes benchDB stores), built once so a
// benchmark times the writer, not the store.
func writerItems(b *testing.B, n int) []FlatItem {
	b.Helper()
	g := reviewgen.New(1)
	agg := &stages.Aggregate{}
	items := make([]FlatItem, 0, n)
	for i := range n {
		rv := g.Next()
		rec := pipeline.Record{ID: rv.ID, Text: rv.Text, Fields: map[string]string{
			"app": rv.App, "date": rv.Date, "rating": strconv.Itoa(rv.Rating), "locale": rv.Locale,
		}}
		sanitize, _ := json.Marshal(map[string]string{"text": rv.Text})
		classify, _ := json.Marshal(map[string]any{"label": []string{"bug", "pricing", "feature", "ux", "praise"}[(len(rv.Text)+i)%5],
			"confidence": float64(50+(len(rv.Text)*7+i)%50) / 100})
		res, err := agg.Process(context.Background(), pipeline.Item{Record: rec, Outputs: map[string]json.RawMessage{"classify": classify}})
		if err != nil {
			b.Fatal(err)
		}
		items = append(items, FlatItem{Record: rec, Status: "done", Outputs: map[string]json.RawMessage{
			"sanitize": sanitize, "classify": classify, "aggregate": res.Output,
		}})
	}
	return items
}

// BenchmarkRowWriter times only the rows' writer of `export --all` (the
// report side of the export's CPU): the items are in memory and the
// column names given, so what is measured is laying out, formatting and
// escaping each row, in ns and allocations per row.
//
//	go test ./report -run '^$' -bench RowWriter -benchmem
func BenchmarkRowWriter(b *testing.B) {
	const n = 20_000
	items := writerItems(b, n)
	src := func(fn func(FlatItem) error) error {
		for _, it := range items {
			if err := fn(it); err != nil {
				return err
			}
		}
		return nil
	}
	stageNames := []string{"sanitize", "classify", "aggregate"}
	o := FlatOptions{Stages: stageNames, Versions: map[string]string{"sanitize": "s1", "classify": "c1", "aggregate": "a1"}}
	names, err := flatNames(src, o)
	if err != nil {
		b.Fatal(err)
	}
	for _, format := range []string{FormatJSONL, FormatCSV} {
		b.Run(format, func(b *testing.B) {
			o.Format = format
			cpu0 := cpuTime(b)
			for b.Loop() {
				if err := writeFlat(io.Discard, src, o, func() (fieldNames, error) { return names, nil }); err != nil {
					b.Fatal(err)
				}
			}
			cpu := cpuTime(b) - cpu0
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/row")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*n), "cpu-ns/row")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// cpuTime is the process's user and system CPU so far: on a shared
// machine the CPU a row takes moves less with the load than its wall
// time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
