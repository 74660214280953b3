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
	const (
		width, left, right = 960, 56, 24
		top, panelH, gap   = 64, 130, 44
	)
	plotW := float64(width - left - right)
	height := top + len(results)*(panelH+gap) + 10

	var tmax time.Duration
	for _, r := range results {
		tmax = max(tmax, r.Wall)
	}
	if tmax <= 0 {
		tmax = time.Second
	}
	xstep := niceStep(tmax.Seconds(), 8)
	xend := math.Ceil(tmax.Seconds()/xstep) * xstep
	x := func(t time.Duration) float64 { return left + plotW*t.Seconds()/xend }
	meanLatency := cfg.Sim.Latency.Base + cfg.Sim.Latency.Jitter/2
	ideal := func(t time.Duration) float64 {
		segs := segments(cfg.Sim)
		for _, s := range segs {
			if t >= s.from && t < s.to {
				return s.perSec * meanLatency.Seconds()
			}
		}
		return 0
	}

	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
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

	for i, r := range results {
		color := palette[i%len(palette)]
		y0 := float64(top + i*(panelH+gap) + 22) // panel top
		ymaxData := 1.0
		for _, s := range r.Series {
			ymaxData = max(ymaxData, float64(s.InFlight), float64(s.Limit))
		}
		for _, s := range segments(cfg.Sim) {
			if s.from < tmax {
				ymaxData = max(ymaxData, s.perSec*meanLatency.Seconds())
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
			fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`, left, y(v), left+plotW, y(v))
			fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="#555">%g</text>`+"\n", left-6, y(v)+4, v)
		}
		for t := 0.0; t <= xend+xstep/2; t += xstep {
			px := x(time.Duration(t * float64(time.Second)))
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`, px, y0, px, y0+panelH)
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%gs</text>`+"\n", px, y0+panelH+14, t)
		}
		fmt.Fprintf(b, `<rect x="%d" y="%.1f" width="%.1f" height="%d" fill="none" stroke="#999"/>`+"\n", left, y0, plotW, panelH)
		// The quota's concurrency, as steps up to the run's end.
		var pts []string
		for _, s := range segments(cfg.Sim) {
			if s.from >= r.Wall {
				break
			}
			to := min(s.to, r.Wall)
			v := ideal(s.from)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f %.1f,%.1f", x(s.from), y(v), x(to), y(v)))
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="#888" stroke-width="1.5" stroke-dasharray="2 3" points="%s"/>`+"\n", strings.Join(pts, " "))
		hasLimit := false
		for _, s := range r.Series {
			hasLimit = hasLimit || s.Limit > 0
		}
		if hasLimit {
			fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-opacity="0.7" stroke-width="1.5" stroke-dasharray="6 4" points="%s"/>`+"\n",
				color, polyline(r.Series, x, y, func(s Sample) int { return s.Limit }))
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n",
			color, polyline(r.Series, x, y, func(s Sample) int { return s.InFlight }))
		// 429s per second, as a strip along the bottom of the panel.
		for _, bk := range r.Timeline {
			if bk.RateLimited == 0 {
				continue
			}
			from := x(time.Duration(bk.Second) * time.Second)
			to := min(x(time.Duration(bk.Second+1)*time.Second), left+plotW)
			opacity := min(1, 0.25+math.Log10(float64(bk.RateLimited))/4)
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="6" fill="#d62728" fill-opacity="%.2f"><title>%ds: %d 429s</title></rect>`+"\n",
				from, y0+panelH-6, to-from, opacity, bk.Second, bk.RateLimited)
		}
	}
	fmt.Fprintln(b, "</svg>")
	return b.Flush()
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
