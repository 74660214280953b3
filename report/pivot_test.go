package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// fixtureSource streams the fixed dataset as export rows would see it.
func fixtureSource(reviews []fixtureReview) FlatSource {
	return func(fn func(FlatItem) error) error {
		for _, r := range reviews {
			fact, _ := json.Marshal(map[string]any{"label": r.Label, "groups": map[string]string{"app": r.App, "month": r.Date[:7]}, "rating": r.Rating})
			err := fn(FlatItem{Record: r.record(), Status: "done", Outputs: map[string]json.RawMessage{
				"sanitize":  json.RawMessage(`{"text":"x"}`),
				"classify":  r.classifyOutput(),
				"aggregate": fact,
			}})
			if err != nil {
				return err
			}
		}
		return nil
	}
}

// recount is the second path: label counts and rating sums per (app,
// month) recomputed from exported CSV rows.
type recount struct {
	items  int64
	labels map[string]int64
	rsum   float64
	rn     int64
}

func recountFromCSV(t *testing.T, b []byte) map[[2]string]*recount {
	t.Helper()
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	out := map[[2]string]*recount{}
	for _, r := range recs[1:] {
		k := [2]string{r[col["app"]], r[col["date"]][:7]}
		c := out[k]
		if c == nil {
			c = &recount{labels: map[string]int64{}}
			out[k] = c
		}
		c.items++
		c.labels[r[col["classify.label"]]]++
		v, err := strconv.ParseFloat(r[col["rating"]], 64)
		if err != nil {
			t.Fatalf("rating %q: %v", r[col["rating"]], err)
		}
		c.rsum += v
		c.rn++
	}
	return out
}

// TestPivot_AgreesWithExportedRows computes the app × month pivot and its
// changes two ways, the cube and a recount of the exported CSV rows, and
// requires them to agree on every cell.
func TestPivot_AgreesWithExportedRows(t *testing.T) {
	reviews := fixtureReviews()
	var b bytes.Buffer
	if err := WriteFlat(&b, fixtureSource(reviews), FlatOptions{Format: FormatCSV, Stages: []string{"sanitize", "classify", "aggregate"}}); err != nil {
		t.Fatal(err)
	}
	want := recountFromCSV(t, b.Bytes())
	for _, by := range [][]string{{"app", "month"}, {"month", "app"}} {
		t.Run(strings.Join(by, ","), func(t *testing.T) {
			p, err := fixtureCube(t).Pivot(PivotOptions{By: by})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Rows) != len(want) {
				t.Fatalf("%d rows, want %d", len(p.Rows), len(want))
			}
			ai, mi := slices.Index(by, "app"), slices.Index(by, "month")
			for _, r := range p.Rows {
				k := [2]string{r.Key[ai], r.Key[mi]}
				w := want[k]
				if w == nil {
					t.Fatalf("row %v not in the export", r.Key)
				}
				if r.Items != w.items {
					t.Errorf("%v: %d items, export has %d", k, r.Items, w.items)
				}
				if got, wantR := *r.Rating, w.rsum/float64(w.rn); math.Abs(got-wantR) > 1e-9 {
					t.Errorf("%v: avg rating %v, export gives %v", k, got, wantR)
				}
				prev := want[[2]string{k[0], monthAdd(k[1], -1)}]
				for _, c := range r.Cells {
					if c.Count != w.labels[c.Label] {
						t.Errorf("%v %s: %d, export has %d", k, c.Label, c.Count, w.labels[c.Label])
					}
					if prev == nil {
						if c.Change != nil && r.Previous != "" && *c.Change != c.Count {
							t.Errorf("%v %s: change %d with no previous month", k, c.Label, *c.Change)
						}
						continue
					}
					if c.Change == nil || *c.Change != w.labels[c.Label]-prev.labels[c.Label] {
						t.Errorf("%v %s: change %v, export gives %d", k, c.Label, c.Change, w.labels[c.Label]-prev.labels[c.Label])
					}
					pts := math.Round(1000*(float64(w.labels[c.Label])/float64(w.items)-float64(prev.labels[c.Label])/float64(prev.items))) / 10
					if c.ChangePts == nil || *c.ChangePts != pts {
						t.Errorf("%v %s: change %v pts, export gives %v", k, c.Label, c.ChangePts, pts)
					}
				}
			}
		})
	}
}

