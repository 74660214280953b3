package report

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
)

func TestFormatNumber(t *testing.T) {
	tests := []struct {
		name string
		in   float64
		want string
	}{
		{"float noise", 0.8300000000000001, "0.83"},
		{"plain fraction", 0.83, "0.83"},
		{"integer", 5, "5"},
		{"negative", -4.1, "-4.1"},
		{"large integer", 1e17, "100000000000000000"},
		{"tiny", 0.000001, "0.000001"},
		{"sum noise", 0.1 + 0.2, "0.3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FormatNumber(tt.in); got != tt.want {
				t.Errorf("FormatNumber(%v) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// noisySource is two items whose classify confidence carries float noise
// and whose input has a field named like an output field.
func noisySource(fn func(FlatItem) error) error {
	items := []FlatItem{
		{Record: recordOf("a1", "Great, \"really\"\nworks", map[string]string{"app": "TaskFlow", "label": "from-input"}), Status: "done",
			Outputs: map[string]json.RawMessage{"classify": json.RawMessage(`{"label":"praise","confidence":0.8300000000000001,"reason":"likes it","tags":[0.30000000000000004]}`)}},
		{Record: recordOf("a2", "Crashes", map[string]string{"app": "NoteNest"}), Status: "dead at classify", DeadReason: "permanent: blocked",
			Outputs: map[string]json.RawMessage{"sanitize": json.RawMessage(`{"text":"Crashes"}`)}},
	}
	for _, it := range items {
		if err := fn(it); err != nil {
			return err
		}
	}
	return nil
}

func TestWriteFlat(t *testing.T) {
	stages := []string{"sanitize", "classify", "aggregate"}
	tests := []struct {
		name    string
		opts    FlatOptions
		want    string
		wantErr string
	}{
		{name: "all stages, csv", opts: FlatOptions{Format: FormatCSV, Stages: stages}, want: "" +
			"id,status,dead_reason,text,app,label,sanitize.text,classify.confidence,classify.label,classify.reason,classify.tags\n" +
			"a1,done,,\"Great, \"\"really\"\"\nworks\",TaskFlow,from-input,,0.83,praise,likes it,[0.3]\n" +
			"a2,dead at classify,permanent: blocked,Crashes,NoteNest,,Crashes,,,,\n"},
		{name: "one stage keeps the input columns", opts: FlatOptions{Format: FormatCSV, Stage: "classify", Stages: stages}, want: "" +
			"id,text,app,input.label,confidence,label,reason,tags\n" +
			"a1,\"Great, \"\"really\"\"\nworks\",TaskFlow,from-input,0.83,praise,likes it,[0.3]\n" +
			"a2,Crashes,NoteNest,,,,,\n"},
		{name: "jsonl, absent values left out", opts: FlatOptions{Format: FormatJSONL, Stages: stages}, want: "" +
			`{"id":"a1","status":"done","text":"Great, \"really\"\nworks","app":"TaskFlow","label":"from-input","classify.confidence":0.83,"classify.label":"praise","classify.reason":"likes it","classify.tags":[0.3]}` + "\n" +
			`{"id":"a2","status":"dead at classify","dead_reason":"permanent: blocked","text":"Crashes","app":"NoteNest","sanitize.text":"Crashes"}` + "\n"},
		{name: "chosen columns, tsv", opts: FlatOptions{Format: FormatTSV, Stages: stages, Columns: []string{"classify.label", "id"}}, want: "" +
			"classify.label\tid\npraise\ta1\n\ta2\n"},
		{name: "stage versions on the rows with that stage's output", opts: FlatOptions{Format: FormatCSV, Stages: stages,
			Versions: map[string]string{"classify": "v7", "sanitize": "s3"}, Columns: []string{"id", "classify.version", "sanitize.version"}}, want: "" +
			"id,classify.version,sanitize.version\na1,v7,\na2,,s3\n"},
		{name: "unknown column", opts: FlatOptions{Format: FormatCSV, Stages: stages, Columns: []string{"confidence"}}, wantErr: `no column "confidence"; the columns are: id,status`},
		{name: "unknown format", opts: FlatOptions{Format: "xlsx"}, wantErr: `unknown format "xlsx"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			err := WriteFlat(&b, noisySource, tt.opts)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Errorf("got\n%s\nwant\n%s", b.String(), tt.want)
			}
		})
	}
}

// TestWriteFlat_CSVAndJSONLAgree reads the fixed dataset's CSV export with
// a standard CSV reader and its JSONL export with a JSON decoder: every
// row must hold the same values.
func TestWriteFlat_CSVAndJSONLAgree(t *testing.T) {
	src := fixtureSource(fixtureReviews())
	var c, j bytes.Buffer
	opts := FlatOptions{Stages: []string{"sanitize", "classify", "aggregate"}}
	opts.Format = FormatCSV
	if err := WriteFlat(&c, src, opts); err != nil {
		t.Fatal(err)
	}
	opts.Format = FormatJSONL
	if err := WriteFlat(&j, src, opts); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&c).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&j)
	sc.Buffer(nil, 1<<20)
	n := 0
	for i := 1; sc.Scan(); i++ {
		n++
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.UseNumber()
		var row map[string]any
		if err := dec.Decode(&row); err != nil {
			t.Fatalf("jsonl line %d: %v", i, err)
		}
		for k, h := range recs[0] {
			got := recs[i][k]
			want := ""
			if v, ok := row[h]; ok {
				want = cellString(v)
			}
			if got != want {
				t.Errorf("row %d column %s: csv %q, jsonl %q", i, h, got, want)
			}
		}
	}
	if n != len(recs)-1 || n != len(fixtureReviews()) {
		t.Errorf("%d jsonl rows, %d csv rows, %d items", n, len(recs)-1, len(fixtureReviews()))
	}
}

// BenchmarkWriteFlat_1M exports 100,000 and 1,000,000 synthetic items as
// CSV and reports the peak heap seen every 50,000 rows: the two must be
// about the same (the export streams), whatever the item count.
//
//	go test ./report -run '^$' -bench WriteFlat_1M -benchtime 1x
func BenchmarkWriteFlat_1M(b *testing.B) {
	for _, items := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("items=%d", items), func(b *testing.B) {
			out := json.RawMessage(`{"label":"bug","confidence":0.8300000000000001,"reason":"it crashes"}`)
			var peak uint64
			var ms runtime.MemStats
			src := func(fn func(FlatItem) error) error {
				for i := range items {
					rec := recordOf(fmt.Sprintf("r%07d", i), "The app crashes when I open it.", map[string]string{"app": "TaskFlow", "date": "2026-11-02", "rating": "2"})
					if err := fn(FlatItem{Record: rec, Status: "done", Outputs: map[string]json.RawMessage{"classify": out}}); err != nil {
						return err
					}
					if i%50_000 == 0 {
						runtime.ReadMemStats(&ms)
						peak = max(peak, ms.HeapInuse)
					}
				}
				return nil
			}
			for b.Loop() {
				if err := WriteFlat(io.Discard, src, FlatOptions{Format: FormatCSV, Stages: []string{"classify"}}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		})
	}
}
