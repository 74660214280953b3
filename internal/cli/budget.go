package cli

import (
	"fmt"
	"io"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

// printBudget says, after a run's summary, how much of each cap the run
// left: --budget against this run's spend, --budget-total against the
// database's committed lifetime spend.
func printBudget(w io.Writer, db *store.DB, o *pipelineOptions, sum pipeline.RunSummary) {
	if o.Budget > 0 {
		spent := sum.Totals().CostUSD
		fmt.Fprintf(w, "budget: $%.2f spent of --budget $%.2f; $%.2f left\n", spent, o.Budget, max(0, o.Budget-spent))
	}
	if o.BudgetTotal > 0 {
		ledgers, err := db.Ledgers()
		if err != nil {
			fmt.Fprintf(w, "budget-total: the lifetime spend cannot be read: %v\n", err)
			return
		}
		var spent float64
		for _, l := range ledgers {
			spent += l.SpentUSD
		}
		fmt.Fprintf(w, "budget-total: $%.2f spent in this database of --budget-total $%.2f; $%.2f left\n", spent, o.BudgetTotal, max(0, o.BudgetTotal-spent))
	}
}
