package monitor

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// A killed run's tokens count in the status, and its missing price is
// said, not folded silently into the cost.
func TestStatusView_KilledRunTokensAreShownUnpriced(t *testing.T) {
	classify := func(in, out int64, cost float64) map[string]*pipeline.StageStats {
		return map[string]*pipeline.StageStats{"classify": {Usage: pipeline.Usage{PromptTokens: in, CandidateTokens: out}, CostUSD: cost}}
	}
	runs := []pipeline.RunSummary{
		{ID: "r3", Status: "complete", Stages: classify(100, 10, 0.5)},
		{ID: "r2", Status: pipeline.RunKilled, Stages: classify(40, 4, 0)},
		{ID: "r1", Status: "complete", Stages: classify(1000, 100, 2)},
	}
	v := NewStatusView("s.db", pipeline.Counts{}, 0, runs)
	if want := (pipeline.Usage{PromptTokens: 1140, CandidateTokens: 114}); v.Usage != want {
		t.Errorf("Usage = %+v, want %+v", v.Usage, want)
	}
	if v.CostUSD != 2.5 || v.UnpricedTokens != 44 {
		t.Errorf("CostUSD = %v, UnpricedTokens = %d; want 2.5 and 44", v.CostUSD, v.UnpricedTokens)
	}
	var b bytes.Buffer
	if err := PrintStatus(&b, v, false); err != nil {
		t.Fatal(err)
	}
	if want := "1140 in, 114 out; estimated cost $2.5000 without the 44 tokens of killed runs"; !strings.Contains(b.String(), want) {
		t.Errorf("status lacks %q:\n%s", want, b.String())
	}
}

// A killed run's record ends at its last sample: its duration is a lower
// bound, and unknown without a sample; other runs' are their own.
func TestRunDuration(t *testing.T) {
	cases := []struct {
		name, status string
		took         time.Duration
		want         string
	}{
		{"complete", "complete", 8*time.Second + 300*time.Millisecond, "8s"},
		{"killed with samples", pipeline.RunKilled, 12 * time.Second, ">=12s"},
		{"killed without a sample", pipeline.RunKilled, 0, "?"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := runDuration(tc.status, tc.took); got != tc.want {
				t.Errorf("runDuration(%q, %s) = %q, want %q", tc.status, tc.took, got, tc.want)
			}
		})
	}
}
