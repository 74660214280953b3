package report

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strconv"
	"strings"
)

// chart is one SVG chart over the seconds of a run: lines, steps, areas
// and bars sharing an x axis (seconds since the run started) and a y axis
// from zero.
type chart struct {
	ID      string
	Title   string
	Caption string
	YLabel  string
	XMax    float64 // seconds; the x axis spans [0, XMax]
	Series  []series
	// Marks are x positions (seconds) of events drawn as ticks along the
	// bottom of the plot, e.g. the seconds that saw a 429.
	Marks      []float64
	MarksName  string
	MarksColor string
}

// seriesKind is how a series is drawn.
type seriesKind int

const (
	kindLine seriesKind = iota // straight segments between points
	kindStep                   // holds each value until the next point
	kindArea                   // a line filled down to zero
	kindBars                   // one bar per point with y > 0
)

type series struct {
	Name   string
	Color  string
	Kind   seriesKind
	Points []point
	Dashed bool
	// Dash is an SVG stroke-dasharray ("9 5"); it overrides Dashed.
	Dash string
	// Width is the line's stroke width; 0 means 2.
	Width float64
	// Marker is a shape ("circle", "square", "triangle", "diamond",
	// "cross") drawn at a few points of a line and in its legend.
	Marker string
	// MarkerPhase shifts the markers along the line (in markers' spacing
	// divided by the number of series) so two series' markers do not
	// fall on the same spot.
	MarkerPhase float64
	// Top draws the series over the others (the legend keeps its order).
	Top bool
}

type point struct{ X, Y float64 }

// Geometry of every chart, in SVG user units; the SVG scales to its box.
const (
	chartW  = 1100
	chartH  = 280
	marginL = 64
	marginR = 20
	marginT = 40
	marginB = 36
	plotW   = chartW - marginL - marginR
	plotH   = chartH - marginT - marginB
)

// empty says whether the chart has nothing to draw.
func (c *chart) empty() bool {
	for _, s := range c.Series {
		if len(s.Points) > 0 {
			return false
		}
	}
	return true
}

