// This file reads and renders the Batch API jobs of a database: how many,
// what came of them, and what they cost against online calls.

package report

import (
	"encoding/json"
	"fmt"

	"github.com/sawtooth-dev/sawtooth/batch"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// loadBatch sums the database's batch jobs, priced for the model the
// classify stage recorded; nil when there are none.
func loadBatch(pdb pipeline.Database) (*batch.Totals, error) {
	db, ok := pdb.(interface {
		BatchJobs(openOnly bool) ([]pipeline.BatchJob, error)
		StoredDefinition() ([]pipeline.StageDef, error)
	})
	if !ok {
		return nil, nil // a store without batch jobs (PostgreSQL)
	}
	jobs, err := db.BatchJobs(false)
	if err != nil || len(jobs) == 0 {
		return nil, err
	}
	model := ""
	if defs, err := db.StoredDefinition(); err == nil {
		for _, d := range defs {
			var c struct {
				Model string `json:"model"`
			}
			if d.Name == "classify" && json.Unmarshal(d.Config, &c) == nil {
				model = c.Model
			}
		}
	}
	t := batch.Total(jobs, model)
	return &t, nil
}

// batchLine says what the batch jobs did, in one line.
func batchLine(b *batch.Totals) string {
	return fmt.Sprintf("%s batch jobs (%s open): %s items answered, %s dead letters, %s returned to the queue; %s tokens in / %s out at the batch price: %s, against %s online (saved %s)",
		num(b.Jobs), num(b.Open), num(b.Answered), num(b.Dead), num(b.Returned),
		num(b.Usage.PromptTokens), num(b.Usage.CandidateTokens), usd(b.CostUSD), usd(b.OnlineCostUSD), usd(b.SavedUSD))
}
