package quotasim

import (
	"cmp"
	"fmt"
	"io"
	"slices"
)

// Summary is the distribution of a law's results over many shapes.
type Summary struct {
	Shapes int
	// Goodput's p10, median and worst; the 429 share's median, p90 and
	// worst, and the shapes that refused more than 1% of their calls (the
	// issue's bar for every shape); the worst calls per item; items lost
	// (runs that stalled).
	P10, Median, Worst         float64
	Share429, P90429, Worst429 float64
	Over1Percent               int
	WorstCallsPerItem          float64
	Stalled                    int
	WorstShape, Worst429At     string
}

// quantile is the q-quantile of v, sorted ascending in place.
func quantile(v []float64, q float64) float64 {
	slices.Sort(v)
	return v[min(len(v)-1, int(q*float64(len(v))))]
}

// Summarize returns the distribution of rs.
func Summarize(rs []Result) Summary {
	s := Summary{Shapes: len(rs)}
	if len(rs) == 0 {
		return s
	}
	var gs, ss []float64
	for _, r := range rs {
		gs, ss = append(gs, r.Goodput()), append(ss, r.Share())
		if s.WorstShape == "" || r.Goodput() < s.Worst {
			s.Worst, s.WorstShape = r.Goodput(), r.Shape.Name
		}
		if r.Share() > s.Worst429 || s.Worst429At == "" {
			s.Worst429, s.Worst429At = r.Share(), r.Shape.Name
		}
		s.WorstCallsPerItem = max(s.WorstCallsPerItem, r.CallsPerItem())
		if r.Share() > 0.01 {
			s.Over1Percent++
		}
		if r.Stalled != "" {
			s.Stalled++
		}
	}
	s.P10, s.Median = quantile(gs, 0.1), quantile(gs, 0.5)
	s.Share429, s.P90429 = quantile(ss, 0.5), quantile(ss, 0.9)
	return s
}

// WriteTable writes the distribution over every shape and per family,
// then the worst shapes by goodput and by 429 share, each with its seed.
func WriteTable(w io.Writer, rs []Result, worst int) {
	fmt.Fprintf(w, "%-8s %6s %7s %7s %7s %9s %9s %9s %7s %10s %7s\n", "family", "shapes", "p10", "median", "worst", "429 med", "429 p90", "429 worst", ">1% 429", "calls/item", "stalled")
	row := func(name string, rs []Result) {
		if len(rs) == 0 {
			return
		}
		s := Summarize(rs)
		fmt.Fprintf(w, "%-8s %6d %7.3f %7.3f %7.3f %8.2f%% %8.2f%% %8.2f%% %7d %10.3f %7d\n", name, s.Shapes, s.P10, s.Median, s.Worst, 100*s.Share429, 100*s.P90429, 100*s.Worst429, s.Over1Percent, s.WorstCallsPerItem, s.Stalled)
	}
	row("all", rs)
	for _, f := range Families {
		row(f, slices.DeleteFunc(slices.Clone(rs), func(r Result) bool { return r.Shape.Family != f }))
	}
	sorted := slices.Clone(rs)
	slices.SortStableFunc(sorted, func(a, b Result) int {
		switch ga, gb := a.Goodput(), b.Goodput(); {
		case ga < gb:
			return -1
		case ga > gb:
			return 1
		}
		return 0
	})
	for _, r := range sorted[:min(worst, len(sorted))] {
		writeResult(w, r)
	}
	// The worst by 429 share too: a shape can lose little time and still
	// spend its refusals budget many times over.
	slices.SortStableFunc(sorted, func(a, b Result) int { return cmp.Compare(b.Share(), a.Share()) })
	fmt.Fprintln(w, "worst 429 shares:")
	for _, r := range sorted[:min(worst, len(sorted))] {
		writeResult(w, r)
	}
}

func writeResult(w io.Writer, r Result) {
	fmt.Fprintf(w, "  %.3f goodput, %5.2f%% 429s, %.3f calls/item, %v vs perfect %v  %s", r.Goodput(), 100*r.Share(), r.CallsPerItem(), r.Wall.Round(1e7), r.Perfect.Round(1e7), r.Shape.Name)
	if r.Stalled != "" {
		fmt.Fprintf(w, " (stalled: %s)", r.Stalled)
	}
	fmt.Fprintln(w)
}
