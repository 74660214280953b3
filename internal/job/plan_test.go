package job

import (
	"path/filepath"
	"testing"
	"time"
)

func TestEstimate(t *testing.T) {
	j, err := Load(filepath.Join("testdata", "nightly.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	price := func(model string) (float64, float64) {
		if model == "gemini-2.5-pro" {
			return 1, 10
		}
		return 0.5, 2
	}
	tests := []struct {
		name string
		in   PlanInput
		// want per LLM stage: calls, prompt tokens, output tokens, limit, duration, basis
		want map[string]StagePlan
	}{
		{
			name: "no history",
			in:   PlanInput{Items: 1000, AvgTextChars: 396, PromptChars: map[string]int{"classify": 4, "extract": 4}, Price: price},
			want: map[string]StagePlan{
				"classify": {Calls: 1000, PromptTokens: 100_000, OutputTokens: 30_000, Limit: 8, Duration: 125 * time.Second, Basis: "estimated", CostUSD: 0.11},
				"extract":  {Calls: 1000, PromptTokens: 100_000, OutputTokens: 120_000, Limit: 8, Duration: 125 * time.Second, Basis: "estimated", CostUSD: 1.3},
			},
		},
		{
			name: "learned",
			in: PlanInput{Items: 1000, Price: price, Learned: map[string]int{"classify": 200, "extract": 10},
				History: map[string]History{
					// A quarter of the items were bugs; 4 calls a second per slot.
					"extract": {Done: 400, Attempts: 100, Calls: 100, PromptTokens: 20_000, OutputTokens: 5_000, Seconds: 2.5, Limit: 10},
				}},
			want: map[string]StagePlan{
				// The ceiling (128) caps the learned 200.
				"classify": {Calls: 1000, PromptTokens: 0, OutputTokens: 30_000, Limit: 128, Duration: 8 * time.Second, Basis: "estimated", CostUSD: 0.06},
				"extract":  {Calls: 250, PromptTokens: 50_000, OutputTokens: 12_500, Limit: 10, Duration: 6 * time.Second, Basis: "learned", CostUSD: 0.175},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, p := range Estimate(j, tt.in) {
				w, ok := tt.want[p.Stage]
				if !ok {
					if p.Calls != 0 || p.Items != tt.in.Items {
						t.Errorf("%s: %+v", p.Stage, p)
					}
					continue
				}
				if p.Calls != w.Calls || p.PromptTokens != w.PromptTokens || p.OutputTokens != w.OutputTokens ||
					p.Limit != w.Limit || p.Duration != w.Duration || p.Basis != w.Basis || int(p.CostUSD*1e4) != int(w.CostUSD*1e4) {
					t.Errorf("%s = %+v\nwant %+v", p.Stage, p, w)
				}
			}
		})
	}
}

// TestEstimate_Work: with the run's work per stage, a stage prices its
// counted calls as they are and only its open items at its share; a
// stage the work does not reach prices nothing.
func TestEstimate_Work(t *testing.T) {
	j, err := Load(filepath.Join("testdata", "nightly.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	price := func(string) (float64, float64) { return 1, 1 }
	hist := map[string]History{"extract": {Done: 400, Attempts: 100, Calls: 100, PromptTokens: 10_000, OutputTokens: 10_000}}
	for _, tc := range []struct {
		name      string
		work      map[string]StageWork
		wantItems map[string]int
		wantCalls map[string]int
	}{
		{"an added stage", map[string]StageWork{"extract": {Items: 300, Calls: 93, Skipped: 207}, "aggregate": {Items: 300}},
			map[string]int{"sanitize": 0, "classify": 0, "extract": 300, "aggregate": 300}, map[string]int{"classify": 0, "extract": 93}},
		{"counted and open", map[string]StageWork{"sanitize": {Items: 40}, "classify": {Items: 40, Open: 40}, "extract": {Items: 40, Calls: 2, Open: 20}, "aggregate": {Items: 40}},
			map[string]int{"sanitize": 40, "classify": 40, "extract": 40, "aggregate": 40}, map[string]int{"classify": 40, "extract": 2 + 5}},
		{"nothing to do", map[string]StageWork{},
			map[string]int{"sanitize": 0, "classify": 0, "extract": 0, "aggregate": 0}, map[string]int{"classify": 0, "extract": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range Estimate(j, PlanInput{Items: 1000, Work: tc.work, History: hist, Price: price}) {
				if p.Items != tc.wantItems[p.Stage] {
					t.Errorf("%s: %d items, want %d", p.Stage, p.Items, tc.wantItems[p.Stage])
				}
				if want, llm := tc.wantCalls[p.Stage]; llm && p.Calls != want {
					t.Errorf("%s: %d calls, want %d", p.Stage, p.Calls, want)
				}
				if p.Calls == 0 && p.CostUSD != 0 {
					t.Errorf("%s: no call but $%f", p.Stage, p.CostUSD)
				}
			}
		})
	}
}
