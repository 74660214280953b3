package bench

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"time"
)

// palette colours the strategies in order.
var palette = []string{"#1f77b4", "#d62728", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"}

// WriteSVG draws the concurrency of each result over time, one panel per
// strategy on a shared time axis: requests in flight (solid), the
// limiter's limit when there is one (dashed), in grey the concurrency that
// uses the quota exactly (its rate times the mean latency), which follows
// the schedule, and along the bottom a red mark for each second with 429s,
// darker for more. Each panel has its own vertical scale, marked on its
// axis.
func WriteSVG(w io.Writer, cfg Config, results []Result) error {
	cfg = cfg.withDefaults()
	p := newPlot(cfg, results)
	b := bufio.NewWriter(w)
	p.header(b, len(results))
	for i, r := range results {
		p.panel(b, i, r)
	}
	fmt.Fprintln(b, "</svg>")
	return b.Flush()
}

// The plot's layout, in pixels.
const (
	plotWidth, plotLeft, plotRight = 960, 56, 24
	plotTop, panelH, panelGap      = 64, 130, 44
)

// svgPlot is what WriteSVG's panels share: the time axis and the quota's
// concurrency.
type svgPlot struct {
	cfg         Config
	plotW       float64
	tmax        time.Duration
	xstep, xend float64
	meanLatency time.Duration
	segs        []segment
}

func newPlot(cfg Config, results []Result) *svgPlot {
	p := &svgPlot{cfg: cfg, plotW: float64(plotWidth - plotLeft - plotRight)}
	for _, r := range results {
		p.tmax = max(p.tmax, r.Wall)
	}
	if p.tmax <= 0 {
		p.tmax = time.Second
	}
	p.xstep = niceStep(p.tmax.Seconds(), 8)
	p.xend = math.Ceil(p.tmax.Seconds()/p.xstep) * p.xstep
	p.meanLatency = cfg.Sim.Latency.Base + cfg.Sim.Latency.Jitter/2
	p.segs = segments(cfg.Sim)
	return p
}

// x is the horizontal position of time t.
func (p *svgPlot) x(t time.Duration) float64 { return plotLeft + p.plotW*t.Seconds()/p.xend }

// ideal is the concurrency that uses the quota exactly at time t.
func (p *svgPlot) ideal(t time.Duration) float64 {
	for _, s := range p.segs {
		if t >= s.from && t < s.to {
			return s.perSec * p.meanLatency.Seconds()
		}
	}
	return 0
}

// header writes the SVG's opening, the title and the legend.
func (p *svgPlot) header(b *bufio.Writer, panels int) {
	cfg, left := p.cfg, plotLeft
	height := plotTop + panels*(panelH+panelGap) + 10
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", plotWidth, height, plotWidth, height)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(b, `<text x="%d" y="20" font-size="15" font-weight="bold">Calls in flight over time, %d items per strategy</text>`+"\n", left, cfg.Items)
	fmt.Fprintf(b, `<text x="%d" y="38" fill="#444">quota %d requests per %s, schedule %s; latency %s + up to %s</text>`+"\n",
		left, cfg.Sim.RPM, cfg.Sim.Window, html.EscapeString(scheduleText(cfg)), cfg.Sim.Latency.Base, cfg.Sim.Latency.Jitter)
	legend := []struct{ label, dash, color string }{
		{"requests in flight", "", "#333"},
		{"limiter's limit", "6 4", "#333"},
		{"quota rate x mean latency", "2 3", "#888"},
		{"429s in that second (darker: more)", "", "#d62728"},
	}
	lx := float64(left)
	for i, l := range legend {
		if i == len(legend)-1 {
			fmt.Fprintf(b, `<rect x="%.1f" y="48" width="24" height="7" fill="%s" fill-opacity="0.7"/>`, lx, l.color)
		} else {
			fmt.Fprintf(b, `<line x1="%.1f" y1="52" x2="%.1f" y2="52" stroke="%s" stroke-width="2" stroke-dasharray="%s"/>`, lx, lx+24, l.color, l.dash)
		}
		fmt.Fprintf(b, `<text x="%.1f" y="56">%s</text>`+"\n", lx+30, html.EscapeString(l.label))
		lx += 30 + 6.4*float64(len(l.label)) + 22
	}
}

// panel writes result r's panel, the i-th: its title, axes, lines and
// 429 strip.
func (p *svgPlot) panel(b *bufio.Writer, i int, r Result) {
	left := plotLeft
	color := palette[i%len(palette)]
	y0 := float64(plotTop + i*(panelH+panelGap) + 22) // panel top
	ymaxData := 1.0
	for _, s := range r.Series {
		ymaxData = max(ymaxData, float64(s.InFlight), float64(s.Limit))
	}
	for _, s := range p.segs {
		if s.from < p.tmax {
			ymaxData = max(ymaxData, s.perSec*p.meanLatency.Seconds())
		}
	}
	ystep := niceStep(ymaxData, 4)
	ymax := math.Ceil(ymaxData/ystep) * ystep
	y := func(v float64) float64 { return y0 + panelH - panelH*v/ymax }

	title := fmt.Sprintf("%s: %.1f s, goodput %.0f%% of capacity, 429s %.2f%% of calls, %d lost",
		r.Strategy, r.Wall.Seconds(), 100*r.Goodput, 100*r.Share429, r.Lost)
	fmt.Fprintf(b, `<text x="%d" y="%.1f" font-weight="bold" fill="%s">%s</text>`+"\n", left, y0-8, color, html.EscapeString(title))
	// Axes and grid.
	for v := 0.0; v <= ymax+ystep/2; v += ystep {
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`, left, y(v), float64(left)+p.plotW, y(v))
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="#555">%g</text>`+"\n", left-6, y(v)+4, v)
	}
	for t := 0.0; t <= p.xend+p.xstep/2; t += p.xstep {
		px := p.x(time.Duration(t * float64(time.Second)))
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`, px, y0, px, y0+panelH)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%gs</text>`+"\n", px, y0+panelH+14, t)
	}
	fmt.Fprintf(b, `<rect x="%d" y="%.1f" width="%.1f" height="%d" fill="none" stroke="#999"/>`+"\n", left, y0, p.plotW, panelH)
	p.lines(b, r, color, y)
	p.refusals(b, r, y0)
}

