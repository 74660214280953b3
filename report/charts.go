package report

import (
	"slices"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// maxPoints bounds the points of one series: about one per horizontal
// unit of the plot. Longer runs are averaged into buckets.
const maxPoints = plotW

// Series colours, chosen to read apart for common colour blindness.
const (
	colorLimit    = "#1e40af"
	colorInFlight = "#60a5fa"
	colorOK       = "#16a34a"
	color429      = "#dc2626"
	color5xx      = "#d97706"
	colorDown     = "#6b7280"
)

var stageColors = []string{"#7c3aed", "#1d4ed8", "#15803d", "#b45309", "#be185d", "#0f766e"}

// stageDashes and stageMarkers tell stages' lines apart where they
// coincide (and for readers who cannot tell the colours apart).
var (
	stageDashes  = []string{"", "9 5", "2 4", "12 4 2 4", "6 3", "1 6"}
	stageMarkers = []string{"circle", "square", "triangle", "diamond", "cross", "circle"}
)

// runCharts draws the last run from its per-second samples: the API
// stage's concurrency limit and calls in flight (the sawtooth), its calls
// per second by outcome, and every stage's cumulative completed items.
// It returns nil when the run recorded no samples.
func runCharts(d *Data) []*chart {
	if d.LastRun == nil || len(d.Samples) == 0 {
		return nil
	}
	start := d.LastRun.Started
	if start.IsZero() {
		start = d.Samples[0].At.Add(-time.Second)
	}
	byStage := map[string][]pipeline.Sample{}
	for _, s := range d.Samples {
		byStage[s.Stage] = append(byStage[s.Stage], s)
	}
	xmax := d.Samples[len(d.Samples)-1].At.Sub(start).Seconds()
	if !d.LastRun.Ended.IsZero() {
		xmax = max(xmax, d.LastRun.Ended.Sub(start).Seconds())
	}
	sec := func(s pipeline.Sample) float64 { return max(0, s.At.Sub(start).Seconds()) }

	var charts []*chart
	api := apiStage(d.LastRun)
	if api == "" {
		for _, name := range sortedKeys(byStage) {
			if slices.ContainsFunc(byStage[name], func(s pipeline.Sample) bool { return s.Limit > 0 }) {
				api = name
				break
			}
		}
	}
	if ss := byStage[api]; len(ss) > 0 {
		charts = apiCharts(api, ss, sec, xmax)
	}
	if cum := d.itemsChart(byStage, api, sec, xmax); !cum.empty() {
		charts = append(charts, cum)
	}
	return charts
}

// apiCharts draws the API stage's samples ss: its concurrency limit and
// calls in flight, and its calls per second by outcome.
func apiCharts(api string, ss []pipeline.Sample, sec func(pipeline.Sample) float64, xmax float64) []*chart {
	limit := series{Name: "concurrency limit", Color: colorLimit, Kind: kindStep}
	inFlight := series{Name: "calls in flight", Color: colorInFlight, Kind: kindArea}
	ok := series{Name: "succeeded", Color: colorOK, Kind: kindArea}
	r429 := series{Name: "429 rate-limited", Color: color429, Kind: kindBars}
	r5xx := series{Name: "5xx / timeout", Color: color5xx, Kind: kindBars}
	down := series{Name: "unreachable", Color: colorDown, Kind: kindBars}
	var marks []float64
	for _, b := range buckets(ss, maxPoints) {
		x := b.x(sec)
		limit.Points = append(limit.Points, point{x, b.maxOf(func(s pipeline.Sample) float64 { return float64(s.Limit) })})
		inFlight.Points = append(inFlight.Points, point{x, b.mean(func(s pipeline.Sample) float64 { return float64(s.InFlight) })})
		ok.Points = append(ok.Points, point{x, b.mean(func(s pipeline.Sample) float64 { return float64(s.Successes) })})
		rl := b.mean(func(s pipeline.Sample) float64 { return float64(s.RateLimited) })
		r429.Points = append(r429.Points, point{x, rl})
		r5xx.Points = append(r5xx.Points, point{x, b.mean(func(s pipeline.Sample) float64 { return float64(s.Transient) })})
		down.Points = append(down.Points, point{x, b.mean(func(s pipeline.Sample) float64 { return float64(s.Unavailable) })})
		if rl > 0 {
			marks = append(marks, x)
		}
	}
	return []*chart{
		{
			ID: "chart-limit", Title: "Concurrency limit and calls in flight (" + api + ")",
			Caption: "The AIMD limiter's sawtooth: the limit climbs by one while calls succeed and is cut once per congestion event; red ticks mark the seconds that saw a 429.",
			YLabel:  "concurrent calls", XMax: xmax, Series: []series{inFlight, limit},
			Marks: marks, MarksName: "second with a 429", MarksColor: color429,
		},
		{
			ID: "chart-calls", Title: "Calls per second by outcome (" + api + ")",
			Caption: "Items that succeeded each second, and the calls refused with 429 or failed with a 5xx or a timeout (those are retried), and those that never reached the endpoint (the items wait).",
			YLabel:  "calls per second", XMax: xmax, Series: []series{ok, r429, r5xx, down},
		},
	}
}

// itemsChart draws every stage's cumulative completed items, the API
// stage's on top.
func (d *Data) itemsChart(byStage map[string][]pipeline.Sample, api string, sec func(pipeline.Sample) float64, xmax float64) *chart {
	cum := &chart{
		ID: "chart-items", Title: "Items completed (cumulative, this run)",
		Caption: "Items each stage has finished since the run started. The API stage sets the pace; the local stages follow it.",
		YLabel:  "items", XMax: xmax,
	}
	for i, name := range d.sampleStages(byStage) {
		// Stages that finish together draw the same line: each gets its
		// own dash pattern, width and marker shape (and the legend shows
		// them), so every one stays visible where they overlap.
		s := series{Name: name, Color: stageColors[i%len(stageColors)], Kind: kindLine,
			Dash: stageDashes[i%len(stageDashes)], Width: max(1.5, 4.5-float64(i)), Marker: stageMarkers[i%len(stageMarkers)],
			MarkerPhase: float64(i), Top: name == api}
		total := 0.0
		s.Points = append(s.Points, point{0, 0})
		for _, b := range buckets(byStage[name], maxPoints) {
			total += b.sum(func(s pipeline.Sample) float64 { return float64(s.Successes) })
			s.Points = append(s.Points, point{b.x(sec), total})
		}
		cum.Series = append(cum.Series, s)
	}
	return cum
}

// sampleStages is the stages that have samples, in pipeline order.
func (d *Data) sampleStages(byStage map[string][]pipeline.Sample) []string {
	var out []string
	for _, s := range append(slices.Clone(d.stageOrder()), sortedKeys(byStage)...) {
		if len(byStage[s]) > 0 && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// bucket is consecutive samples of one stage drawn as one point.
type bucket []pipeline.Sample

// buckets splits ss into at most n buckets of consecutive samples.
func buckets(ss []pipeline.Sample, n int) []bucket {
	size := (len(ss) + n - 1) / max(n, 1)
	size = max(size, 1)
	var out []bucket
	for i := 0; i < len(ss); i += size {
		out = append(out, bucket(ss[i:min(i+size, len(ss))]))
	}
	return out
}

// x is the bucket's position: its last sample's time.
func (b bucket) x(sec func(pipeline.Sample) float64) float64 { return sec(b[len(b)-1]) }

func (b bucket) sum(v func(pipeline.Sample) float64) float64 {
	t := 0.0
	for _, s := range b {
		t += v(s)
	}
	return t
}

func (b bucket) mean(v func(pipeline.Sample) float64) float64 { return b.sum(v) / float64(len(b)) }

func (b bucket) maxOf(v func(pipeline.Sample) float64) float64 {
	m := 0.0
	for _, s := range b {
		m = max(m, v(s))
	}
	return m
}
