package storetest

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// confidence is the classify confidence Output gives an item's text:
// few values, so many quotes tie and are ordered by id.
func confidence(text string) float64 { return float64(len(text)%4) / 4 }

// CubeMatchesRecount checks a store that keeps a cube
// (pipeline.CubeReader) against the cube recomputed from its done items,
// as report's streaming pass computes it: per (group values, label) the
// item count, the exact rating sum and the CubeQuotes most confident
// items (ties by id) with their confidence, rating and text. A store
// that keeps none passes. A store that cannot vouch for its cube fails
// unless allowUnsure (the bbolt store refuses a cube that removals left
// short of quotes until its next writable open). A tally and done count
// read with the cube must equal Tally's and Counts' (the store is at rest).
func CubeMatchesRecount(t testing.TB, db pipeline.Database, allowUnsure bool) {
	t.Helper()
	cr, ok := db.(pipeline.CubeReader)
	if !ok {
		return
	}
	got, ok, err := cr.StoredCube()
	if err != nil {
		t.Fatalf("StoredCube: %v", err)
	}
	if !ok {
		if !allowUnsure {
			t.Errorf("StoredCube: the store cannot vouch for its cube")
		}
		return
	}
	if got.Tally != nil {
		// Read at rest: the cube's snapshot is the store's state now.
		tally, err := db.Tally()
		if err != nil {
			t.Fatal(err)
		}
		counts, err := db.Counts()
		if err != nil {
			t.Fatal(err)
		}
		if d := got.Tally.Diff(tally); len(d) > 0 {
			t.Errorf("the tally read with the cube differs from Tally: %v", d)
		}
		if got.Counts == nil {
			t.Error("the cube came with its tally but not the counts of its state")
		} else if !reflect.DeepEqual(*got.Counts, counts) {
			t.Errorf("the counts read with the cube are %+v, Counts has %+v", *got.Counts, counts)
		}
	}
	want := recountCube(t, db)
	gotCells := map[string]pipeline.StoredCell{}
	for _, c := range got.Cells {
		k := cubeCellName(c.Groups, c.Label)
		if _, dup := gotCells[k]; dup {
			t.Errorf("stored cube has cell %s twice", k)
		}
		gotCells[k] = c
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		g, ok := gotCells[k]
		if !ok {
			t.Errorf("stored cube lacks cell %s (%d items)", k, want[k].Count)
			continue
		}
		if d := diffCell(g, *want[k]); d != "" {
			t.Errorf("stored cube cell %s: %s", k, d)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(gotCells)) {
		if want[k] == nil {
			t.Errorf("stored cube has cell %s (%d items), the done items none", k, gotCells[k].Count)
		}
	}
}

func cubeCellName(groups map[string]string, label string) string {
	var b strings.Builder
	for _, f := range slices.Sorted(maps.Keys(groups)) {
		fmt.Fprintf(&b, "%s=%q ", f, groups[f])
	}
	return b.String() + "label=" + label
}

func recountCube(t testing.TB, db pipeline.Database) map[string]*pipeline.StoredCell {
	t.Helper()
	cells := map[string]*pipeline.StoredCell{}
	last := Stages[len(Stages)-1].Name
	err := db.ForEachDone(func(it pipeline.Item) error {
		var f pipeline.Fact
		if err := json.Unmarshal(it.Outputs[last], &f); err != nil || f.Label == "" {
			return nil
		}
		var out struct {
			Confidence float64 `json:"confidence"`
		}
		_ = json.Unmarshal(it.Outputs["classify"], &out)
		k := cubeCellName(f.Groups, f.Label)
		c := cells[k]
		if c == nil {
			c = &pipeline.StoredCell{Groups: f.Groups, Label: f.Label}
			cells[k] = c
		}
		c.Count++
		if scaled, ok := f.ScaledRating(); ok {
			c.Rating = c.Rating.Add(scaled, 1)
		}
		c.Quotes = append(c.Quotes, pipeline.CubeQuote{ID: it.ID, Confidence: out.Confidence, Rating: f.Rating, Text: it.Text})
		return nil
	})
	if err != nil {
		t.Fatalf("ForEachDone: %v", err)
	}
	for _, c := range cells {
		slices.SortFunc(c.Quotes, func(a, b pipeline.CubeQuote) int {
			return cmp.Or(cmp.Compare(b.Confidence, a.Confidence), strings.Compare(a.ID, b.ID))
		})
		c.Quotes = c.Quotes[:min(len(c.Quotes), pipeline.CubeQuotes)]
	}
	return cells
}

func diffCell(got, want pipeline.StoredCell) string {
	if got.Count != want.Count {
		return fmt.Sprintf("%d items, want %d", got.Count, want.Count)
	}
	if got.Rating.Count != want.Rating.Count || bigOf(got.Rating).Cmp(bigOf(want.Rating)) != 0 {
		return fmt.Sprintf("ratings %v over %d, want %v over %d", bigOf(got.Rating), got.Rating.Count, bigOf(want.Rating), want.Rating.Count)
	}
	quote := func(q pipeline.CubeQuote) string {
		r := "none"
		if q.Rating != nil {
			r = fmt.Sprint(*q.Rating)
		}
		return fmt.Sprintf("%s conf %v rating %s text %q", q.ID, q.Confidence, r, q.Text)
	}
	g, w := make([]string, len(got.Quotes)), make([]string, len(want.Quotes))
	for i, q := range got.Quotes {
		g[i] = quote(q)
	}
	for i, q := range want.Quotes {
		w[i] = quote(q)
	}
	if !slices.Equal(g, w) {
		return fmt.Sprintf("quotes %q, want %q", g, w)
	}
	return ""
}

func bigOf(r pipeline.RatingSum) *big.Int {
	if r.Scaled == nil {
		return new(big.Int)
	}
	return r.Scaled
}
