package report

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Window is an inclusive range of months, "2006-01"; an empty bound is
// open. The zero Window holds every month.
type Window struct {
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
}

// ParseWindow checks a period's bounds and returns its window: month
// alone, or from and/or to. Errors are *WindowError, naming the bound.
func ParseWindow(month, from, to string) (Window, error) {
	bounds := []struct{ name, v string }{{"from", from}, {"to", to}}
	if month != "" {
		if from != "" || to != "" {
			return Window{}, &WindowError{Problem: MonthAndRange, Bound: "month", Value: month}
		}
		from, to = month, month
		bounds = bounds[:1]
		bounds[0] = struct{ name, v string }{"month", month}
	}
	for _, b := range bounds {
		if b.v == "" {
			continue
		}
		if _, err := time.Parse("2006-01", b.v); err != nil {
			return Window{}, &WindowError{Problem: NotAMonth, Bound: b.name, Value: b.v}
		}
	}
	if from != "" && to != "" && from > to {
		return Window{}, &WindowError{Problem: FromAfterTo, From: from, To: to}
	}
	return Window{From: from, To: to}, nil
}

// Contains says whether month m is in the window ("unknown" is only in
// the open window).
func (w Window) Contains(m string) bool {
	if w.From == "" && w.To == "" {
		return true
	}
	if !isMonth(m) {
		return false
	}
	return (w.From == "" || m >= w.From) && (w.To == "" || m <= w.To)
}

// String is "2026-11", "2026-09..2026-11", "..2026-11", or "" for all.
func (w Window) String() string {
	switch {
	case w.From == "" && w.To == "":
		return ""
	case w.From == w.To:
		return w.From
	}
	return w.From + ".." + w.To
}

// previous is the window of the same length just before w; ok is false
// when w is open at either end.
func (w Window) previous() (Window, bool) {
	if w.From == "" || w.To == "" {
		return Window{}, false
	}
	n := monthIndex(w.To) - monthIndex(w.From) + 1
	return Window{From: monthAdd(w.From, -n), To: monthAdd(w.To, -n)}, true
}

func isMonth(s string) bool {
	_, err := time.Parse("2006-01", s)
	return err == nil
}

func monthIndex(m string) int {
	t, _ := time.Parse("2006-01", m)
	return t.Year()*12 + int(t.Month()) - 1
}

// monthAdd returns month m moved by n months ("" when m is not a month).
func monthAdd(m string, n int) string {
	t, err := time.Parse("2006-01", m)
	if err != nil {
		return ""
	}
	return t.AddDate(0, n, 0).Format("2006-01")
}

// Pivot is label counts and shares, average rating, quotes and the change
// against the previous period, by the values of some group fields. It is
// `report --by`'s model, shared by every format.
type Pivot struct {
	// By are the group fields of the rows, in the order asked.
	By []string `json:"by"`
	// Period is the window shown ("" for every month).
	Period string `json:"period,omitempty"`
	// Where lists the filters applied ("app=TaskFlow").
	Where []string `json:"where,omitempty"`
	// Labels are the labels in the period, most items first.
	Labels []string `json:"labels"`
	// Total is every item in the period, compared with the previous
	// period of the same length when the window is closed.
	Total PivotRow `json:"total"`
	// Rows are one per combination of By values that has items.
	Rows []PivotRow `json:"rows"`
}

// PivotRow is one combination of group values.
type PivotRow struct {
	// Key holds the row's value for each of the pivot's By fields.
	Key   []string `json:"key"`
	Items int64    `json:"items"`
	// Rating is the mean rating of the row's rated items, nil when none.
	Rating *float64 `json:"avg_rating,omitempty"`
	// Previous names the period compared against ("2026-10"), "" when the
	// row has none (an open window, or an unknown month).
	Previous      string   `json:"previous,omitempty"`
	PreviousItems int64    `json:"previous_items,omitempty"`
	PrevRating    *float64 `json:"previous_avg_rating,omitempty"`
	// Cells are one per label, in the pivot's Labels order.
	Cells []PivotCell `json:"labels"`
}

// PivotCell is one label in one row.
type PivotCell struct {
	Label string `json:"label"`
	Count int64  `json:"count"`
	// Share is Count over the row's items, 0..1.
	Share  float64  `json:"share"`
	Rating *float64 `json:"avg_rating,omitempty"`
	// Change is Count minus the previous period's count; ChangePts is the
	// share's change in percentage points. Both are nil without a previous
	// period; ChangePts also when the previous period had no items.
	Change    *int64   `json:"change,omitempty"`
	ChangePts *float64 `json:"change_pts,omitempty"`
	// Quotes are the most confident reviews of the label in the row.
	Quotes []Quote `json:"quotes,omitempty"`
}

// PivotOptions choose a pivot of a cube.
type PivotOptions struct {
	// By are the group fields of the rows; each must be one of the cube's
	// Dims. Empty gives one row, the total.
	By []string
	// Window restricts the months shown.
	Window Window
}

