package report

import (
	"cmp"
	"slices"
	"time"

	"github.com/sawtooth-dev/sawtooth/batch"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// Data is everything a report shows, read once from the database. Its
// JSON form is `sawtooth report --format json`.
type Data struct {
	// DB is the database's path, shown as the report's subject.
	DB string `json:"db"`
	// Generated is when the data was read; zero hides it.
	Generated time.Time `json:"generated,omitzero"`
	// Stages are the pipeline's stage names in order.
	Stages  []string                `json:"stages,omitempty"`
	Counts  pipeline.Counts         `json:"counts"`
	Tally   pipeline.Tally          `json:"aggregate"`
	Dead    map[string][]DeadReason `json:"dead_letters"`
	LastRun *pipeline.RunSummary    `json:"last_run,omitempty"`
	// Samples are LastRun's per-second samples, every stage, in time order.
	Samples []pipeline.Sample `json:"samples,omitempty"`
	// Runs are the most recent runs, newest first.
	Runs []pipeline.RunSummary `json:"runs,omitempty"`
	// Where lists the --where filters ("app=TaskFlow"): every figure
	// that counts items (Counts, Tally, Dead, Cube, Pivot) counts only
	// the items that pass them; runs, samples and costs are the runs'
	// own.
	Where []string `json:"where,omitempty"`
	// Window is the months the report is about (--month, --from/--to);
	// the zero Window means the latest month with items, for the readers'
	// section, and every month for the pivot.
	Window Window `json:"window,omitzero"`
	// Cube is the done items by every group field and month, nil when not
	// loaded; the readers' section of the HTML page is drawn from it.
	Cube *Cube `json:"cube,omitempty"`
	// Pivot is `report --by`'s table, nil without --by.
	Pivot *Pivot `json:"pivot,omitempty"`
	// Periods are the fingerprints of the figures of each month the
	// report covers, each compared with the last report of that month
	// (ChangeNotes).
	Periods []PeriodStamp `json:"periods,omitempty"`
	// KilledCosts say how the cost of each stage of the killed runs in
	// Runs was estimated (their records hold tokens, not cost).
	KilledCosts []KilledRunCost `json:"killed_run_costs,omitempty"`
	// Batch sums the Batch API jobs; nil when there were none.
	Batch *batch.Totals `json:"batch,omitempty"`
	// Zone is where times are shown; nil means the local zone.
	Zone *time.Location `json:"-"`
	// DeadSteps say what to do with the dead letters, in the front end's
	// words (its commands for this database): the text, Markdown and
	// HTML reports print them under the letters; none prints nothing.
	DeadSteps []Step `json:"-"`
}

// Step is a command a report suggests and what it does, both worded by
// the front end that renders the report.
type Step struct {
	// Command is the command, ready to copy.
	Command string
	// Does says what it does ("lists them").
	Does string
}

// zone is d.Zone, or the local zone.
func (d *Data) zone() *time.Location {
	if d.Zone != nil {
		return d.Zone
	}
	return time.Local
}

// DeadReason is one cause of dead letters at a stage: how many items it
// holds and a few of their ids.
type DeadReason struct {
	Reason string   `json:"reason"`
	Count  int      `json:"count"`
	IDs    []string `json:"example_ids"`
}

// stageOrder is d.Stages, or the stages named anywhere in the data in a
// stable order when Stages is empty.
func (d *Data) stageOrder() []string {
	if len(d.Stages) > 0 {
		return d.Stages
	}
	var out []string
	add := func(s string) {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, s := range d.Counts.Stages {
		add(s.Stage)
	}
	if d.LastRun != nil {
		for _, s := range sortedKeys(d.LastRun.Stages) {
			add(s)
		}
	}
	for _, s := range sortedKeys(d.Dead) {
		add(s)
	}
	return out
}

// labelsByCount is the tally's labels, most frequent first.
func (d *Data) labelsByCount() []string {
	labels := sortedKeys(d.Tally.Labels)
	slices.SortStableFunc(labels, func(a, b string) int { return cmp.Compare(d.Tally.Labels[b], d.Tally.Labels[a]) })
	return labels
}

// deadTotal is how many dead letters the database holds.
func (d *Data) deadTotal() int {
	n := 0
	for _, s := range d.Counts.Stages {
		n += s.Dead
	}
	return n
}

// queuedTotal is how many items wait at some stage.
func (d *Data) queuedTotal() int {
	n := 0
	for _, s := range d.Counts.Stages {
		n += s.Queued
	}
	return n
}

// apiStage is the stage of run r with a concurrency limit (the one that
// calls the API), "" when none has.
func apiStage(r *pipeline.RunSummary) string {
	if r == nil {
		return ""
	}
	for _, name := range sortedKeys(r.Stages) {
		if s := r.Stages[name]; s != nil && s.LimitMax > 0 {
			return name
		}
	}
	for _, name := range sortedKeys(r.Stages) {
		if s := r.Stages[name]; s != nil && s.Calls > 0 && s.Usage.TotalTokens > 0 {
			return name
		}
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
