// This file renders a run's calls by the service tier that served them:
// calls, sheds, latency, cost and what each tier saved against standard,
// and what implicit caching took off the bill.

package report

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// tierRow is one stage's calls on one service tier in a run.
type tierRow struct {
	Stage, Tier string
	Calls, Shed int64
	P50, P95    string // "–" when no call was timed
	Cost, Saved string
}

// tierOrder is the order tiers are shown in.
var tierOrder = []string{pipeline.TierStandard, pipeline.TierFlex, pipeline.TierPriority}

// tierRows is r's stages' calls by tier, in pipeline and tier order;
// none for a run all on standard.
func tierRows(r *pipeline.RunSummary, order []string) []tierRow {
	var rows []tierRow
	for _, stage := range order {
		s := r.Stages[stage]
		if s == nil {
			continue
		}
		names := slices.Sorted(maps.Keys(s.Tiers))
		slices.SortStableFunc(names, func(a, b string) int { return rank(a) - rank(b) })
		for _, name := range names {
			t := s.Tiers[name]
			row := tierRow{Stage: stage, Tier: name, Calls: t.Calls, Shed: t.Shed, P50: "–", P95: "–", Cost: usd(t.CostUSD), Saved: usd(t.SavedUSD)}
			if t.SavedUSD < 0 {
				row.Saved = "-" + usd(-t.SavedUSD) // priority costs more
			}
			if t.P50Seconds > 0 {
				row.P50, row.P95 = latencyText(t.P50Seconds), latencyText(t.P95Seconds)
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// cacheLines says, per stage of r, what implicit caching saved.
func cacheLines(r *pipeline.RunSummary, order []string) []string {
	var out []string
	for _, stage := range order {
		if s := r.Stages[stage]; s != nil && s.Usage.CachedTokens > 0 {
			out = append(out, fmt.Sprintf("%s: %s input tokens implicitly cached, %s saved by the cached rate", stage, num(s.Usage.CachedTokens), usd(s.CacheSavedUSD)))
		}
	}
	return out
}

func rank(tier string) int {
	if i := slices.Index(tierOrder, tier); i >= 0 {
		return i
	}
	return len(tierOrder)
}

// latencyText formats a latency in seconds: milliseconds under a
// second, tenths under a minute, whole seconds above.
func latencyText(seconds float64) string {
	d := time.Duration(seconds * float64(time.Second))
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// tierTable is the text report's rows of tierRows.
func tierTable(rows []tierRow, s func(string) string) (header []string, right []bool, cells [][]string) {
	header = []string{"stage", "tier", "calls", "shed", "latency p50", "latency p95", "cost", "saved vs standard"}
	right = []bool{false, false, true, true, true, true, true, true}
	for _, r := range rows {
		cells = append(cells, []string{s(r.Stage), s(r.Tier), num(r.Calls), num(r.Shed), r.P50, r.P95, r.Cost, r.Saved})
	}
	return header, right, cells
}