// acc sums cells.
type acc struct {
	items  int64
	labels map[string]*LabelStats
	quotes int
}

func newAcc(quotes int) *acc { return &acc{labels: map[string]*LabelStats{}, quotes: quotes} }

func (a *acc) add(c *CubeCell) {
	a.items += c.Items
	for l, s := range c.Labels {
		t := a.labels[l]
		if t == nil {
			t = &LabelStats{}
			a.labels[l] = t
		}
		t.Count += s.Count
		t.RatingSum += s.RatingSum
		t.RatingCount += s.RatingCount
		for _, q := range s.Quotes {
			t.Quotes = keepBest(t.Quotes, q, a.quotes)
		}
	}
}

func (a *acc) rating() *float64 {
	var sum float64
	var n int64
	// In label order: a float sum in map order could differ in its last
	// bits from one report to the next.
	for _, l := range sortedKeys(a.labels) {
		sum += a.labels[l].RatingSum
		n += a.labels[l].RatingCount
	}
	if n == 0 {
		return nil
	}
	return ptr(sum / float64(n))
}

func ptr[T any](v T) *T { return &v }

// Pivot sums the cube's cells into the rows of o.By over o.Window, and
// compares each row with its previous period: with "month" among By, the
// month before the row's; otherwise, with a closed window, the window of
// the same length just before it.
func (c *Cube) Pivot(o PivotOptions) (*Pivot, error) {
	pos, err := c.positions(o.By)
	if err != nil {
		return nil, err
	}
	byMonth := slices.Index(o.By, MonthField)
	prevWin, hasPrevWin := o.Window.previous()
	sums := c.sum(o, pos)

	p := &Pivot{By: slices.Clone(o.By), Period: o.Window.String(), Where: c.Where}
	labelTotals := map[string]int64{}
	for l, s := range sums.total.labels {
		labelTotals[l] = s.Count
	}
	p.Labels = sortedKeys(labelTotals)
	slices.SortStableFunc(p.Labels, func(a, b string) int { return cmp.Compare(labelTotals[b], labelTotals[a]) })

	var totalPrevName string
	if hasPrevWin {
		totalPrevName = prevWin.String()
	}
	p.Total = p.row(nil, sums.total, sums.totalPrev, totalPrevName)
	for ks, a := range sums.cur {
		k := sums.keys[ks]
		name := ""
		switch {
		case byMonth >= 0:
			name = monthAdd(k[byMonth], -1)
		case hasPrevWin:
			name = prevWin.String()
		}
		p.Rows = append(p.Rows, p.row(k, a, sums.prev[ks], name))
	}
	p.sortRows()
	return p, nil
}

// positions is where each of by's fields is in the cube's key: a field
// the cube does not group by, or one named twice, is a GroupFieldError.
func (c *Cube) positions(by []string) ([]int, error) {
	pos := make([]int, len(by))
	for i, f := range by {
		pos[i] = slices.Index(c.Dims, f)
		if pos[i] < 0 {
			return nil, &GroupFieldError{Field: f, Dims: slices.Clone(c.Dims)}
		}
		if slices.Index(by, f) != i {
			return nil, &GroupFieldError{Field: f, Dims: slices.Clone(c.Dims), Twice: true}
		}
	}
	return pos, nil
}

// pivotSums are a pivot's cells summed by row (its key at pos), in the
// window and in each row's previous period, and in total.
type pivotSums struct {
	cur, prev        map[string]*acc // prev is keyed like cur: the previous period of that row
	keys             map[string][]string
	total, totalPrev *acc
}

// sum adds every cell of the cube into its row's sums for the window and
// for the previous period: with "month" among By, the month before the
// row's; otherwise the window before o.Window.
func (c *Cube) sum(o PivotOptions, pos []int) pivotSums {
	monthPos := slices.Index(c.Dims, MonthField)
	byMonth := slices.Index(o.By, MonthField)
	prevWin, hasPrevWin := o.Window.previous()
	quotes := cmp.Or(c.Quotes, DefaultQuotes)
	s := pivotSums{cur: map[string]*acc{}, prev: map[string]*acc{}, keys: map[string][]string{},
		total: newAcc(quotes), totalPrev: newAcc(quotes)}
	rowOf := func(cell *CubeCell) []string {
		k := make([]string, len(pos))
		for i, p := range pos {
			k[i] = cell.Key[p]
		}
		return k
	}
	get := func(m map[string]*acc, k []string) *acc {
		ks := cellKey(k)
		a := m[ks]
		if a == nil {
			a = newAcc(quotes)
			m[ks] = a
		}
		return a
	}
	for _, cell := range c.Cells {
		month := cell.Key[monthPos]
		k := rowOf(cell)
		if o.Window.Contains(month) {
			get(s.cur, k).add(cell)
			s.keys[cellKey(k)] = k
			s.total.add(cell)
		}
		if hasPrevWin && prevWin.Contains(month) {
			s.totalPrev.add(cell)
			if byMonth < 0 {
				get(s.prev, k).add(cell)
			}
		}
		if byMonth >= 0 {
			// This cell is the previous period of the row one month on.
			if next := monthAdd(month, 1); next != "" && o.Window.Contains(next) {
				nk := slices.Clone(k)
				nk[byMonth] = next
				get(s.prev, nk).add(cell)
			}
		}
	}
	return s
}

