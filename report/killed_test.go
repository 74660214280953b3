package report

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
)

func TestPriceKilledRuns(t *testing.T) {
	usage := pipeline.Usage{PromptTokens: 2_000_000, CandidateTokens: 100_000, TotalTokens: 2_100_000}
	in, out := stages.Price("gemini-2.5-flash")
	list := in*2 + out*0.1
	tests := []struct {
		name     string
		status   string
		config   string
		wantCost float64
		unpriced bool
		noted    bool
		own      map[string]stages.PriceConfig
	}{
		{"flag run, known model", store.RunKilled, `{"model":"gemini-2.5-flash","labels":["bug"]}`, list, false, true, nil},
		{"flag run, no model means the default", store.RunKilled, `{"model":""}`, list, false, true, nil},
		{"job stage in batch mode", store.RunKilled, `{"LLM":{"Name":"classify","Model":"gemini-2.5-flash","Mode":"batch"}}`, list * stages.BatchPriceFactor, false, true, nil},
		{"unknown model", store.RunKilled, `{"model":"my-own-model"}`, 0, true, true, nil},
		{"no configuration recorded", store.RunKilled, ``, 0, true, true, nil},
		{"a complete run keeps its cost", "complete", `{"model":"gemini-2.5-flash"}`, 0.5, false, false, nil},
		{"the stored job's price over the list price", store.RunKilled, `{"model":"gemini-2.5-flash"}`, 2*1 + 0.1*2, false, true, ownPrice(1, 2)},
		{"the stored job's price, batch mode", store.RunKilled, `{"LLM":{"Name":"classify","Model":"gemini-2.5-flash","Mode":"batch"}}`, (2*1 + 0.1*2) * stages.BatchPriceFactor, false, true, ownPrice(1, 2)},
		{"the stored job prices an unlisted model", store.RunKilled, `{"model":"my-own-model"}`, 2*1 + 0.1*2, false, true, ownPrice(1, 2)},
		{"a stored job without a price keeps the list price", store.RunKilled, `{"model":"gemini-2.5-flash"}`, list, false, true, map[string]stages.PriceConfig{"classify": {Model: "gemini-2.5-flash"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runs := []pipeline.RunSummary{{ID: "r1", Status: tt.status, Stages: map[string]*pipeline.StageStats{
				"classify": {Usage: usage, CostUSD: map[bool]float64{true: 0.5}[tt.status == "complete"]},
				"sanitize": {Done: 3}, // no tokens: no note
			}}}
			defs := []pipeline.StageDef{{Name: "sanitize"}, {Name: "classify", Config: json.RawMessage(tt.config)}}
			got := priceKilledRuns(runs, defs, tt.own)
			if !tt.noted {
				if len(got) != 0 || runs[0].Stages["classify"].CostUSD != tt.wantCost {
					t.Fatalf("got %+v, cost %v", got, runs[0].Stages["classify"].CostUSD)
				}
				return
			}
			if len(got) != 1 || got[0].Unpriced != tt.unpriced || math.Abs(got[0].CostUSD-tt.wantCost) > 1e-9 || got[0].OwnPrice != (tt.own["classify"].InputPerM != nil) {
				t.Fatalf("got %+v, want cost %v unpriced %v", got, tt.wantCost, tt.unpriced)
			}
			if c := runs[0].Stages["classify"].CostUSD; math.Abs(c-tt.wantCost) > 1e-9 {
				t.Errorf("the run's classify cost is %v, want %v", c, tt.wantCost)
			}
		})
	}
}

func ownPrice(in, out float64) map[string]stages.PriceConfig {
	return map[string]stages.PriceConfig{"classify": {Model: "gemini-2.5-flash", InputPerM: &in, OutputPerM: &out}}
}

// TestLoad_KilledRunAtTheStoredJobsPrice: a killed run's cost is
// estimated at the price: its stored job gives the stage, and the note
// says so (it said a run's own prices were not recorded).
func TestLoad_KilledRunAtTheStoredJobsPrice(t *testing.T) {
	db := fixtureDB(t)
	yaml := "db: r.db\ninput: {path: in.jsonl}\nstages:\n  - llm:\n      name: classify\n      output: {label: [a]}\n      price: {input_per_m: 1, output_per_m: 2}\n"
	if err := db.SaveJob(job.Stored{YAML: yaml}.Marshal()); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	run := pipeline.RunSummary{ID: "killed-1", Status: store.RunKilled, Started: start, Ended: start.Add(time.Minute),
		Stages: map[string]*pipeline.StageStats{"classify": {Done: 5, Calls: 5, Usage: pipeline.Usage{PromptTokens: 1_000_000, CandidateTokens: 500_000}}}}
	if err := db.SaveRun(run); err != nil {
		t.Fatal(err)
	}
	d, err := Load(db, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	notes := d.KilledCostNotes("killed-1")
	if len(notes) != 1 || !strings.Contains(notes[0], "est. $2.00 at the price the stored job gives the stage") {
		t.Errorf("notes %q, want the job's price ($1 in + $1 out)", notes)
	}
}

// TestLoad_KilledRunUnpriced: a killed run whose stage names no model
// reads "unpriced" in the report, never $0.
func TestLoad_KilledRunUnpriced(t *testing.T) {
	db := fixtureDB(t)
	start := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	run := pipeline.RunSummary{ID: "killed-1", Status: store.RunKilled, Started: start, Ended: start.Add(time.Minute),
		Stages: map[string]*pipeline.StageStats{"classify": {Done: 5, Calls: 5, Usage: pipeline.Usage{PromptTokens: 1200, CandidateTokens: 300}}}}
	if err := db.SaveRun(run); err != nil {
		t.Fatal(err)
	}
	d, err := Load(db, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := Text(&b, d); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"run killed-1 was killed before it saved its cost: classify paid 1,200 tokens in / 300 out, unpriced", "unpriced"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "est. $0") {
		t.Errorf("a killed run shows $0:\n%s", b.String())
	}
}

// jobUnreadable is a database whose stored job cannot be read.
type jobUnreadable struct{ *store.DB }

func (jobUnreadable) Job() ([]byte, error) { return nil, errors.New("disk I/O error") }

// TestLoad_StoredJobUnreadable: a stored job the database fails to read
// fails the report, as its other records do. Skipped, a killed run's
// cost was estimated at the list price, and the note said so, whatever
// price: the job gives the stage.
func TestLoad_StoredJobUnreadable(t *testing.T) {
	_, err := Load(jobUnreadable{fixtureDB(t)}, LoadOptions{})
	var rec *RecordError
	if !errors.As(err, &rec) || !strings.Contains(err.Error(), "stored job") || !strings.Contains(err.Error(), "disk I/O error") {
		t.Fatalf("Load with the stored job unreadable: %v; want a RecordError naming the stored job and the cause", err)
	}
}