// lines writes r's lines: the quota's concurrency, as steps up to the
// run's end, the limit when there is one, and the calls in flight.
func (p *svgPlot) lines(b *bufio.Writer, r Result, color string, y func(float64) float64) {
	var pts []string
	for _, s := range p.segs {
		if s.from >= r.Wall {
			break
		}
		to := min(s.to, r.Wall)
		v := p.ideal(s.from)
		pts = append(pts, fmt.Sprintf("%.1f,%.1f %.1f,%.1f", p.x(s.from), y(v), p.x(to), y(v)))
	}
	fmt.Fprintf(b, `<polyline fill="none" stroke="#888" stroke-width="1.5" stroke-dasharray="2 3" points="%s"/>`+"\n", strings.Join(pts, " "))
	hasLimit := false
	for _, s := range r.Series {
		hasLimit = hasLimit || s.Limit > 0
	}
	if hasLimit {
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-opacity="0.7" stroke-width="1.5" stroke-dasharray="6 4" points="%s"/>`+"\n",
			color, polyline(r.Series, p.x, y, func(s Sample) int { return s.Limit }))
	}
	fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n",
		color, polyline(r.Series, p.x, y, func(s Sample) int { return s.InFlight }))
}

// refusals writes r's 429s per second, as a strip along the bottom of
// the panel at y0.
func (p *svgPlot) refusals(b *bufio.Writer, r Result, y0 float64) {
	for _, bk := range r.Timeline {
		if bk.RateLimited == 0 {
			continue
		}
		from := p.x(time.Duration(bk.Second) * time.Second)
		to := min(p.x(time.Duration(bk.Second+1)*time.Second), plotLeft+p.plotW)
		opacity := min(1, 0.25+math.Log10(float64(bk.RateLimited))/4)
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="6" fill="#d62728" fill-opacity="%.2f"><title>%ds: %d 429s</title></rect>`+"\n",
			from, y0+panelH-6, to-from, opacity, bk.Second, bk.RateLimited)
	}
}

// polyline is the points of one series, as steps.
func polyline(series []Sample, x func(time.Duration) float64, y func(float64) float64, v func(Sample) int) string {
	var b strings.Builder
	for i, s := range series {
		if i > 0 {
			fmt.Fprintf(&b, "%.1f,%.1f ", x(s.T), y(float64(v(series[i-1]))))
		}
		fmt.Fprintf(&b, "%.1f,%.1f ", x(s.T), y(float64(v(s))))
	}
	return strings.TrimSpace(b.String())
}

// niceStep is a 1, 2 or 5 times a power of ten step giving about n ticks
// up to v.
func niceStep(v float64, n int) float64 {
	if v <= 0 {
		return 1
	}
	raw := v / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func scheduleText(cfg Config) string {
	if len(cfg.Sim.Schedule) == 0 {
		return "flat"
	}
	parts := make([]string, len(cfg.Sim.Schedule))
	for i, s := range cfg.Sim.Schedule {
		parts[i] = fmt.Sprintf("%d%% from %s", s.Percent, s.At)
	}
	return strings.Join(parts, ", ")
}
