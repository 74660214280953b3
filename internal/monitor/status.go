package monitor

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// StatusView is what `status` shows of a database no run holds: counts
// per stage, the usage and cost of every run, the learned limit and the
// last runs. Its JSON form is `status --json`.
type StatusView struct {
	DB      string          `json:"db"`
	Counts  pipeline.Counts `json:"counts"`
	Usage   pipeline.Usage  `json:"usage"`
	CostUSD float64         `json:"cost_usd"`
	// UnpricedTokens is the part of Usage billed by killed runs: their
	// committed results recorded the tokens, but no price was saved with
	// them, so CostUSD leaves them out.
	UnpricedTokens int64 `json:"unpriced_tokens,omitempty"`
	// Limit is the classify concurrency the last good run settled at; 0
	// when none was learned.
	Limit int `json:"learned_limit,omitempty"`
	// Limits is every stage's learned concurrency, by stage name (a job
	// has one per LLM stage); absent stages learned none.
	Limits   map[string]int        `json:"learned_limits,omitempty"`
	LastRuns []pipeline.RunSummary `json:"last_runs"`
	// Money is each stage's committed lifetime spend, savings, paid and
	// cached answers (from the store's ledger, every run included, killed
	// ones too).
	Money map[string]pipeline.Ledger `json:"money,omitempty"`
	// Tiers is the runs' calls by service tier, when any was not
	// standard; CacheSavedUSD what implicit caching saved them (from the
	// run records: runs that ended).
	Tiers         map[string]*pipeline.TierStats `json:"tiers,omitempty"`
	CacheSavedUSD float64                        `json:"cache_saved_usd,omitempty"`
}

// UseLedger makes v's cost the store's ledger: what every committed
// result was billed, batch answers and killed runs' included, where the
// run records hold only what each run that ended priced. It is the one
// source of money `status`, `report` and --budget-total read. No-op
// without a ledger (v.Money nil).
func (v *StatusView) UseLedger() {
	if v.Money == nil {
		return
	}
	v.CostUSD, v.UnpricedTokens = 0, 0
	for _, l := range v.Money {
		v.CostUSD += l.SpentUSD
	}
}

// runDuration is how long a run took, as its record can tell: a killed
// run's end is its last sample (it may have lived on after it), so its
// duration is a lower bound, and unknown without a sample.
func runDuration(status string, took time.Duration) string {
	d := took.Round(time.Second).String()
	if status != pipeline.RunKilled {
		return d
	}
	if took <= 0 {
		return "?"
	}
	return ">=" + d
}

// NewStatusView sums the usage and cost of runs (newest first) and keeps
// the last five of them.
func NewStatusView(path string, counts pipeline.Counts, learnedLimit int, runs []pipeline.RunSummary) StatusView {
	v := StatusView{DB: path, Counts: counts, Limit: learnedLimit}
	for _, r := range runs {
		// Every stage: a job may have several LLM stages (the others
		// are free).
		t := r.Totals()
		v.Usage = v.Usage.Add(t.Usage)
		v.CostUSD += t.CostUSD
		v.CacheSavedUSD += t.CacheSavedUSD
		if len(t.Tiers) > 0 {
			if v.Tiers == nil {
				v.Tiers = map[string]*pipeline.TierStats{}
			}
			for name, s := range t.Tiers {
				if v.Tiers[name] == nil {
					v.Tiers[name] = &pipeline.TierStats{}
				}
				v.Tiers[name].Add(s)
			}
		}
		if r.Status == pipeline.RunKilled {
			v.UnpricedTokens += t.Usage.PromptTokens + t.Usage.CandidateTokens
		}
	}
	v.LastRuns = runs[:min(len(runs), 5)]
	return v
}

// PrintStatus prints v as a table, or as JSON.
func PrintStatus(w io.Writer, v StatusView, asJSON bool) error {
	if asJSON {
		return WriteJSONSafe(w, v)
	}
	counts := v.Counts
	fmt.Fprintf(w, "%s: %d items, %d done\n\n", TerminalSafe(v.DB), counts.Items, counts.Done)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stage\tqueued\tdead\toutputs\t")
	for _, s := range counts.Stages {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t\n", TerminalSafe(s.Stage), s.Queued, s.Dead, s.Output)
	}
	tw.Flush()
	if v.Money != nil {
		fmt.Fprintf(w, "\ntokens (all runs): %d in, %d out; cost $%.4f (billed for every committed result)", v.Usage.PromptTokens, v.Usage.CandidateTokens, v.CostUSD)
	} else {
		fmt.Fprintf(w, "\ntokens (all runs): %d in, %d out; estimated cost $%.4f", v.Usage.PromptTokens, v.Usage.CandidateTokens, v.CostUSD)
	}
	if v.UnpricedTokens > 0 {
		fmt.Fprintf(w, " without the %d tokens of killed runs, which saved no price", v.UnpricedTokens)
	}
	fmt.Fprintln(w)
	printTiers(w, "all runs", v.Tiers, v.Usage.CachedTokens, v.CacheSavedUSD)
	for _, name := range slices.Sorted(maps.Keys(v.Money)) {
		l := v.Money[name]
		fmt.Fprintf(w, "%s (all runs): %d paid answers, %d cached answers (no call); $%.4f spent, $%.4f saved by the cache\n",
			TerminalSafe(name), l.Paid, l.Cached, l.SpentUSD, l.SavedUSD)
	}
	switch {
	case len(v.Limits) > 1 || len(v.Limits) == 1 && v.Limit == 0:
		var parts []string
		for _, s := range counts.Stages {
			if n := v.Limits[s.Stage]; n > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", TerminalSafe(s.Stage), n))
			}
		}
		fmt.Fprintf(w, "learned concurrency: %s (the next run starts there)\n", strings.Join(parts, ", "))
	case v.Limit > 0:
		fmt.Fprintf(w, "learned classify concurrency: %d (the next run starts there)\n", v.Limit)
	}
	if len(v.LastRuns) > 0 {
		fmt.Fprintln(w, "\nlast runs:")
		for _, r := range v.LastRuns {
			took := r.Ended.Sub(r.Started)
			if r.Ended.IsZero() {
				// Still running (another worker of a fleet, on PostgreSQL).
				took = time.Since(r.Started)
			}
			fmt.Fprintf(w, "  %s  %-8s  %s", TerminalSafe(r.ID), TerminalSafe(r.Status), runDuration(r.Status, took))
			if r.Message != "" {
				fmt.Fprintf(w, "  %s", TerminalSafe(r.Message))
			}
			fmt.Fprintln(w)
		}
	}
	return nil
}
