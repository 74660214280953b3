package cli

import (
	"fmt"
	"io"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

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
