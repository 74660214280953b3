package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
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

// TestBatchCancel_CollectsAtJobPrice: `batch cancel` collecting a job
// that succeeded records its answers in the ledger at the job's price
// for the stage (halved for batch), as the run would have, not at the
// model's list price.
func TestBatchCancel_CollectsAtJobPrice(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	observe, release := stopAtEvent(t, geminisim.EventResults, stop)
	_, url := batchSim(t, geminisim.BatchConfig{Observe: observe})
	dir := t.TempDir()
	if _, err := writeFirstLines(filepath.Join(dir, "items.jsonl"), testReviews(t), 12); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "job.yaml")
	body := "db: job.db\ninput: {path: items.jsonl}\nbase_url: " + url + "\nstages:\n" +
		"  - llm:\n      name: triage\n      model: gemini-2.5-flash-lite\n      output: {label: [bug, praise, other]}\n" +
		"      price: {input_per_m: 100, output_per_m: 400}\n" +
		"      mode: batch\n      batch: {deadline: 30s, poll: 10ms}\n"
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncBuffer
	err := NewApp(Config{Stdout: &stdout, Stderr: &stderr}).RunContext(ctx, []string{"sawtooth", "run", "-f", f, "--quiet"})
	release()
	if !errors.Is(err, pipeline.ErrStopped) {
		t.Fatalf("run: %v, want it stopped\n%s", err, stderr.String())
	}
	db := filepath.Join(dir, "job.db")
	if err := runApp([]string{"sawtooth", "batch", "cancel", "--db", db, "1"}, &stdout, &stderr); err != nil {
		t.Fatalf("cancel: %v\n%s", err, stderr.String())
	}
	// At the list price the 12 answers cost about $0.0001; at the job's,
	// a thousand times that.
	if spent := classifyMoney(t, db).Money["triage"].SpentUSD; spent < 0.01 {
		t.Errorf("the ledger holds $%g for the collected job, want its cost at the job's price", spent)
	}
}

// TestRunJob_NoCacheBeforeBatchedStage: --no-cache holds for the online
// stages a batch phase runs before its batched stage: an item asking
// what another asked is asked again, not answered from the cache.
func TestRunJob_NoCacheBeforeBatchedStage(t *testing.T) {
	sim, url := batchSim(t, geminisim.BatchConfig{Shuffle: true})
	dir := t.TempDir()
	var lines strings.Builder
	for i := range 6 {
		fmt.Fprintf(&lines, "{\"id\":\"d%d\",\"text\":\"The app crashes every time I open it.\"}\n", i)
	}
	if err := os.WriteFile(filepath.Join(dir, "items.jsonl"), []byte(lines.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "job.yaml")
	body := "db: job.db\ninput: {path: items.jsonl}\nbase_url: " + url + "\nstages:\n" +
		"  - llm:\n      name: triage\n      output: {label: [bug, praise, other]}\n      limiter: {fixed: 1}\n" +
		"  - llm:\n      name: tone\n      prompt: \"What is the tone of this review? {{.Text}}\"\n" +
		"      output: {label: [angry, calm]}\n      mode: batch\n      batch: {deadline: 30s, poll: 20ms}\n"
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var errs syncBuffer
	if err := runApp([]string{"sawtooth", "run", "-f", f, "--quiet", "--no-cache"}, io.Discard, &errs); err != nil {
		t.Fatalf("run: %v\n%s", err, errs.String())
	}
	if n := sim.Stats().Calls; n != 6 {
		t.Errorf("%d online calls at triage, want 6: --no-cache asks each item", n)
	}
}

// TestStatus_BatchJobsAtJobPrice: status prices a stage's batch jobs as
// the run did, at the stage's own price (a job file's price:, or the
// --price-in/--price-out a run from flags recorded), halved for batch,
// not at the model's list price, which is a thousandth of it here.
func TestStatus_BatchJobsAtJobPrice(t *testing.T) {
	_, url := batchSim(t, geminisim.BatchConfig{Shuffle: true})
	const model = "gemini-2.5-flash-lite"
	for _, tc := range []struct {
		name string
		args func(dir string) []string
	}{
		{"job file", func(dir string) []string {
			f := filepath.Join(dir, "job.yaml")
			body := "db: job.db\ninput: {path: items.jsonl}\nbase_url: " + url + "\nstages:\n" +
				"  - llm:\n      name: classify\n      model: " + model + "\n      output: {label: [bug, praise, other]}\n" +
				"      price: {input_per_m: 100, output_per_m: 400}\n" +
				"      mode: batch\n      batch: {size: 10, deadline: 30s, poll: 20ms}\n"
			if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{"-f", f}
		}},
		{"flags", func(dir string) []string {
			return []string{"--db", filepath.Join(dir, "job.db"), "--input", filepath.Join(dir, "items.jsonl"), "--base-url", url, "--model", model,
				"--price-in", "100", "--price-out", "400", "--mode", "batch", "--batch-size", "10", "--batch-poll", "20ms"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := writeFirstLines(filepath.Join(dir, "items.jsonl"), testReviews(t), 20); err != nil {
				t.Fatal(err)
			}
			var errs syncBuffer
			if err := runApp(append([]string{"sawtooth", "run", "--quiet"}, tc.args(dir)...), io.Discard, &errs); err != nil {
				t.Fatalf("run: %v\n%s", err, errs.String())
			}
			var out syncBuffer
			if err := runApp([]string{"sawtooth", "status", "--db", filepath.Join(dir, "job.db"), "--json"}, &out, &errs); err != nil {
				t.Fatalf("status: %v\n%s", err, errs.String())
			}
			var st struct {
				Batch *struct {
					Usage         pipeline.Usage `json:"usage"`
					CostUSD       float64        `json:"cost_usd"`
					OnlineCostUSD float64        `json:"online_cost_usd"`
				} `json:"batch"`
			}
			if err := json.Unmarshal([]byte(out.String()), &st); err != nil || st.Batch == nil || st.Batch.Usage.PromptTokens == 0 {
				t.Fatalf("status --json: %v, no batch jobs with usage:\n%s", err, out.String())
			}
			in, outp := 100.0, 400.0
			price, err := stages.StagePrice(stages.PriceConfig{Model: model, InputPerM: &in, OutputPerM: &outp}, true)
			if err != nil {
				t.Fatal(err)
			}
			want := price.Cost(st.Batch.Usage)
			if b := st.Batch; math.Abs(b.OnlineCostUSD-want) > 1e-9*want || math.Abs(b.CostUSD-want*stages.BatchPriceFactor) > 1e-9*want {
				t.Errorf("status prices the jobs at $%g (online $%g), want $%g (online $%g) at the stage's price", b.CostUSD, b.OnlineCostUSD, want*stages.BatchPriceFactor, want)
			}
			listIn, listOut := stages.BatchPrice(model)
			if list := (float64(st.Batch.Usage.PromptTokens)*listIn + float64(st.Batch.Usage.CandidateTokens)*listOut) / 1e6; st.Batch.CostUSD < 100*list {
				t.Errorf("status prices the jobs at $%g, near the list price's $%g", st.Batch.CostUSD, list)
			}
		})
	}
}