// SVG renders the chart as an inline <svg> element. Names and titles are
// escaped; everything else is numbers.
func (c *chart) SVG() template.HTML {
	var b strings.Builder
	pl := c.plot()
	fmt.Fprintf(&b, `<svg class="chart" id="%s" viewBox="0 0 %d %d" role="img" aria-labelledby="%s-title" xmlns="http://www.w3.org/2000/svg">`, esc(c.ID), chartW, chartH, esc(c.ID))
	fmt.Fprintf(&b, `<title id="%s-title">%s</title>`, esc(c.ID), esc(c.Title))
	c.writeAxes(&b, pl)
	c.writeSeries(&b, pl)
	c.writeLegend(&b)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// esc escapes a name or title for the SVG.
var esc = html.EscapeString

// svgNum is a coordinate rounded to a tenth of a unit.
func svgNum(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }

// plotArea maps a chart's values to SVG coordinates: x from 0 to xmax,
// y from 0 to the top tick.
type plotArea struct {
	xmax, ytop float64
	yticks     []float64
}

func (p plotArea) x(v float64) float64 { return marginL + v/p.xmax*plotW }
func (p plotArea) y(v float64) float64 { return marginT + plotH - v/p.ytop*plotH }

// plot is the chart's scale: the largest x and y of its series (x at
// least XMax) and the y ticks.
func (c *chart) plot() plotArea {
	xmax := c.XMax
	if xmax <= 0 {
		xmax = 1
	}
	ymax := 0.0
	for _, s := range c.Series {
		for _, p := range s.Points {
			ymax = max(ymax, p.Y)
			xmax = max(xmax, p.X)
		}
	}
	yticks := niceTicks(ymax, 5)
	return plotArea{xmax: xmax, ytop: yticks[len(yticks)-1], yticks: yticks}
}

// writeAxes writes the grid, the ticks' labels and the axes' labels.
func (c *chart) writeAxes(b *strings.Builder, pl plotArea) {
	f, x, y := svgNum, pl.x, pl.y
	b.WriteString(`<g class="grid">`)
	for _, t := range pl.yticks {
		fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%s" y2="%s"/>`, marginL, marginL+plotW, f(y(t)), f(y(t)))
	}
	xticks := timeTicks(pl.xmax, 10)
	for _, t := range xticks {
		fmt.Fprintf(b, `<line x1="%s" x2="%s" y1="%d" y2="%d"/>`, f(x(t)), f(x(t)), marginT, marginT+plotH)
	}
	b.WriteString(`</g><g class="axis">`)
	for _, t := range pl.yticks {
		fmt.Fprintf(b, `<text x="%d" y="%s" text-anchor="end" dominant-baseline="middle">%s</text>`, marginL-8, f(y(t)), esc(tickLabel(t)))
	}
	for _, t := range xticks {
		fmt.Fprintf(b, `<text x="%s" y="%d" text-anchor="middle">%s</text>`, f(x(t)), marginT+plotH+20, esc(clock(t)))
	}
	fmt.Fprintf(b, `<line class="baseline" x1="%d" x2="%d" y1="%d" y2="%d"/>`, marginL, marginL+plotW, marginT+plotH, marginT+plotH)
	if c.YLabel != "" {
		fmt.Fprintf(b, `<text class="ylabel" x="%d" y="%d">%s</text>`, marginL, marginT-10, esc(c.YLabel))
	}
	fmt.Fprintf(b, `<text class="xlabel" x="%d" y="%d" text-anchor="end">time since start (m:ss)</text>`, marginL+plotW, chartH-2)
	b.WriteString(`</g>`)
}

// writeSeries writes the series, areas first so lines stay on top, then
// lines and bars, then the series asked to be on top; then the marks.
func (c *chart) writeSeries(b *strings.Builder, pl plotArea) {
	f, x, base := svgNum, pl.x, pl.y(0)
	for pass := 0; pass < 3; pass++ {
		for _, s := range c.Series {
			p := 1
			switch {
			case s.Top:
				p = 2
			case s.Kind == kindArea:
				p = 0
			}
			if p != pass || len(s.Points) == 0 {
				continue
			}
			c.writeOne(b, pl, s)
		}
	}
	if len(c.Marks) > 0 {
		var d strings.Builder
		for _, m := range c.Marks {
			fmt.Fprintf(&d, "M%s,%s v-9 ", f(x(m)), f(base))
		}
		fmt.Fprintf(b, `<path class="marks" data-series="%s" data-points="%d" d="%s" stroke="%s" stroke-width="2"/>`,
			esc(c.MarksName), len(c.Marks), strings.TrimSpace(d.String()), esc(c.MarksColor))
	}
}

// writeOne writes one series as an area, bars or a line.
func (c *chart) writeOne(b *strings.Builder, pl plotArea, s series) {
	f, x, y, base := svgNum, pl.x, pl.y, pl.y(0)
	attrs := fmt.Sprintf(`class="series" data-series="%s" data-points="%d"`, esc(s.Name), len(s.Points))
	switch s.Kind {
	case kindArea:
		var d strings.Builder
		fmt.Fprintf(&d, "M%s,%s", f(x(s.Points[0].X)), f(base))
		for _, p := range s.Points {
			fmt.Fprintf(&d, " L%s,%s", f(x(p.X)), f(y(p.Y)))
		}
		fmt.Fprintf(&d, " L%s,%s Z", f(x(s.Points[len(s.Points)-1].X)), f(base))
		fmt.Fprintf(b, `<path %s d="%s" fill="%s" fill-opacity="0.28" stroke="%s" stroke-width="1.2"/>`, attrs, d.String(), esc(s.Color), esc(s.Color))
	case kindBars:
		bw := max(1.5, math.Min(8, plotW/float64(max(len(s.Points), 1))*0.8))
		var d strings.Builder
		n := 0
		for _, p := range s.Points {
			if p.Y <= 0 {
				continue
			}
			n++
			fmt.Fprintf(&d, "M%s,%s V%s ", f(x(p.X)), f(base), f(y(p.Y)))
		}
		if n == 0 {
			// Keep the element (and its count) so the legend has a
			// series to point at even when nothing happened.
			d.WriteString("M0,0")
		}
		fmt.Fprintf(b, `<path %s data-nonzero="%d" d="%s" stroke="%s" stroke-width="%s" fill="none"/>`, attrs, n, strings.TrimSpace(d.String()), esc(s.Color), f(bw))
	default:
		c.writeLine(b, pl, s, attrs)
	}
}

// writeLine writes a line or step series and its markers.
func (c *chart) writeLine(b *strings.Builder, pl plotArea, s series, attrs string) {
	f, x, y := svgNum, pl.x, pl.y
	var pts strings.Builder
	for i, p := range s.Points {
		if s.Kind == kindStep && i > 0 {
			fmt.Fprintf(&pts, "%s,%s ", f(x(p.X)), f(y(s.Points[i-1].Y)))
		}
		fmt.Fprintf(&pts, "%s,%s ", f(x(p.X)), f(y(p.Y)))
	}
	// Dashed lines are wider, so one that runs under another
	// still shows at its edges.
	style := ` stroke-width="2"`
	if s.Dashed {
		style = ` stroke-width="4" stroke-dasharray="7 5"`
	}
	if s.Width > 0 {
		style = fmt.Sprintf(` stroke-width="%s"`, f(s.Width))
	}
	if s.Dash != "" {
		style += fmt.Sprintf(` stroke-dasharray="%s"`, esc(s.Dash))
	}
	fmt.Fprintf(b, `<polyline %s points="%s" fill="none" stroke="%s" stroke-linejoin="round"%s/>`, attrs, strings.TrimSpace(pts.String()), esc(s.Color), style)
	if s.Marker != "" {
		const perLine = 8
		fmt.Fprintf(b, `<g class="markers" data-marker="%s">`, esc(s.Marker))
		for k := range perLine {
			at := (float64(k) + 0.5 + s.MarkerPhase/float64(max(len(c.Series), 1))) / perLine
			p := pointAt(s.Points, at)
			b.WriteString(marker(s.Marker, x(p.X), y(p.Y), s.Color))
		}
		b.WriteString(`</g>`)
	}
}

// writeLegend writes the legend, left to right above the plot.
func (c *chart) writeLegend(b *strings.Builder) {
	f := svgNum
	lx := float64(marginL + 130)
	item := func(name, color string, kind seriesKind, dashed bool, dash, mark string) {
		switch kind {
		case kindArea:
			fmt.Fprintf(b, `<rect x="%s" y="12" width="18" height="12" fill="%s" fill-opacity="0.28" stroke="%s"/>`, f(lx), esc(color), esc(color))
		case kindBars:
			fmt.Fprintf(b, `<rect x="%s" y="10" width="5" height="16" fill="%s"/>`, f(lx+6), esc(color))
		default:
			attr := ""
			switch {
			case dash != "":
				attr = fmt.Sprintf(` stroke-dasharray="%s"`, esc(dash))
			case dashed:
				attr = ` stroke-dasharray="6 4"`
			}
			w := 18.0
			if mark != "" {
				w = 30
			}
			fmt.Fprintf(b, `<line x1="%s" x2="%s" y1="18" y2="18" stroke="%s" stroke-width="3"%s/>`, f(lx), f(lx+w), esc(color), attr)
			if mark != "" {
				b.WriteString(marker(mark, lx+w/2, 18, color))
			}
			lx += w - 18
		}
		fmt.Fprintf(b, `<text class="legend" x="%s" y="22">%s</text>`, f(lx+24), esc(name))
		lx += 24 + 7.2*float64(len([]rune(name))) + 22
	}
	for _, s := range c.Series {
		item(s.Name, s.Color, s.Kind, s.Dashed, s.Dash, s.Marker)
	}
	if len(c.Marks) > 0 {
		item(c.MarksName, c.MarksColor, kindBars, false, "", "")
	}
}

// niceTicks returns 0 and evenly spaced round values up to at least max,
// about n of them.
func niceTicks(max float64, n int) []float64 {
	if max <= 0 || math.IsNaN(max) || math.IsInf(max, 0) {
		return []float64{0, 1}
	}
	step := niceStep(max / float64(n))
	var out []float64
	for v := 0.0; ; v += step {
		out = append(out, v)
		if v >= max {
			return out
		}
	}
}

// niceStep rounds raw up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// timeTicks returns x ticks (seconds) at a round interval, about n of them.
func timeTicks(max float64, n int) []float64 {
	steps := []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400}
	step := steps[len(steps)-1]
	for _, s := range steps {
		if max/s <= float64(n) {
			step = s
			break
		}
	}
	var out []float64
	for v := 0.0; v <= max+1e-9; v += step {
		out = append(out, v)
	}
	return out
}

