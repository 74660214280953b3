package monitor

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// PrintSummary prints the run summary (stageOrder is the DB's stages in
// pipeline order): per-stage accounting, the limit's range, dead letters
// by reason, the wall time and the next commands, one per line so each
// can be copied (not in the JSON form).
func PrintSummary(w io.Writer, stageOrder []string, sum pipeline.RunSummary, asJSON bool, next []string) error {
	if asJSON {
		return printSummaryJSON(w, sum)
	}
	wall := sum.Ended.Sub(sum.Started)
	fmt.Fprintf(w, "\nrun %s: %s in %s", TerminalSafe(sum.ID), TerminalSafe(sum.Status), wall.Round(100*time.Millisecond))
	if sum.Message != "" {
		fmt.Fprintf(w, " (%s)", TerminalSafe(sum.Message))
	}
	fmt.Fprintln(w)
	order := summaryStages(stageOrder, sum)
	printStageTable(w, order, sum)
	printStageLines(w, order, sum)
	printDeadReasons(w, order, sum)
	if len(next) > 0 {
		fmt.Fprintln(w, "\nnext:")
		for _, cmd := range next {
			fmt.Fprintf(w, "  %s\n", cmd)
		}
	}
	return nil
}

// printSummaryJSON is the summary as one JSON object: the run, its wall
// time and every stage's totals.
func printSummaryJSON(w io.Writer, sum pipeline.RunSummary) error {
	wall := sum.Ended.Sub(sum.Started)
	type stageTotals struct {
		Calls       int64          `json:"calls"`
		RateLimited int64          `json:"rate_limited"`
		Transient   int64          `json:"transient"`
		Unavailable int64          `json:"unavailable"`
		BadAnswers  int64          `json:"bad_answers"`
		Dead        int64          `json:"dead"`
		Usage       pipeline.Usage `json:"usage"`
		CostUSD     float64        `json:"cost_usd"`
		Cached      int64          `json:"cached"`
		SavedUSD    float64        `json:"saved_usd"`
		// Tiers and CacheSavedUSD appear only when a call was not
		// standard, or implicit caching saved something.
		Tiers         map[string]*pipeline.TierStats `json:"tiers,omitempty"`
		CacheSavedUSD float64                        `json:"cache_saved_usd,omitempty"`
	}
	all := sum.Totals()
	t := stageTotals{Calls: all.Calls, RateLimited: all.RateLimited, Transient: all.Transient, Unavailable: all.Unavailable, BadAnswers: all.BadAnswers, Dead: all.Dead, Usage: all.Usage, CostUSD: all.CostUSD,
		Cached: all.Cached, SavedUSD: all.SavedUSD, Tiers: all.Tiers, CacheSavedUSD: all.CacheSavedUSD}
	return writeJSON(w, struct {
		pipeline.RunSummary
		WallSeconds float64     `json:"wall_seconds"`
		Totals      stageTotals `json:"totals"`
	}{sum, wall.Seconds(), t})
}

// printStageTable is one row per stage and a total row.
func printStageTable(w io.Writer, order []string, sum pipeline.RunSummary) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	// "bad answers": 200s with nothing usable (no candidates), which are
	// neither 5xx nor timeouts.
	fmt.Fprintln(tw, "stage\tdone\tdead\tattempts\tcalls\t429s\t5xx/timeouts\tunreachable\tbad answers\ttokens in\ttokens out\test. cost\t")
	for _, name := range order {
		s := sum.Stages[name]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t$%.4f\t\n", name, s.Done, s.Dead, s.Attempts, s.Calls, s.RateLimited, s.Transient, s.Unavailable,
			s.BadAnswers, s.Usage.PromptTokens, s.Usage.CandidateTokens, s.CostUSD)
	}
	total := sum.Totals()
	fmt.Fprintf(tw, "total\t\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t$%.4f\t\n", total.Dead, total.Attempts, total.Calls, total.RateLimited, total.Transient, total.Unavailable,
		total.BadAnswers, total.Usage.PromptTokens, total.Usage.CandidateTokens, total.CostUSD)
	tw.Flush()
}

// printStageLines is a line per stage for its limit, its cache and its
// tiers, each only when the stage has something to say there.
func printStageLines(w io.Writer, order []string, sum pipeline.RunSummary) {
	for _, name := range order {
		if s := sum.Stages[name]; s.LimitMax > 0 && s.Calls > 0 {
			// What was in flight, measured, beside the limit the
			// limiter set: they differ when the limit falls under
			// calls already in flight.
			fmt.Fprintf(w, "%s: 429 share %.2f%% of %d calls; at most %d calls in flight at once; concurrency limit ranged %d..%d, ended at %d\n",
				name, 100*float64(s.RateLimited)/float64(s.Calls), s.Calls, s.InFlightMax, s.LimitMin, s.LimitMax, s.LimitEnd)
		}
	}
	for _, name := range order {
		if s := sum.Stages[name]; s.Cached > 0 {
			fmt.Fprintf(w, "%s: %d paid calls, %d cached answers (no call), $%.4f spent, $%.4f saved by the cache\n",
				name, s.Paid, s.Cached, s.CostUSD, s.SavedUSD)
		}
	}
	for _, name := range order {
		s := sum.Stages[name]
		printTiers(w, name, s.Tiers, s.Usage.CachedTokens, s.CacheSavedUSD)
	}
}

// printDeadReasons lists each stage's dead-letter reasons, most frequent
// first, and what to do about permanent ones.
func printDeadReasons(w io.Writer, order []string, sum pipeline.RunSummary) {
	permanent := false
	for _, name := range order {
		s := sum.Stages[name]
		if len(s.DeadReasons) == 0 {
			continue
		}
		for k := range s.DeadReasons {
			permanent = permanent || strings.HasPrefix(k, string(pipeline.ClassPermanent))
		}
		fmt.Fprintf(w, "dead letters at %s this run:\n", name)
		type kv struct {
			k string
			v int
		}
		var reasons []kv
		for k, v := range s.DeadReasons {
			reasons = append(reasons, kv{k, v})
		}
		sort.Slice(reasons, func(i, j int) bool {
			return reasons[i].v > reasons[j].v || reasons[i].v == reasons[j].v && reasons[i].k < reasons[j].k
		})
		for i, r := range reasons {
			if i == 8 {
				fmt.Fprintf(w, "  ... %d more reasons\n", len(reasons)-8)
				break
			}
			fmt.Fprintf(w, "  %5d  %s\n", r.v, TerminalSafe(r.k))
		}
	}
	if permanent {
		// Re-queueing a permanent failure sends the same text again and
		// pays for the same verdict; an edited row re-enters by itself.
		fmt.Fprintln(w, "permanent failures (safety blocks, empty text) fail the same way if re-queued unchanged: edit those rows in the input file and run again with it; edited texts re-enter by themselves")
	}
}

// summaryStages is the stages of sum in pipeline order.
func summaryStages(order []string, sum pipeline.RunSummary) []string {
	var out []string
	for _, name := range order {
		if sum.Stages[name] != nil {
			out = append(out, name)
		}
	}
	return out
}
