package monitor

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// tierOrder is the order tiers are shown in.
var tierOrder = []string{pipeline.TierStandard, pipeline.TierFlex, pipeline.TierPriority}

// printTiers writes one line of calls, sheds, latency and money per service tier
// of a stage, and one of what implicit caching saved, each only when
// there is something to say (a run all on standard with no cache hit
// prints nothing). who names the stage, with "(all runs)" for status.
func printTiers(w io.Writer, who string, tiers map[string]*pipeline.TierStats, cachedTokens int64, cacheSaved float64) {
	names := TierNames(tiers)
	var saved float64
	for _, name := range names {
		t := tiers[name]
		fmt.Fprintf(w, "%s: %s tier: %d calls", who, TerminalSafe(name), t.Calls)
		if t.Shed > 0 {
			fmt.Fprintf(w, ", %d shed", t.Shed)
		}
		if t.P50Seconds > 0 {
			fmt.Fprintf(w, ", latency p50 %s p95 %s", Latency(t.P50Seconds), Latency(t.P95Seconds))
		}
		fmt.Fprintf(w, ", $%.4f", t.CostUSD)
		if t.SavedUSD != 0 {
			fmt.Fprintf(w, " ($%.4f %s than on standard)", abs(t.SavedUSD), map[bool]string{true: "less", false: "more"}[t.SavedUSD > 0])
		}
		fmt.Fprintln(w)
		saved += t.SavedUSD
	}
	if len(names) > 1 && saved != 0 {
		fmt.Fprintf(w, "%s: the tiers saved $%.4f against all standard\n", who, saved)
	}
	if cachedTokens > 0 {
		fmt.Fprintf(w, "%s: %d input tokens implicitly cached, $%.4f saved by the cached rate\n", who, cachedTokens, cacheSaved)
	}
}

// Latency formats a call latency in seconds for people: milliseconds
// under a second, tenths under a minute, whole seconds above.
func Latency(seconds float64) string {
	d := time.Duration(seconds * float64(time.Second))
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// TierNames is the names of tiers in the order they are shown.
func TierNames(tiers map[string]*pipeline.TierStats) []string {
	names := slices.Sorted(maps.Keys(tiers))
	slices.SortStableFunc(names, func(a, b string) int { return tierRank(a) - tierRank(b) })
	return names
}

func tierRank(name string) int {
	if i := slices.Index(tierOrder, name); i >= 0 {
		return i
	}
	return len(tierOrder)
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
