package cli

import (
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
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// TestRunJob_BatchFlagsBesideAJob: --mode batch|auto or a --batch-* flag
// beside a job file is refused with one answer (the job's file says how
// each stage runs), and the refused run creates nothing.
func TestRunJob_BatchFlagsBesideAJob(t *testing.T) {
	url := startTestSim(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(input, []byte(`{"id":"a","text":"Great app!"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	job := func(t *testing.T, stages string) string {
		t.Helper()
		f := filepath.Join(t.TempDir(), "job.yaml")
		body := "db: job.db\ninput: {path: " + input + "}\nbase_url: " + url + "\nstages:\n" + stages
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	label := func(name, mode string) string {
		return "  - llm:\n      name: " + name + "\n      output: {label: [bug, praise, other]}\n" + mode
	}
	for _, tc := range []struct {
		name, stages string
		flags        []string
		want         []string
	}{
		{"--mode batch with -f", label("classify", ""), []string{"--mode", "batch"}, []string{"--mode", "`mode: batch`"}},
		{"--mode auto with -f", label("classify", ""), []string{"--mode", "auto"}, []string{"--mode", "`mode: batch`"}},
		{"--batch-deadline with -f", label("classify", ""), []string{"--batch-deadline", "1h"}, []string{"--batch-deadline", "`batch:` block"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := job(t, tc.stages)
			err := runApp(append([]string{"sawtooth", "run", "-f", f, "--quiet"}, tc.flags...), io.Discard, io.Discard)
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("run: %v, want a usage error", err)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("message lacks %q:\n%s", want, err)
				}
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), "job.db")); err == nil {
				t.Error("the refused run created its database")
			}
		})
	}
	// --mode online beside a job file is not a request for batch jobs.
	err := runApp([]string{"sawtooth", "run", "-f", job(t, label("classify", "")), "--quiet", "--mode", "online"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "set in the job file instead") {
		t.Errorf("--mode online with -f: %v", err)
	}
}

// TestRunJob_AnyLLMStageBatch: a job-file LLM stage other than the
// classify preset (its own name and schema, after another LLM stage)
// runs mode: batch through batch jobs: every item of it answered by a job,
// the stage before it online, and the stages after it run.
func TestRunJob_AnyLLMStageBatch(t *testing.T) {
	sim, url := batchSim(t, geminisim.BatchConfig{Shuffle: true})
	dir := t.TempDir()
	input := filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 20); err != nil {
		t.Fatal(err)
	}
	schema := filepath.Join(dir, "summary.json")
	if err := os.WriteFile(schema, []byte(`{"type":"object","properties":{"summary":{"type":"string"}},"required":["summary"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "job.yaml")
	body := "db: job.db\ninput: {path: items.jsonl}\nbase_url: " + url + "\nstages:\n  - sanitize: {}\n" +
		"  - llm:\n      name: triage\n      output: {label: [bug, praise, other]}\n" +
		"  - llm:\n      name: summary\n      prompt: \"Summarize this review in a few words: {{.Text}}\"\n" +
		"      output: {schema_file: summary.json}\n" +
		"      mode: batch\n      batch: {deadline: 30s, poll: 20ms}\n"
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errs syncBuffer
	if err := runApp([]string{"sawtooth", "run", "-f", f, "--quiet"}, &out, &errs); err != nil {
		t.Fatalf("run -f with a summary stage in mode: batch: %v\n%s", err, errs.String())
	}
	if n := sim.Stats().Calls; n != 20 {
		t.Errorf("%d online calls, want 20: triage online, summary by batch jobs only", n)
	}
	if st := sim.BatchStats(); st.Created == 0 {
		t.Errorf("no batch job created: %+v", st)
	}
	d, err := openReadOnly(filepath.Join(dir, "job.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	counts, err := d.Counts()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range counts.Stages {
		if s.Queued != 0 || s.Dead != 0 {
			t.Errorf("stage %s: %d queued, %d dead; want every item through", s.Stage, s.Queued, s.Dead)
		}
	}
}

// TestRunJob_PresetBatch: a job file's classify preset runs mode batch
// through the same drain as a run from flags: every item answered by
// batch jobs, none by an online call, the job stored with its mode.
func TestRunJob_PresetBatch(t *testing.T) {
	sim, url := batchSim(t, geminisim.BatchConfig{Shuffle: true})
	dir := t.TempDir()
	input := filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 30); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "job.yaml")
	body := "db: job.db\ninput: {path: items.jsonl}\nbase_url: " + url + "\nstages:\n  - sanitize: {}\n" +
		"  - llm:\n      name: classify\n      preset: classify\n      output: {label: [bug, praise, other]}\n" +
		"      mode: batch\n      batch: {deadline: 30s, poll: 20ms}\n  - aggregate: {}\n"
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errs syncBuffer
	if err := runApp([]string{"sawtooth", "run", "-f", f, "--quiet"}, &out, &errs); err != nil {
		t.Fatalf("run -f with mode: batch: %v\n%s", err, errs.String())
	}
	if n := sim.Stats().Calls; n != 0 {
		t.Errorf("%d online calls, want none: the batch jobs answer every item", n)
	}
	if st := sim.BatchStats(); st.Created == 0 {
		t.Errorf("no batch job created: %+v", st)
	}
	d, err := openReadOnly(filepath.Join(dir, "job.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	counts, err := d.Counts()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range counts.Stages {
		if s.Queued != 0 || s.Stage == "classify" && s.Output != 30 {
			t.Errorf("stage %s: %d queued, %d answered; want none queued and 30 classified", s.Stage, s.Queued, s.Output)
		}
	}
}

// TestRunJob_TwoBatchedStages: two LLM stages of one job run through
// batch jobs of their own (batch, then batch or auto): each stage's items
// are answered by its own jobs, none online, every job names its stage,
// each stage's jobs take their settings from its own batch block (what it
// leaves out from the defaults, not from the other's), and the second
// stage's jobs ask only for what the first committed.
func TestRunJob_TwoBatchedStages(t *testing.T) {
	for _, second := range []string{"batch", "auto"} {
		t.Run(second, func(t *testing.T) {
			sim, url := batchSim(t, geminisim.BatchConfig{Shuffle: true})
			dir := t.TempDir()
			input := filepath.Join(dir, "items.jsonl")
			if _, err := writeFirstLines(input, testReviews(t), 24); err != nil {
				t.Fatal(err)
			}
			f := filepath.Join(dir, "job.yaml")
			body := "db: job.db\ninput: {path: items.jsonl}\nbase_url: " + url + "\nstages:\n  - sanitize: {}\n" +
				"  - llm:\n      name: triage\n      output: {label: [bug, praise, other]}\n" +
				"      mode: batch\n      batch: {size: 10, deadline: 30s, poll: 20ms}\n" +
				"  - llm:\n      name: tone\n      prompt: \"What is the tone of this review? {{.Text}}\"\n" +
				"      output: {label: [angry, calm]}\n" +
				"      mode: " + second + "\n      batch: {deadline: 30s, poll: 20ms}\n"
			if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errs syncBuffer
			if err := runApp([]string{"sawtooth", "run", "-f", f, "--quiet"}, &out, &errs); err != nil {
				t.Fatalf("run -f with two stages through batch jobs: %v\n%s", err, errs.String())
			}
			if n := sim.Stats().Calls; n != 0 {
				t.Errorf("%d online calls, want none: both stages answered by batch jobs", n)
			}
			d, err := openReadOnly(filepath.Join(dir, "job.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			counts, err := d.Counts()
			if err != nil {
				t.Fatal(err)
			}
			answered := map[string]int{}
			for _, s := range counts.Stages {
				answered[s.Stage] = s.Output + s.Dead
				if s.Queued != 0 {
					t.Errorf("stage %s: %d queued, want none", s.Stage, s.Queued)
				}
			}
			jobs, err := d.(interface {
				BatchJobs(bool) ([]pipeline.BatchJob, error)
			}).BatchJobs(false)
			if err != nil {
				t.Fatal(err)
			}
			sent := map[string]int{}
			for _, j := range jobs {
				sent[j.Stage] += j.Answered + j.Dead
				// tone's block gives no size: the default, not triage's 10.
				if j.Stage == "tone" && len(j.Items) <= 10 {
					t.Errorf("tone's job %d of %d items: sized by triage's batch block", j.Num, len(j.Items))
				}
			}
			for _, stage := range []string{"triage", "tone"} {
				if sent[stage] == 0 || sent[stage] != answered[stage] {
					t.Errorf("stage %s: %d answered by its batch jobs, %d in all; want every one by its jobs", stage, sent[stage], answered[stage])
				}
			}
			if answered["tone"] != answered["triage"]-countDead(counts, "triage") {
				t.Errorf("tone answered %d, want what triage answered (%d less its dead)", answered["tone"], answered["triage"])
			}
			var stout syncBuffer
			if err := runApp([]string{"sawtooth", "status", "--db", filepath.Join(dir, "job.db"), "--json"}, &stout, io.Discard); err != nil {
				t.Fatal(err)
			}
			var st struct {
				Batch struct {
					CostUSD float64 `json:"cost_usd"`
					Stages  []struct {
						Stage    string  `json:"stage"`
						Model    string  `json:"model"`
						Answered int     `json:"answered"`
						CostUSD  float64 `json:"cost_usd"`
					} `json:"stages"`
				} `json:"batch"`
			}
			if err := json.Unmarshal([]byte(stout.String()), &st); err != nil {
				t.Fatalf("status --json: %v\n%s", err, stout.String())
			}
			if ss := st.Batch.Stages; len(ss) != 2 || ss[0].Stage != "triage" || ss[1].Stage != "tone" ||
				ss[0].Answered == 0 || ss[1].Answered == 0 || ss[0].CostUSD <= 0 || ss[1].CostUSD <= 0 || ss[0].Model == "" ||
				math.Abs(st.Batch.CostUSD-ss[0].CostUSD-ss[1].CostUSD) > 1e-12 {
				t.Errorf("status names each stage's batch jobs with its model and cost: %+v", st.Batch)
			}
		})
	}
}

func countDead(c pipeline.Counts, stage string) int {
	for _, s := range c.Stages {
		if s.Stage == stage {
			return s.Dead
		}
	}
	return 0
}

// TestRunJob_BatchMaxSends: a stage whose every answer is cut off (an
// output budget of one token) is asked for each item in at most its
// batch block's max_sends jobs over the rounds of a run and the runs
// after it; the items then wait in its dead letters, and a run after
// that sends nothing.
func TestRunJob_BatchMaxSends(t *testing.T) {
	sim, url := batchSim(t, geminisim.BatchConfig{})
	dir := t.TempDir()
	input := filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 5); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "job.yaml")
	body := "db: job.db\ninput: {path: items.jsonl}\nbase_url: " + url + "\nstages:\n" +
		"  - llm:\n      name: triage\n      output: {label: [bug, praise, other]}\n      max_output_tokens: 1\n" +
		"      mode: batch\n      batch: {deadline: 30s, poll: 20ms, max_sends: 2}\n"
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	for run := range 2 {
		var errs syncBuffer
		if err := runApp([]string{"sawtooth", "run", "-f", f, "--quiet"}, io.Discard, &errs); err != nil {
			t.Fatalf("run %d: %v\n%s", run+1, err, errs.String())
		}
	}
	if rows := sim.BatchStats().Rows; rows != 5*2 {
		t.Errorf("%d batch requests, want 10: each item in 2 jobs", rows)
	}
	d, err := openReadOnly(filepath.Join(dir, "job.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if c, err := d.Counts(); err != nil || c.Stages[0].Dead != 5 {
		t.Errorf("counts %+v %v: want every item dead at triage", c, err)
	}
}

// TestRunJob_TwoBatchedStagesBudget: a --budget the first batched
// stage's jobs spend stops the run before the second stage's jobs (exit
// 3, the budget's message, everything billed within it), and a higher
// budget resumes both stages to the end.
func TestRunJob_TwoBatchedStagesBudget(t *testing.T) {
	sim, url := batchSim(t, geminisim.BatchConfig{Shuffle: true})
	dir := t.TempDir()
	input := filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 60); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "job.yaml")
	body := "db: job.db\ninput: {path: items.jsonl}\nbase_url: " + url + "\nstages:\n" +
		"  - llm:\n      name: triage\n      output: {label: [bug, praise, other]}\n" +
		"      mode: batch\n      batch: {size: 10, deadline: 30s, poll: 20ms}\n" +
		"  - llm:\n      name: tone\n      prompt: \"What is the tone of this review? {{.Text}}\"\n" +
		"      output: {label: [angry, calm]}\n      mode: batch\n      batch: {size: 10, deadline: 30s, poll: 20ms}\n"
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	const budget = 0.0015
	var errs syncBuffer
	err := runApp([]string{"sawtooth", "run", "-f", f, "--quiet", "--budget", fmt.Sprint(budget)}, io.Discard, &errs)
	if !errors.Is(err, pipeline.ErrStopped) || !strings.Contains(err.Error(), "raise --budget to continue") {
		t.Fatalf("run: %v, want the budget's stop\n%s", err, errs.String())
	}
	for name := range sim.BatchStats().ByDisplayName {
		if strings.Contains(name, "-tone-") {
			t.Errorf("job %s of the second stage created past the budget", name)
		}
	}
	st := classifyMoney(t, filepath.Join(dir, "job.db"))
	if spent := st.Money["triage"].SpentUSD + st.Money["tone"].SpentUSD; spent <= 0 || spent > budget {
		t.Errorf("the ledger spent $%g, want some, within the budget $%g", spent, budget)
	}
	if err := runApp([]string{"sawtooth", "run", "-f", f, "--quiet", "--budget", "1"}, io.Discard, &errs); err != nil {
		t.Fatalf("resume with a higher budget: %v\n%s", err, errs.String())
	}
	if n := sim.Stats().Calls; n != 0 {
		t.Errorf("%d online calls, want none", n)
	}
	st = classifyMoney(t, filepath.Join(dir, "job.db"))
	queued := 0
	for _, s := range st.Counts.Stages {
		queued += s.Queued
	}
	if queued != 0 || st.Money["tone"].SpentUSD <= 0 {
		t.Errorf("after the resume: %d queued, tone spent $%g; want none queued and tone paid", queued, st.Money["tone"].SpentUSD)
	}
}
