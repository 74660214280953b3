package batch

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// TestDriver_FirstApplyAfterCreateCommitBills: a job one of whose items
// was committed at create (refused before a call: a dead letter) is
// applied for the first time, and every answer it got is billed in the
// ledger and the summary, as for a job that committed nothing at create.
func TestDriver_FirstApplyAfterCreateCommitBills(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refused bool
	}{
		{"nothing committed at create", false},
		{"a refused item committed at create", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 10, geminisim.BatchConfig{Pending: time.Minute, Running: time.Minute})
			if tc.refused {
				if _, err := f.db.Ingest([]pipeline.Record{{ID: "zempty", Text: "   "}}); err != nil {
					t.Fatal(err)
				}
			}
			sum, err := f.driver(f.db, Config{Mode: ModeBatch, Size: 20}).Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			l, err := f.db.Ledgers()
			if err != nil {
				t.Fatal(err)
			}
			if l["classify"].Paid != 10 || l["classify"].SpentUSD == 0 || sum.CostUSD == 0 {
				t.Errorf("ledger paid %d $%.9f, summary $%.9f: want the 10 answers the API billed in both",
					l["classify"].Paid, l["classify"].SpentUSD, sum.CostUSD)
			}
		})
	}
}

// TestDriver_BudgetHoldsWhenJobsHoldARefusedItem: the answers of jobs
// that each committed a refused item at create count against the run's
// budget, so the API bills no more than it allows.
func TestDriver_BudgetHoldsWhenJobsHoldARefusedItem(t *testing.T) {
	const capUSD = 0.0013
	f := newFixture(t, 0, geminisim.BatchConfig{Pending: time.Minute, Running: time.Minute})
	var recs []pipeline.Record
	for i := range 120 {
		text := fmt.Sprintf("review %d: %s", i, reviewTexts[i%len(reviewTexts)])
		if i%3 == 0 {
			text = " " // refused before a call: a dead letter committed at create
		}
		recs = append(recs, pipeline.Record{ID: fmt.Sprintf("r%03d", i), Text: text})
	}
	if _, err := f.db.Ingest(recs); err != nil {
		t.Fatal(err)
	}
	sum, err := f.driver(f.db, Config{Mode: ModeBatch, Size: 3, Budget: pipeline.Budget{RunUSD: capUSD}}).Run(context.Background())
	st := f.sim.BatchStats()
	// $0.0000458 is what one answer of this fixture is billed at the batch rate.
	billed := float64(st.Rows) * 0.0000458
	if billed > capUSD {
		t.Errorf("about $%.6f billed by the API in %d rows under a run budget of $%.4f (run: %v); the driver counted $%.6f",
			billed, st.Rows, capUSD, err, sum.CostUSD)
	}
}
