package cli

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// hostileReportDB runs the pipeline, against an in-process simulator, on
// six reviews whose id, app names and text are formulas or terminal
// escapes, two apps and two months, and returns the database's path.
func hostileReportDB(t *testing.T) string {
	t.Helper()
	sim := geminisim.New(geminisim.Config{Seed: 3})
	url, err := sim.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	t.Setenv("GEMINI_API_KEY", geminisim.DefaultAPIKey)
	dir := t.TempDir()
	input := filepath.Join(dir, "in.csv")
	rows := [][]string{
		{"id", "app", "date", "rating", "text"},
		{`=cmd|' /C calc'!A0`, "TaskFlow", "2026-11-03", "4", "the sync crashes"},
		{"r2", `=HYPERLINK("http://evil.example/","x")`, "2026-11-04", "2", "pricing too high"},
		{"r3", `+cmd|' /C calc'!A0`, "2026-11-05", "5", "love it"},
		{"r4", "@SUM(1+1)", "2026-11-06", "-3", "crash \x1b]0;pwned\x07 title"},
		{"r5", "NoteNest", "2026-10-06", "3", "fine"},
		{"r6", "TaskFlow", "2026-10-07", "4.05", "ok app"},
	}
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	w.WriteAll(rows)
	if err := os.WriteFile(input, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "h.db")
	var out, errOut syncBuffer
	if err := runApp([]string{"sawtooth", "run", "--db", db, "--input", input, "--base-url", url, "--quiet", "--rating-range=-10-10"}, &out, &errOut); err != nil {
		t.Fatalf("run: %v\n%s", err, errOut.String())
	}
	return db
}

// TestReportExport_CSVRaw: report --format csv and export --format
// csv|tsv quote formula cells unless --csv-raw; --csv-raw where no csv is
// written is a usage error.
func TestReportExport_CSVRaw(t *testing.T) {
	db := hostileReportDB(t)
	cells := func(t *testing.T, comma rune, args ...string) []string {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := runApp(append([]string{"sawtooth"}, args...), &out, &errOut); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, errOut.String())
		}
		r := csv.NewReader(&out)
		r.Comma = comma
		rows, err := r.ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		return slices.Concat(rows...)
	}
	formulas := []string{`=cmd|' /C calc'!A0`, `=HYPERLINK("http://evil.example/","x")`, `+cmd|' /C calc'!A0`, "@SUM(1+1)"}
	tests := []struct {
		name  string
		comma rune
		args  []string
		raw   bool
		want  []string // formulas the output must hold (before quoting)
	}{
		{"report csv", ',', []string{"report", "--db", db, "--format", "csv"}, false, formulas[1:]},
		{"report csv --csv-raw", ',', []string{"report", "--db", db, "--format", "csv", "--csv-raw"}, true, formulas[1:]},
		{"export --all csv", ',', []string{"export", "--db", db, "--all", "--format", "csv"}, false, formulas},
		{"export --all tsv", '\t', []string{"export", "--db", db, "--all", "--format", "tsv"}, false, formulas},
		{"export --all csv --csv-raw", ',', []string{"export", "--db", db, "--all", "--format", "csv", "--csv-raw"}, true, formulas},
		{"export --stage csv", ',', []string{"export", "--db", db, "--stage", "classify", "--format", "csv"}, false, formulas},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := cells(t, tt.comma, tt.args...)
			for _, f := range tt.want {
				want := "'" + f
				if tt.raw {
					want = f
				}
				if !slices.Contains(got, want) {
					t.Errorf("no cell %q", want)
				}
			}
			if tt.raw {
				return
			}
			for _, c := range got {
				if c != "" && strings.ContainsRune("=+@", rune(c[0])) {
					t.Errorf("cell %q would run as a formula", c)
				}
			}
			if tt.args[0] == "export" && !slices.Contains(got, "-3") {
				t.Errorf("the rating -3 is not written as a number: %q", got)
			}
		})
	}
	for _, args := range [][]string{
		{"report", "--db", db, "--format", "json", "--csv-raw"},
		{"report", "--db", db, "--csv-raw"},
		{"export", "--db", db, "--all", "--csv-raw"},
	} {
		var out, errOut bytes.Buffer
		err := runApp(append([]string{"sawtooth"}, args...), &out, &errOut)
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--csv-raw") || out.Len() > 0 {
			t.Errorf("%v: err %v (stdout %d bytes), want a usage error naming --csv-raw and no output", args, err, out.Len())
		}
	}
}

// TestReport_Where: --where filters the labels, groups and counts of the
// report, and a field no item has is a usage error naming the nearest
// one, with nothing written.
func TestReport_Where(t *testing.T) {
	db := hostileReportDB(t)
	var out, errOut bytes.Buffer
	if err := runApp([]string{"sawtooth", "report", "--db", db, "--format", "json", "--where", "app=TaskFlow"}, &out, &errOut); err != nil {
		t.Fatalf("report: %v\n%s", err, errOut.String())
	}
	var d struct {
		Counts    struct{ Items, Done int }
		Aggregate struct {
			Items  int
			Groups map[string]map[string]map[string]int
		}
	}
	if err := json.Unmarshal(out.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	if d.Counts.Items != 2 || d.Counts.Done != 2 || d.Aggregate.Items != 2 || len(d.Aggregate.Groups["app"]) != 1 || len(d.Aggregate.Groups["month"]) != 2 {
		t.Errorf("where app=TaskFlow (2 items over two months): counts %+v, aggregate %+v", d.Counts, d.Aggregate)
	}
	out.Reset()
	if err := runApp([]string{"sawtooth", "report", "--db", db, "--where", "app=NoteNest"}, &out, &errOut); err != nil {
		t.Fatalf("report: %v\n%s", err, errOut.String())
	}
	if strings.Contains(out.String(), "TaskFlow") || !strings.Contains(out.String(), "1 items: 1 done") {
		t.Errorf("report where app=NoteNest:\n%s", out.String())
	}
	for _, tt := range []struct{ where, nearest string }{{"ap=TaskFlow", "did you mean app?"}, {"Month=2026-11", "did you mean month?"}, {"lable=bug", "did you mean label?"}} {
		out.Reset()
		err := runApp([]string{"sawtooth", "report", "--db", db, "--where", tt.where}, &out, &errOut)
		var ue *UsageError
		field, _, _ := strings.Cut(tt.where, "=")
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), `"`+field+`"`) || !strings.Contains(err.Error(), tt.nearest) || out.Len() > 0 {
			t.Errorf("--where %s: err %v, stdout %q; want a usage error naming %q and %q", tt.where, err, out.String(), field, tt.nearest)
		}
	}
}
