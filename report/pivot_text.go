package report

import (
	"fmt"
	"slices"
	"strings"
)

// pivot writes the --by table, the largest changes and the quotes.
func (t *textWriter) pivot(p *Pivot) {
	title := "By " + strings.Join(p.By, " × ")
	if len(p.By) == 0 {
		title = "All items"
	}
	if p.Period != "" {
		title += ", " + p.Period
	}
	t.heading(t.s(title))
	if len(p.Where) > 0 {
		t.printf("where %s\n\n", t.s(strings.Join(p.Where, ", ")))
	}
	if p.Total.Items == 0 {
		t.printf("no done item in this period\n")
		return
	}
	var header []string
	var right []bool
	for _, f := range p.By {
		header, right = append(header, t.s(f)), append(right, false)
	}
	header, right = append(header, "items", "avg rating"), append(right, true, true)
	for _, l := range p.Labels {
		header, right = append(header, t.s(l)), append(right, true)
	}
	header, right = append(header, "compared with"), append(right, false)
	var rows [][]string
	for _, r := range append(append([]PivotRow(nil), p.Rows...), p.Total) {
		var row []string
		if r.Key == nil {
			row = append(row, "all")
			for range p.By[min(1, len(p.By)):] {
				row = append(row, "")
			}
		} else {
			for _, v := range r.Key {
				row = append(row, t.s(v))
			}
		}
		row = append(row, num(r.Items), ratingText(r.Rating))
		for _, c := range r.Cells {
			row = append(row, cellText(c))
		}
		vs := ""
		if r.Previous != "" {
			vs = fmt.Sprintf("%s (%s items)", t.s(r.Previous), num(r.PreviousItems))
		}
		rows = append(rows, append(row, vs))
	}
	t.table(header, right, rows)
	t.printf("\n%scells: items (share of the row; change in items / in share points against the period compared with)\n", t.bullet())

	changes, in := p.latestChanges(10)
	if len(changes) > 0 {
		t.heading("What changed" + in)
		for _, c := range changes {
			t.printf("%s%s: %s\n", t.bullet(), t.s(strings.Join(c.Row, " ")), t.s(c.Describe()))
		}
	}

	t.heading("What people say")
	for _, c := range p.Total.Cells {
		if len(c.Quotes) == 0 {
			continue
		}
		t.printf("%s%s\n", t.bullet(), t.s(c.Label))
		for _, q := range c.Quotes {
			t.printf("  %s“%s” (%s)\n", t.bullet(), t.s(q.Text), t.s(quoteSource(q)))
		}
	}
}

// cellText is "42 (35.0%, +12 / +4.1 pts)".
func cellText(c PivotCell) string {
	s := fmt.Sprintf("%s (%.1f%%", num(c.Count), 100*c.Share)
	if c.Change != nil {
		s += ", " + signed(*c.Change)
		if c.ChangePts != nil {
			s += " / " + signedPts(*c.ChangePts) + " pts"
		}
	}
	return s + ")"
}

func ratingText(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *r)
}

// quoteSource is "r000042, TaskFlow 2026-11, rating 2, confidence 0.97".
func quoteSource(q Quote) string {
	s := q.ID
	if len(q.Where) > 0 {
		s += ", " + strings.Join(q.Where, " ")
	}
	if q.Rating != nil {
		s += ", rating " + FormatNumber(*q.Rating)
	}
	return s + ", confidence " + FormatNumber(q.Confidence)
}

// latestChanges is Changes, restricted to the latest month when the rows
// span every month (a table of all months, read for what changed last),
// with the heading's suffix (" in 2026-11").
func (p *Pivot) latestChanges(n int) ([]Change, string) {
	mi := slices.Index(p.By, MonthField)
	if p.Period != "" || mi < 0 {
		if p.Period != "" {
			return p.Changes(n), " in " + p.Period
		}
		return p.Changes(n), ""
	}
	latest := ""
	for _, r := range p.Rows {
		if isMonth(r.Key[mi]) && r.Key[mi] > latest {
			latest = r.Key[mi]
		}
	}
	var out []Change
	for _, c := range p.Changes(len(p.Rows) * len(p.Labels)) {
		if c.Row[mi] == latest && len(out) < n {
			out = append(out, c)
		}
	}
	return out, " in " + latest
}