// row builds one row from its period's sums and the previous period's.
func (p *Pivot) row(key []string, a, prev *acc, prevName string) PivotRow {
	r := PivotRow{Key: key, Items: a.items, Rating: a.rating(), Previous: prevName}
	if prev == nil {
		prev = newAcc(0)
	}
	if prevName != "" {
		r.PreviousItems = prev.items
		r.PrevRating = prev.rating()
	}
	for _, l := range p.Labels {
		s := a.labels[l]
		if s == nil {
			s = &LabelStats{}
		}
		c := PivotCell{Label: l, Count: s.Count, Share: share(s.Count, a.items), Quotes: s.Quotes}
		if s.RatingCount > 0 {
			c.Rating = ptr(s.RatingSum / float64(s.RatingCount))
		}
		if prevName != "" {
			var pc int64
			if ps := prev.labels[l]; ps != nil {
				pc = ps.Count
			}
			c.Change = ptr(s.Count - pc)
			if prev.items > 0 && a.items > 0 {
				c.ChangePts = ptr(math.Round(1000*(c.Share-share(pc, prev.items))) / 10)
			}
		}
		r.Cells = append(r.Cells, c)
	}
	return r
}

func share(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// sortRows orders rows field by field: months in time order, other values
// by their items in the pivot (most first), then by name.
func (p *Pivot) sortRows() {
	totals := make([]map[string]int64, len(p.By))
	for i := range p.By {
		totals[i] = map[string]int64{}
		for _, r := range p.Rows {
			totals[i][r.Key[i]] += r.Items
		}
	}
	slices.SortFunc(p.Rows, func(a, b PivotRow) int {
		for i, f := range p.By {
			if f == MonthField {
				if c := cmp.Compare(a.Key[i], b.Key[i]); c != 0 {
					return c
				}
				continue
			}
			if c := cmp.Or(cmp.Compare(totals[i][b.Key[i]], totals[i][a.Key[i]]), cmp.Compare(a.Key[i], b.Key[i])); c != 0 {
				return c
			}
		}
		return 0
	})
}

// Change is one label's change in one row, for the "what changed" list.
type Change struct {
	Row       []string `json:"key"`
	Label     string   `json:"label"`
	Count     int64    `json:"count"`
	Change    int64    `json:"change"`
	ChangePts float64  `json:"change_pts"`
	Previous  string   `json:"previous"`
}

// Changes lists the n largest changes in the pivot's rows, ranked by the
// change in items times the change in share points: a share that moved
// many points on a handful of items is noise, many more items in the
// same share is growth, and both together is the story. Ties by row and
// label.
func (p *Pivot) Changes(n int) []Change {
	var out []Change
	for _, r := range p.Rows {
		for _, c := range r.Cells {
			if c.Change == nil || c.ChangePts == nil || (*c.Change == 0 && *c.ChangePts == 0) {
				continue
			}
			out = append(out, Change{Row: r.Key, Label: c.Label, Count: c.Count, Change: *c.Change, ChangePts: *c.ChangePts, Previous: r.Previous})
		}
	}
	slices.SortStableFunc(out, func(a, b Change) int {
		return cmp.Or(cmp.Compare(b.weight(), a.weight()), cmp.Compare(math.Abs(b.ChangePts), math.Abs(a.ChangePts)),
			slices.Compare(a.Row, b.Row), cmp.Compare(a.Label, b.Label))
	})
	return out[:min(n, len(out))]
}

// weight ranks a change for Changes.
func (c Change) weight() float64 { return float64(abs64(c.Change)) * math.Abs(c.ChangePts) }

func abs64(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// Describe says a change as a person would: "+12 bug, +4.1 pts vs 2026-10".
func (c Change) Describe() string {
	return fmt.Sprintf("%s %s, %s pts vs %s", signed(c.Change), c.Label, signedPts(c.ChangePts), c.Previous)
}

// signed formats n with its sign and thousands separators: +12, −3, 0.
func signed(n int64) string {
	switch {
	case n > 0:
		return "+" + num(n)
	case n < 0:
		return "−" + num(-n)
	}
	return "0"
}

// signedPts formats a change in percentage points with one decimal.
func signedPts(x float64) string {
	s := FormatNumber(math.Abs(math.Round(x*10) / 10))
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	switch {
	case x >= 0.05:
		return "+" + s
	case x <= -0.05:
		return "−" + s
	}
	return "0.0"
}
