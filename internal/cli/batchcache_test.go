package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// TestRun_BatchAnswersCachedAndBilled: batch answers go into the answer
// cache and the ledger as online ones do: an online run asking the same
// questions for new ids pays nothing, and the lifetime spend that
// --budget-total reads includes what the batch jobs cost.
func TestRun_BatchAnswersCachedAndBilled(t *testing.T) {
	sim, url := batchSim(t, geminisim.BatchConfig{Shuffle: true})
	dir := t.TempDir()
	db, first, again := filepath.Join(dir, "b.db"), filepath.Join(dir, "first.jsonl"), filepath.Join(dir, "again.jsonl")
	if _, err := writeFirstLines(first, testReviews(t), 40); err != nil {
		t.Fatal(err)
	}
	// The same 40 reviews under new ids.
	raw, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	var renamed bytes.Buffer
	for _, line := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatal(err)
		}
		rec["id"] = "again-" + rec["id"].(string)
		b, _ := json.Marshal(rec)
		renamed.Write(append(b, '\n'))
	}
	if err := os.WriteFile(again, renamed.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	if err := runApp([]string{"sawtooth", "run", "--db", db, "--input", first, "--base-url", url, "--quiet",
		"--mode", "batch", "--batch-poll", "20ms"}, io.Discard, &stderr); err != nil {
		t.Fatalf("batch run: %v\n%s", err, stderr.String())
	}
	if calls := sim.Stats().Calls; calls != 0 {
		t.Fatalf("the batch run made %d online calls, want 0", calls)
	}
	var out syncBuffer
	if err := runApp([]string{"sawtooth", "status", "--db", db, "--json"}, &out, &stderr); err != nil {
		t.Fatal(err)
	}
	var st struct {
		Money map[string]struct {
			SpentUSD float64 `json:"spent_usd"`
		} `json:"money"`
		Batch struct {
			CostUSD float64 `json:"cost_usd"`
		} `json:"batch"`
	}
	if err := json.Unmarshal([]byte(out.String()), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out.String())
	}
	if spent, cost := st.Money["classify"].SpentUSD, st.Batch.CostUSD; cost <= 0 || spent < cost*0.999 || spent > cost*1.001 {
		t.Errorf("classify's ledger spent $%g, the batch jobs cost $%g: want them equal\n%s", spent, cost, out.String())
	}
	out = syncBuffer{}
	if err := runApp([]string{"sawtooth", "run", "--db", db, "--input", again, "--base-url", url, "--quiet", "--json"}, &out, &stderr); err != nil {
		t.Fatalf("online run: %v\n%s", err, stderr.String())
	}
	if calls := sim.Stats().Calls; calls != 0 {
		t.Errorf("the online run paid %d calls for questions the batch answered, want 0\n%s", calls, out.String())
	}
}

// TestRun_BatchBudget: --budget with --mode batch stops creating jobs
// before the cap (exit 3, the budget's message, the ledger and the
// simulator's batch tokens within it) and a higher budget resumes and
// finishes; with --mode auto what the jobs could not take goes online
// only within what is left of the same budget (the ledger, batch and
// online together, within it), also when a stuck job was cancelled at
// the deadline and gave its reservation back.
func TestRun_BatchBudget(t *testing.T) {
	cases := []struct {
		name, mode string
		budget     float64
		bc         geminisim.BatchConfig
		// deadline is --batch-deadline. In batch mode a job past it is
		// cancelled with nothing billed, so a short one made the case
		// depend on the machine's speed: on a loaded one the first job
		// outlived 300 ms and the run stopped at its budget with $0 spent.
		deadline   string
		wantOnline bool
	}{
		{"batch", "batch", 0.0015, geminisim.BatchConfig{Shuffle: true}, "1h", false},
		{"auto, the rest online", "auto", 0.0015, geminisim.BatchConfig{Shuffle: true}, "300ms", true},
		{"auto, a stuck job", "auto", 0.004, geminisim.BatchConfig{Fates: []geminisim.Fate{geminisim.FateStuck}}, "300ms", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sim, url := batchSim(t, tc.bc)
			dir := t.TempDir()
			db, input := filepath.Join(dir, "b.db"), filepath.Join(dir, "items.jsonl")
			if _, err := writeFirstLines(input, testReviews(t), 60); err != nil {
				t.Fatal(err)
			}
			args := []string{"sawtooth", "run", "--db", db, "--base-url", url, "--quiet", "--mode", tc.mode,
				"--batch-size", "10", "--batch-poll", "20ms", "--batch-deadline", tc.deadline}
			var stdout, stderr syncBuffer
			err := runApp(append(args, "--input", input, "--budget", fmt.Sprint(tc.budget)), &stdout, &stderr)
			if !errors.Is(err, pipeline.ErrStopped) || !strings.Contains(err.Error(), "reached") || !strings.Contains(err.Error(), "raise --budget to continue") {
				t.Fatalf("run: %v, want the budget's stop\n%s", err, stderr.String())
			}
			if online := sim.Stats().Calls > 0; online != tc.wantOnline {
				t.Errorf("online calls made: %v, want %v\n%s", online, tc.wantOnline, stderr.String())
			}
			st := classifyMoney(t, db)
			if spent := st.Money["classify"].SpentUSD; spent <= 0 || spent > tc.budget {
				t.Errorf("classify's ledger spent $%g, want some, within the budget $%g", spent, tc.budget)
			}
			in, out := stages.BatchPrice(stages.DefaultModel)
			if bill := float64(sim.BatchStats().BilledTokens) * min(in, out) / 1e6; bill > tc.budget {
				t.Errorf("the simulator billed batch tokens worth at least $%g, over the budget $%g", bill, tc.budget)
			}
			if st.queued() == 0 {
				t.Errorf("nothing left queued at classify under a budget for a few items")
			}

			if err := runApp(append(args, "--budget", "1"), &stdout, &stderr); err != nil {
				t.Fatalf("resume with a higher budget: %v\n%s", err, stderr.String())
			}
			if st := classifyMoney(t, db); st.queued() != 0 {
				t.Errorf("classify still queues %d items after the resume", st.queued())
			}
			for id, it := range sim.Stats().Items {
				if it.OK > 1 {
					t.Errorf("item %s answered %d times", id, it.OK)
				}
			}
		})
	}
}

// batchStatusJSON is what the batch tests read of `status --json`.
type batchStatusJSON struct {
	Money  map[string]pipeline.Ledger `json:"money"`
	Counts struct {
		Stages []struct {
			Stage  string `json:"stage"`
			Queued int    `json:"queued"`
		} `json:"stages"`
	} `json:"counts"`
}

func (s batchStatusJSON) queued() int {
	for _, st := range s.Counts.Stages {
		if st.Stage == "classify" {
			return st.Queued
		}
	}
	return 0
}

func classifyMoney(t *testing.T, db string) batchStatusJSON {
	t.Helper()
	var out, errb syncBuffer
	if err := runApp([]string{"sawtooth", "status", "--db", db, "--json"}, &out, &errb); err != nil {
		t.Fatalf("status: %v\n%s", err, errb.String())
	}
	var st batchStatusJSON
	if err := json.Unmarshal([]byte(out.String()), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out.String())
	}
	return st
}
