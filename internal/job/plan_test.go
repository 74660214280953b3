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
