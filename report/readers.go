package report

import (
	"fmt"
	"html/template"
	"math"
	"slices"
	"strings"
)

// The readers' section of the HTML page: what the items say for the
// period (headline numbers, the label mix per app with the change since
// the previous period, the monthly trend per label, quotes), drawn from
// Data.Cube. It comes before the run's operations.

type readersView struct {
	Period   string
	Previous string
	Where    string
	Cards    []card
	// Mix is the label mix by the first group field that is not the month.
	Mix    *mixView
	Trends []trendView
	Quotes []quoteGroup
	// Pivot is the --by table, when asked for.
	Pivot *mixView
}

type mixView struct {
	Title    string
	By       []string
	Labels   []string
	Rows     []mixRow
	Total    mixRow
	Previous bool
}

type mixRow struct {
	Key    []keyCell
	Items  string
	Rating string
	Vs     string
	Cells  []mixCell
	Quotes []quoteGroup
}

// keyCell is a group value; Long ones may wrap, short ones never do.
type keyCell struct {
	Value string
	Long  bool
}

type mixCell struct {
	N, Pct, Change string
	// ChangeClass is "up" or "down" for a change of at least a point.
	ChangeClass string
	Level       int // 0..5 shade by share of the row
}

type quoteGroup struct {
	Label  string
	Quotes []quoteView
}

type quoteView struct {
	Text, Source string
}

type trendView struct {
	Label   string
	Latest  string
	Caption string
	SVG     template.HTML
}

// readersPeriod is the window the readers' section shows: the one asked
// for, else the latest month with items.
func readersPeriod(d *Data) Window {
	if d.Window != (Window{}) {
		return d.Window
	}
	latest := ""
	for _, c := range d.Cube.Cells {
		if m := c.Key[slices.Index(d.Cube.Dims, MonthField)]; isMonth(m) && m > latest {
			latest = m
		}
	}
	if latest == "" {
		return Window{}
	}
	return Window{From: latest, To: latest}
}

