package cli

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/sawtooth-dev/sawtooth/batch"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// budgetStop words a batch run's stop at its budget as the runner words
// an online one's: the cap, what was spent, what is left and about what
// it would cost, and the flag to raise (exit 3: a higher cap resumes).
func budgetStop(e *batch.BudgetError, o *pipelineOptions) error {
	items := fmt.Sprintf("%s left, about %s more at this rate; a batch job is created only if its requests, each reserved %s for its longest answer, fit", plural(e.Left, "item"), usd(e.PerItemUSD*float64(e.Left)), usd(e.ReservedUSD))
	if e.Total {
		return fmt.Errorf("total budget %s reached (%s spent in this database, %s in this run, %s): raise --budget-total to continue: %w",
			usd(e.CapUSD), usd(e.BeforeUSD+e.SpentUSD), usd(e.SpentUSD), items, pipeline.ErrStopped)
	}
	return fmt.Errorf("budget %s reached (%s spent, %s): raise --budget to continue: %w",
		usd(e.CapUSD), usd(e.SpentUSD), items, pipeline.ErrStopped)
}

// printBudget says, after a run's summary, how much of each cap the run
// left: --budget against this run's spend, --budget-total against the
// database's committed lifetime spend.
func printBudget(w io.Writer, db pipeline.Database, o *pipelineOptions, sum pipeline.RunSummary) {
	if o.Budget > 0 {
		spent := sum.Totals().CostUSD
		fmt.Fprintf(w, "budget: %s spent of --budget %s; %s left\n", usd(spent), usd(o.Budget), usd(max(0, o.Budget-spent)))
	}
	if o.BudgetTotal > 0 {
		lg, ok := db.(pipeline.Ledgers)
		if !ok {
			fmt.Fprintf(w, "budget-total: this database keeps no lifetime spend\n")
			return
		}
		ledgers, err := lg.Ledgers()
		if err != nil {
			fmt.Fprintf(w, "budget-total: the lifetime spend cannot be read: %v\n", err)
			return
		}
		var spent float64
		for _, l := range ledgers {
			spent += l.SpentUSD
		}
		fmt.Fprintf(w, "budget-total: %s spent in this database of --budget-total %s; %s left\n", usd(spent), usd(o.BudgetTotal), usd(max(0, o.BudgetTotal-spent)))
	}
}

// usd formats dollars to the cent, or to the hundredth of a cent under a
// dollar, where cents would round small spends away.
func usd(x float64) string {
	if x < 1 {
		return fmt.Sprintf("$%.4f", x)
	}
	return fmt.Sprintf("$%.2f", x)
}

// printResumeHint says, after a run on path stopped early with err, the
// command that resumes it with the caps it was given: without them the
// resumed run would spend with no cap at all. --budget stays as it was
// (each run has its own); --budget-total too, unless it is the cap that
// stopped the run: then it is raised to about what the items left cost
// at this run's rate.
func printResumeHint(w io.Writer, path string, budget, budgetTotal float64, err error) {
	cmd := "sawtooth run --db " + shellQuote(path)
	why := ""
	if budget > 0 {
		cmd += " --budget " + flagUSD(budget)
		why = fmt.Sprintf(" (another run of up to --budget %s)", usd(budget))
	}
	var stop *pipeline.BudgetStop
	switch {
	case budgetTotal <= 0:
	case errors.As(err, &stop) && stop.Total && stop.LeftUSD >= 0:
		// The cap is reached before the spend (the next call's cost is
		// reserved first): the items left go on top of the larger, and
		// the hint never repeats the cap that stopped the run.
		raised := math.Ceil((max(stop.SpentUSD, budgetTotal)+stop.LeftUSD)*100) / 100
		if raised <= budgetTotal {
			raised = budgetTotal + 0.01
		}
		cmd += " --budget-total " + flagUSD(raised)
		why = fmt.Sprintf(" (the lifetime cap raised from %s to about what the items left cost at this run's rate; %s spent so far)", usd(budgetTotal), usd(stop.SpentUSD))
	case errors.As(err, &stop) && stop.Total:
		cmd += " --budget-total USD"
		why = fmt.Sprintf(" (with USD above the %s this database has spent)", usd(stop.SpentUSD))
	default:
		cmd += " --budget-total " + flagUSD(budgetTotal)
	}
	fmt.Fprintf(w, "stopped early; nothing is lost. To resume%s:\n  %s\n", why, cmd)
}

// flagUSD is a dollar amount as a flag value, to the millionth of a
// dollar (so a sum prints as 5.01, never 5.010000000000001).
func flagUSD(x float64) string { return strconv.FormatFloat(math.Round(x*1e6)/1e6, 'f', -1, 64) }