func TestCube_Pivot(t *testing.T) {
	nov := Window{From: "2026-11", To: "2026-11"}
	tests := []struct {
		name string
		opts PivotOptions
		// checks on the row whose key joins to row ("" for the total)
		row        string
		items      int64
		label      string
		count      int64
		change     *int64
		changePts  *float64
		previous   string
		rows       int
		wantErrSub string
	}{
		{name: "app by month, TaskFlow bugs grow", opts: PivotOptions{By: []string{"app", "month"}}, row: "TaskFlow 2026-11",
			items: 13, label: "bug", count: 8, change: ptr(int64(3)), changePts: ptr(16.1), previous: "2026-10", rows: 9},
		{name: "one month, rows by app, against October", opts: PivotOptions{By: []string{"app"}, Window: nov}, row: "TaskFlow",
			items: 13, label: "bug", count: 8, change: ptr(int64(3)), changePts: ptr(16.1), previous: "2026-10", rows: 3},
		{name: "no group field: the total", opts: PivotOptions{Window: nov}, row: "", items: 31, label: "bug", count: 13, change: ptr(int64(2)), previous: "2026-10", rows: 1},
		{name: "first month has no previous data", opts: PivotOptions{By: []string{"month"}}, row: "2026-09",
			items: 27, label: "bug", count: 9, change: ptr(int64(9)), previous: "2026-08", rows: 3},
		{name: "open window: no comparison", opts: PivotOptions{By: []string{"app"}}, row: "TaskFlow", items: 33, label: "bug", count: 15, rows: 3},
		{name: "range against the range before", opts: PivotOptions{By: []string{"app"}, Window: Window{From: "2026-10", To: "2026-11"}}, row: "TaskFlow",
			items: 24, label: "bug", count: 13, change: ptr(int64(11)), previous: "2026-08..2026-09", rows: 3},
		{name: "unknown field", opts: PivotOptions{By: []string{"locale"}}, wantErrSub: "locale: no such group field (have app, month)"},
		{name: "field twice", opts: PivotOptions{By: []string{"app", "app"}}, wantErrSub: "twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := fixtureCube(t).Pivot(tt.opts)
			if tt.wantErrSub != "" {
				// The facts, worded by the caller with its flag or key.
				var ge *GroupFieldError
				if !errors.As(err, &ge) || !strings.Contains(err.Error(), tt.wantErrSub) || strings.Contains(err.Error(), "--") {
					t.Fatalf("err = %v, want a GroupFieldError containing %q and no flag", err, tt.wantErrSub)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			rows := append(slices.Clone(p.Rows), p.Total)
			if tt.opts.By != nil && len(p.Rows) != tt.rows {
				t.Errorf("%d rows, want %d", len(p.Rows), tt.rows)
			}
			i := slices.IndexFunc(rows, func(r PivotRow) bool { return strings.Join(r.Key, " ") == tt.row })
			if tt.row == "" {
				i = len(rows) - 1
			}
			if i < 0 {
				t.Fatalf("no row %q", tt.row)
			}
			r := rows[i]
			if r.Items != tt.items || r.Previous != tt.previous {
				t.Errorf("row %q: %d items vs %q, want %d vs %q", tt.row, r.Items, r.Previous, tt.items, tt.previous)
			}
			c := r.Cells[slices.Index(p.Labels, tt.label)]
			if c.Count != tt.count {
				t.Errorf("%s: count %d, want %d", tt.label, c.Count, tt.count)
			}
			if fmt.Sprint(deref(c.Change)) != fmt.Sprint(deref(tt.change)) {
				t.Errorf("%s: change %v, want %v", tt.label, deref(c.Change), deref(tt.change))
			}
			if tt.changePts != nil && (c.ChangePts == nil || *c.ChangePts != *tt.changePts) {
				t.Errorf("%s: change %v pts, want %v", tt.label, deref(c.ChangePts), *tt.changePts)
			}
		})
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestPivot_Changes(t *testing.T) {
	p, err := fixtureCube(t).Pivot(PivotOptions{By: []string{"app"}, Window: Window{From: "2026-11", To: "2026-11"}})
	if err != nil {
		t.Fatal(err)
	}
	ch := p.Changes(3)
	if len(ch) != 3 {
		t.Fatalf("%d changes, want 3", len(ch))
	}
	for i := 1; i < len(ch); i++ {
		if ch[i].weight() > ch[i-1].weight() {
			t.Errorf("changes not largest first: %v", ch)
		}
	}
	if ch[0].Row[0] != "TaskFlow" || ch[0].Label != "bug" {
		t.Errorf("largest change is %v, want TaskFlow's bug reports (+3 items, +16.1 pts)", ch[0])
	}
	tf := slices.IndexFunc(p.Rows, func(r PivotRow) bool { return r.Key[0] == "TaskFlow" })
	c := p.Rows[tf].Cells[slices.Index(p.Labels, "bug")]
	got := Change{Row: []string{"TaskFlow"}, Label: "bug", Change: *c.Change, ChangePts: *c.ChangePts, Previous: "2026-10"}.Describe()
	if got != "+3 bug, +16.1 pts vs 2026-10" {
		t.Errorf("Describe = %q", got)
	}
}

// TestCube_QuotesAreDeterministic: the quotes of a label are the most
// confident reviews, ties by id, whatever order the items come in, and
// summing cells keeps the global best.
func TestCube_QuotesAreDeterministic(t *testing.T) {
	reviews := fixtureReviews()
	want := fixtureCube(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 5 {
		rng.Shuffle(len(reviews), func(i, j int) { reviews[i], reviews[j] = reviews[j], reviews[i] })
		c := NewCube([]string{"app", "month"})
		for _, r := range reviews {
			rating := r.Rating
			c.Add(Review{ID: r.ID, Label: r.Label, Confidence: r.Confidence, Rating: &rating, Groups: map[string]string{"app": r.App, "month": r.Date[:7]}, Text: r.Text})
		}
		c.Sort()
		a, _ := json.Marshal(c)
		b, _ := json.Marshal(want)
		if !bytes.Equal(a, b) {
			t.Fatalf("round %d: the cube depends on the order of the items", round)
		}
	}
	p, err := want.Pivot(PivotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Total.Cells {
		var all []fixtureReview
		for _, r := range fixtureReviews() {
			if r.Label == c.Label {
				all = append(all, r)
			}
		}
		slices.SortFunc(all, func(a, b fixtureReview) int {
			return quoteBefore(Quote{ID: a.ID, Confidence: a.Confidence}, Quote{ID: b.ID, Confidence: b.Confidence})
		})
		if len(c.Quotes) != DefaultQuotes {
			t.Fatalf("%s: %d quotes, want %d", c.Label, len(c.Quotes), DefaultQuotes)
		}
		for i, q := range c.Quotes {
			if q.ID != all[i].ID {
				t.Errorf("%s quote %d is %s, want %s (highest confidence, then id)", c.Label, i, q.ID, all[i].ID)
			}
		}
	}
}

func TestQuoteText(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"short", "ok  fine.\n\nyes", "ok fine. yes"},
		{"controls dropped", "a\x1b[2Jb\u202ec\x00d", "a [2Jbc d"},
		{"cut at a word", strings.Repeat("word ", 10), "word word…"},
		{"cut inside a long word", strings.Repeat("x", 20), strings.Repeat("x", 12) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := quoteText(tt.in, 12); got != tt.want {
				t.Errorf("quoteText(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseWindow(t *testing.T) {
	tests := []struct {
		name, month, from, to string
		want                  Window
		wantErr               string
	}{
		{name: "month", month: "2026-11", want: Window{"2026-11", "2026-11"}},
		{name: "range", from: "2026-09", to: "2026-11", want: Window{"2026-09", "2026-11"}},
		{name: "open", want: Window{}},
		{name: "not a month", month: "Nov", wantErr: `month "Nov" is not a month: write it as YYYY-MM`},
		{name: "bad end", from: "2026-01", to: "2026-13", wantErr: `to "2026-13" is not a month`},
		{name: "both", month: "2026-11", from: "2026-10", wantErr: "cannot be combined"},
		{name: "backwards", from: "2026-11", to: "2026-10", wantErr: "from 2026-11 is after to 2026-10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseWindow(tt.month, tt.from, tt.to)
			if tt.wantErr != "" {
				var we *WindowError
				if !errors.As(err, &we) || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "--") {
					t.Fatalf("err = %v, want a WindowError with %q and no flag", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// TestPivot_LatestChanges: a table of every month says what changed in
// the latest one.
func TestPivot_LatestChanges(t *testing.T) {
	p, err := fixtureCube(t).Pivot(PivotOptions{By: []string{"app", "month"}})
	if err != nil {
		t.Fatal(err)
	}
	ch, in := p.latestChanges(5)
	if in != " in 2026-11" || len(ch) == 0 {
		t.Fatalf("latestChanges = %v, %q", ch, in)
	}
	for _, c := range ch {
		if c.Row[1] != "2026-11" {
			t.Errorf("change %v is not in the latest month", c)
		}
	}
}