func newReadersView(d *Data) (*readersView, error) {
	if d.Cube == nil || len(d.Cube.Cells) == 0 {
		return nil, nil
	}
	win := readersPeriod(d)
	v := &readersView{Period: cmpOr(win.String(), "all months"), Where: strings.Join(d.Cube.Where, ", ")}
	if prev, ok := win.previous(); ok {
		v.Previous = prev.String()
	}
	mixField := ""
	for _, f := range d.Cube.Dims {
		if f != MonthField {
			mixField = f
			break
		}
	}
	var by []string
	if mixField != "" {
		by = []string{mixField}
	}
	mix, err := d.Cube.Pivot(PivotOptions{By: by, Window: win})
	if err != nil {
		return nil, err
	}
	v.Cards = headlineCards(mix)
	if mixField != "" {
		v.Mix = newMixView(mix, fmt.Sprintf("Label mix per %s, %s", mixField, v.Period))
	}
	for _, c := range mix.Total.Cells {
		if g := newQuoteGroup(c); len(g.Quotes) > 0 {
			v.Quotes = append(v.Quotes, g)
		}
	}
	trend, err := d.Cube.Pivot(PivotOptions{By: []string{MonthField}})
	if err != nil {
		return nil, err
	}
	v.Trends = trendViews(trend, win)
	if d.Pivot != nil {
		title := "By " + strings.Join(d.Pivot.By, " × ")
		if d.Pivot.Period != "" {
			title += ", " + d.Pivot.Period
		}
		v.Pivot = newMixView(d.Pivot, title)
	}
	return v, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// headlineCards are the period's numbers: items, average rating, the
// largest label, and the largest change, each against the previous period.
func headlineCards(p *Pivot) []card {
	t := p.Total
	items := card{Label: "reviews", Value: num(t.Items), Note: "in " + cmpOr(p.Period, "all months"), Class: "info"}
	if t.Previous != "" {
		items.Note = fmt.Sprintf("%s items vs %s (%s)", signed(t.Items-t.PreviousItems), t.Previous, num(t.PreviousItems))
	}
	cards := []card{items}
	if t.Rating != nil {
		r := card{Label: "average rating", Value: fmt.Sprintf("%.2f", *t.Rating)}
		if t.PrevRating != nil {
			r.Note = fmt.Sprintf("%+.2f vs %s", *t.Rating-*t.PrevRating, t.Previous)
		}
		cards = append(cards, r)
	}
	if len(t.Cells) > 0 {
		c := t.Cells[0]
		top := card{Label: "most common: " + c.Label, Value: fmt.Sprintf("%.1f%%", 100*c.Share), Note: num(c.Count) + " reviews"}
		if c.ChangePts != nil {
			top.Note += ", " + signedPts(*c.ChangePts) + " pts vs " + t.Previous
		}
		cards = append(cards, top)
	}
	if ch := p.Changes(1); len(ch) > 0 {
		c := ch[0]
		cards = append(cards, card{Label: "largest change", Value: signedPts(c.ChangePts) + " pts", Note: fmt.Sprintf("%s: %s", cmpOr(strings.Join(c.Row, " "), "all"), c.Describe()), Class: "warn"})
	}
	return cards
}

func newMixView(p *Pivot, title string) *mixView {
	m := &mixView{Title: title, By: p.By, Labels: p.Labels}
	maxShare := 0.0
	for _, r := range p.Rows {
		for _, c := range r.Cells {
			maxShare = max(maxShare, c.Share)
		}
	}
	row := func(r PivotRow) mixRow {
		mr := mixRow{Items: num(r.Items), Rating: ratingText(r.Rating)}
		for _, k := range r.Key {
			mr.Key = append(mr.Key, keyCell{Value: k, Long: len([]rune(k)) > 24})
		}
		if r.Previous != "" {
			m.Previous = true
			mr.Vs = fmt.Sprintf("%s (%s)", r.Previous, num(r.PreviousItems))
		}
		for _, c := range r.Cells {
			mc := mixCell{N: num(c.Count), Pct: fmt.Sprintf("%.1f%%", 100*c.Share)}
			if c.Count > 0 && maxShare > 0 {
				mc.Level = max(1, int(math.Round(5*c.Share/maxShare)))
			}
			if c.Change != nil {
				mc.Change = signed(*c.Change)
				if c.ChangePts != nil {
					mc.Change += " / " + signedPts(*c.ChangePts) + " pts"
					switch {
					case *c.ChangePts >= 1:
						mc.ChangeClass = "up"
					case *c.ChangePts <= -1:
						mc.ChangeClass = "down"
					}
				}
			}
			mr.Cells = append(mr.Cells, mc)
			if g := newQuoteGroup(c); len(g.Quotes) > 0 {
				mr.Quotes = append(mr.Quotes, g)
			}
		}
		return mr
	}
	for _, r := range p.Rows {
		m.Rows = append(m.Rows, row(r))
	}
	m.Total = row(p.Total)
	m.Total.Quotes = nil
	return m
}

func newQuoteGroup(c PivotCell) quoteGroup {
	g := quoteGroup{Label: c.Label}
	for _, q := range c.Quotes {
		g.Quotes = append(g.Quotes, quoteView{Text: q.Text, Source: quoteSource(q)})
	}
	return g
}

// Geometry of one small multiple of the trend, in SVG user units.
const (
	trendW  = 300
	trendH  = 130
	trendL  = 34
	trendR  = 12
	trendT  = 12
	trendB  = 24
	trendPW = trendW - trendL - trendR
	trendPH = trendH - trendT - trendB
)

// trendViews draws, per label, its share of each month's reviews as a
// small line chart on a shared y scale (so the multiples compare), the
// period's months marked.
func trendViews(p *Pivot, win Window) []trendView {
	var rows []PivotRow
	for _, r := range p.Rows {
		if isMonth(r.Key[0]) {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return nil
	}
	top := 0.0
	for _, r := range rows {
		for _, c := range r.Cells {
			top = max(top, c.Share)
		}
	}
	ticks := niceTicks(100*top, 3)
	ytop := ticks[len(ticks)-1]
	f := func(v float64) string { return FormatNumber(math.Round(v*10) / 10) }
	x := func(i int) float64 {
		if len(rows) == 1 {
			return trendL + trendPW/2
		}
		return trendL + float64(i)*trendPW/float64(len(rows)-1)
	}
	y := func(pct float64) float64 { return trendT + trendPH - pct/ytop*trendPH }
	var out []trendView
	for li, label := range p.Labels {
		var b strings.Builder
		fmt.Fprintf(&b, `<svg class="trend" data-label="%s" data-points="%d" viewBox="0 0 %d %d" role="img" aria-label="%s" xmlns="http://www.w3.org/2000/svg">`,
			template.HTMLEscapeString(label), len(rows), trendW, trendH, template.HTMLEscapeString("share of reviews labelled "+label+" by month"))
		for _, t := range ticks {
			fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%s" y2="%s"/>`, trendL, trendL+trendPW, f(y(t)), f(y(t)))
			fmt.Fprintf(&b, `<text class="tick" x="%d" y="%s" text-anchor="end" dominant-baseline="middle">%s%%</text>`, trendL-4, f(y(t)), tickLabel(t))
		}
		for i, r := range rows {
			if win.Contains(r.Key[0]) && win != (Window{}) {
				fmt.Fprintf(&b, `<rect class="period" x="%s" y="%d" width="8" height="%d"/>`, f(x(i)-4), trendT, trendPH)
			}
		}
		var pts strings.Builder
		for i, r := range rows {
			fmt.Fprintf(&pts, "%s,%s ", f(x(i)), f(y(100*r.Cells[li].Share)))
		}
		color := stageColors[li%len(stageColors)]
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round"/>`, strings.TrimSpace(pts.String()), color)
		for i, r := range rows {
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="2.6" fill="%s"><title>%s: %s (%s of %s)</title></circle>`,
				f(x(i)), f(y(100*r.Cells[li].Share)), color, template.HTMLEscapeString(r.Key[0]), fmt.Sprintf("%.1f%%", 100*r.Cells[li].Share), num(r.Cells[li].Count), num(r.Items))
		}
		fmt.Fprintf(&b, `<text class="tick" x="%d" y="%d">%s</text>`, trendL, trendH-6, template.HTMLEscapeString(rows[0].Key[0]))
		fmt.Fprintf(&b, `<text class="tick" x="%d" y="%d" text-anchor="end">%s</text>`, trendL+trendPW, trendH-6, template.HTMLEscapeString(rows[len(rows)-1].Key[0]))
		b.WriteString(`</svg>`)
		// The headline value is the period's last month (the latest month
		// when the period is open or has no items).
		at := len(rows) - 1
		for i := len(rows) - 1; i >= 0; i-- {
			if win != (Window{}) && win.Contains(rows[i].Key[0]) {
				at = i
				break
			}
		}
		last := rows[at].Cells[li]
		out = append(out, trendView{
			Label:   label,
			Latest:  fmt.Sprintf("%.1f%% in %s", 100*last.Share, rows[at].Key[0]),
			Caption: fmt.Sprintf("share of each month's reviews, %s to %s", rows[0].Key[0], rows[len(rows)-1].Key[0]),
			SVG:     template.HTML(b.String()),
		})
	}
	return out
}
