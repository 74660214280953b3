package monitor

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

func TestPrintSummary_Tiers(t *testing.T) {
	start := time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC)
	stage := func(tiers map[string]*pipeline.TierStats, cached int64, saved float64) *pipeline.StageStats {
		return &pipeline.StageStats{Calls: 10, Tiers: tiers, CacheSavedUSD: saved, Usage: pipeline.Usage{CachedTokens: cached}}
	}
	for _, tc := range []struct {
		name  string
		st    *pipeline.StageStats
		want  []string
		avoid []string
	}{
		{"all standard says nothing new", stage(nil, 0, 0), nil, []string{"tier", "implicitly"}},
		{"flex and standard", stage(map[string]*pipeline.TierStats{
			pipeline.TierFlex:     {Calls: 2000, Shed: 1000, CostUSD: 1, SavedUSD: 1},
			pipeline.TierStandard: {Calls: 1000, CostUSD: 1},
		}, 0, 0), []string{
			"classify: standard tier: 1000 calls, $1.0000\n",
			"classify: flex tier: 2000 calls, 1000 shed, $1.0000 ($1.0000 less than on standard)\n",
			"classify: the tiers saved $1.0000 against all standard\n",
		}, nil},
		{"priority costs more", stage(map[string]*pipeline.TierStats{pipeline.TierPriority: {Calls: 5, CostUSD: 1.8, SavedUSD: -0.8}}, 0, 0),
			[]string{"classify: priority tier: 5 calls, $1.8000 ($0.8000 more than on standard)\n"}, nil},
		{"implicit cache", stage(nil, 12800, 0.0035), []string{"classify: 12800 input tokens implicitly cached, $0.0035 saved by the cached rate\n"}, []string{"tier"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			sum := pipeline.RunSummary{ID: "r1", Started: start, Ended: start.Add(time.Minute), Status: "complete", Stages: map[string]*pipeline.StageStats{"classify": tc.st}}
			if err := PrintSummary(&b, []string{"classify"}, sum, false, nil); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("summary lacks %q:\n%s", w, out)
				}
			}
			for _, a := range tc.avoid {
				if strings.Contains(out, a) {
					t.Errorf("summary says %q:\n%s", a, out)
				}
			}
		})
	}
}

func TestNewStatusView_Tiers(t *testing.T) {
	run := func(flexCalls int64) pipeline.RunSummary {
		// Each run's flex calls took flexCalls minutes: the runs' p50
		// is the 4th of 3,3,3,4,4,4,4 minutes (3m58s within the histogram's 1%).
		lat := &pipeline.Latencies{}
		for range flexCalls {
			lat.Observe(time.Duration(flexCalls) * time.Minute)
		}
		return pipeline.RunSummary{Status: "complete", Stages: map[string]*pipeline.StageStats{"classify": {
			Tiers: map[string]*pipeline.TierStats{pipeline.TierFlex: {Calls: flexCalls, Shed: 1, CostUSD: 0.5, SavedUSD: 0.5, Latency: lat}}, CacheSavedUSD: 0.25,
			Usage: pipeline.Usage{CachedTokens: 100}}}}
	}
	v := NewStatusView("db", pipeline.Counts{}, 0, []pipeline.RunSummary{run(3), run(4)})
	if f := v.Tiers[pipeline.TierFlex]; f == nil || f.Calls != 7 || f.Shed != 2 || f.CostUSD != 1 || v.CacheSavedUSD != 0.5 {
		t.Fatalf("view tiers %+v cache %v", v.Tiers, v.CacheSavedUSD)
	}
	var b bytes.Buffer
	if err := PrintStatus(&b, v, false); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"all runs: flex tier: 7 calls, 2 shed, latency p50 3m58s p95 3m58s, $1.0000 ($1.0000 less than on standard)", "all runs: 200 input tokens implicitly cached, $0.5000 saved"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("status lacks %q:\n%s", w, b.String())
		}
	}
}
