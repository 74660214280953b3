package monitor

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

// StatusView is what `status` shows of a database no run holds: counts
// per stage, the usage and cost of every run, the learned limit and the
// last runs. Its JSON form is `status --json`.
type StatusView struct {
	DB      string         `json:"db"`
	Counts  store.Counts   `json:"counts"`
	Usage   pipeline.Usage `json:"usage"`
	CostUSD float64        `json:"cost_usd"`
	// Limit is the classify concurrency the last good run settled at; 0
	// when none was learned.
	Limit    int                   `json:"learned_limit,omitempty"`
	LastRuns []pipeline.RunSummary `json:"last_runs"`
}

// NewStatusView sums the usage and cost of runs (newest first) and keeps
// the last five of them.
func NewStatusView(path string, counts store.Counts, learnedLimit int, runs []pipeline.RunSummary) StatusView {
	v := StatusView{DB: path, Counts: counts, Limit: learnedLimit}
	for _, r := range runs {
		if s := r.Stages["classify"]; s != nil {
			v.Usage = v.Usage.Add(s.Usage)
			v.CostUSD += s.CostUSD
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
	fmt.Fprintf(w, "\ntokens (all runs): %d in, %d out; estimated cost $%.4f\n", v.Usage.PromptTokens, v.Usage.CandidateTokens, v.CostUSD)
	if v.Limit > 0 {
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
			fmt.Fprintf(w, "  %s  %-8s  %s", TerminalSafe(r.ID), TerminalSafe(r.Status), took.Round(time.Second))
			if r.Message != "" {
				fmt.Fprintf(w, "  %s", TerminalSafe(r.Message))
			}
			fmt.Fprintln(w)
		}
	}
	return nil
}
