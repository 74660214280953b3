package report

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

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
	}{
		{"flag run, known model", store.RunKilled, `{"model":"gemini-2.5-flash","labels":["bug"]}`, list, false, true},
		{"flag run, no model means the default", store.RunKilled, `{"model":""}`, list, false, true},
		{"job stage in batch mode", store.RunKilled, `{"LLM":{"Name":"classify","Model":"gemini-2.5-flash","Mode":"batch"}}`, list * stages.BatchPriceFactor, false, true},
		{"unknown model", store.RunKilled, `{"model":"my-own-model"}`, 0, true, true},
		{"no configuration recorded", store.RunKilled, ``, 0, true, true},
		{"a complete run keeps its cost", "complete", `{"model":"gemini-2.5-flash"}`, 0.5, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runs := []pipeline.RunSummary{{ID: "r1", Status: tt.status, Stages: map[string]*pipeline.StageStats{
				"classify": {Usage: usage, CostUSD: map[bool]float64{true: 0.5}[tt.status == "complete"]},
				"sanitize": {Done: 3}, // no tokens: no note
			}}}
			defs := []pipeline.StageDef{{Name: "sanitize"}, {Name: "classify", Config: json.RawMessage(tt.config)}}
			got := priceKilledRuns(runs, defs)
			if !tt.noted {
				if len(got) != 0 || runs[0].Stages["classify"].CostUSD != tt.wantCost {
					t.Fatalf("got %+v, cost %v", got, runs[0].Stages["classify"].CostUSD)
				}
				return
			}
			if len(got) != 1 || got[0].Unpriced != tt.unpriced || math.Abs(got[0].CostUSD-tt.wantCost) > 1e-9 {
				t.Fatalf("got %+v, want cost %v unpriced %v", got, tt.wantCost, tt.unpriced)
			}
			if c := runs[0].Stages["classify"].CostUSD; math.Abs(c-tt.wantCost) > 1e-9 {
				t.Errorf("the run's classify cost is %v, want %v", c, tt.wantCost)
			}
		})
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