// clock formats seconds as m:ss, or h:mm:ss from an hour.
func clock(s float64) string {
	t := int(math.Round(s))
	if t >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", t/3600, t/60%60, t%60)
	}
	return fmt.Sprintf("%d:%02d", t/60, t%60)
}

// tickLabel formats a y tick: 1500 -> "1.5k".
func tickLabel(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
}

// pointAt is the point a fraction at (0..1) of the way along pts' x range,
// interpolated between its neighbours.
func pointAt(pts []point, at float64) point {
	if len(pts) == 1 {
		return pts[0]
	}
	x0, x1 := pts[0].X, pts[len(pts)-1].X
	want := x0 + at*(x1-x0)
	for i := 1; i < len(pts); i++ {
		a, b := pts[i-1], pts[i]
		if want <= b.X {
			if b.X == a.X {
				return b
			}
			t := (want - a.X) / (b.X - a.X)
			return point{want, a.Y + t*(b.Y-a.Y)}
		}
	}
	return pts[len(pts)-1]
}

// marker draws a 9-unit shape centred on (cx, cy), white-edged so it
// stands out on a line of its own colour.
func marker(shape string, cx, cy float64, color string) string {
	f := func(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }
	c := html.EscapeString(color)
	const r = 4.5
	switch shape {
	case "square":
		return fmt.Sprintf(`<rect x="%s" y="%s" width="9" height="9" fill="%s" stroke="#fff"/>`, f(cx-r), f(cy-r), c)
	case "triangle":
		return fmt.Sprintf(`<path d="M%s,%s L%s,%s L%s,%s Z" fill="%s" stroke="#fff"/>`, f(cx), f(cy-r-1), f(cx+r+1), f(cy+r), f(cx-r-1), f(cy+r), c)
	case "diamond":
		return fmt.Sprintf(`<path d="M%s,%s L%s,%s L%s,%s L%s,%s Z" fill="%s" stroke="#fff"/>`, f(cx), f(cy-r-1), f(cx+r+1), f(cy), f(cx), f(cy+r+1), f(cx-r-1), f(cy), c)
	case "cross":
		return fmt.Sprintf(`<path d="M%s,%s L%s,%s M%s,%s L%s,%s" stroke="%s" stroke-width="2.5"/>`, f(cx-r), f(cy-r), f(cx+r), f(cy+r), f(cx-r), f(cy+r), f(cx+r), f(cy-r), c)
	default:
		return fmt.Sprintf(`<circle cx="%s" cy="%s" r="%s" fill="%s" stroke="#fff"/>`, f(cx), f(cy), f(r), c)
	}
}
