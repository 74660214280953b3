package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// TestRunJob_BatchStageJobPrice: a batched stage whose job gives its own
// price (a model the table does not know, or a negotiated rate) is
// budgeted and billed at that price, halved for batch, not at the list
// price: at 1000 times the list, a budget of a few items stops the jobs
// and the ledger holds what they cost at the job's price.
func TestRunJob_BatchStageJobPrice(t *testing.T) {
	_, url := batchSim(t, geminisim.BatchConfig{Shuffle: true})
	dir := t.TempDir()
	if _, err := writeFirstLines(filepath.Join(dir, "items.jsonl"), testReviews(t), 60); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "job.yaml")
	body := "db: job.db\ninput: {path: items.jsonl}\nbase_url: " + url + "\nstages:\n" +
		"  - llm:\n      name: triage\n      model: gemini-2.5-flash-lite\n      output: {label: [bug, praise, other]}\n" +
		"      price: {input_per_m: 100, output_per_m: 400}\n" +
		"      mode: batch\n      batch: {size: 10, deadline: 30s, poll: 20ms}\n"
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	const budget = 0.5
	var errs syncBuffer
	err := runApp([]string{"sawtooth", "run", "-f", f, "--quiet", "--budget", fmt.Sprint(budget)}, io.Discard, &errs)
	if !errors.Is(err, pipeline.ErrStopped) || !strings.Contains(err.Error(), "budget") {
		t.Fatalf("run: %v, want the budget's stop: the job's price puts 60 items far past $%g\n%s", err, budget, errs.String())
	}
	st := classifyMoney(t, filepath.Join(dir, "job.db"))
	if spent := st.Money["triage"].SpentUSD; spent <= 0.01 || spent > budget {
		t.Errorf("the ledger spent $%g, want the jobs' cost at the job's price, within $%g", spent, budget)
	}
}
