package cli

import (
	"reflect"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// TestBatchPhase_addToKeepsEveryFigure: the figures of the runs before a
// batched stage reach the run's summary whole: the billed calls, the
// cached answers and what they saved, the tiers and the dead reasons
// too (the phase once added only the counts the first summary had, so a
// run's paid calls, savings and dead reasons lost those of its earlier
// stages).
func TestBatchPhase_addToKeepsEveryFigure(t *testing.T) {
	first := pipeline.StageStats{Done: 10, Dead: 1, Attempts: 12, Calls: 14, Paid: 11, RateLimited: 2, Unavailable: 1, BadAnswers: 1, LeasesLost: 1,
		Usage: pipeline.Usage{PromptTokens: 100, TotalTokens: 120}, CostUSD: 0.25, Cached: 3, SavedUSD: 0.5, CacheSavedUSD: 0.125,
		Tiers:       map[string]*pipeline.TierStats{"flex": {Calls: 4, CostUSD: 0.125}},
		DeadReasons: map[string]int{"blocked": 1}, LimitMin: 2, LimitMax: 8, LimitEnd: 6, InFlightMax: 7}
	second := pipeline.StageStats{Done: 5, Calls: 5, Paid: 5, Cached: 1, SavedUSD: 0.25, Tiers: map[string]*pipeline.TierStats{"flex": {Calls: 1}},
		DeadReasons: map[string]int{"blocked": 2}, LimitMin: 3, LimitMax: 9, LimitEnd: 4, InFlightMax: 5}
	var p batchPhase
	p.addBefore(pipeline.RunSummary{Stages: map[string]*pipeline.StageStats{"sanitize": {Done: 10}, "classify": &first}})
	p.addBefore(pipeline.RunSummary{Stages: map[string]*pipeline.StageStats{"classify": &second}})
	var sum pipeline.RunSummary
	p.addTo(&sum)

	want := pipeline.StageStats{Done: 15, Dead: 1, Attempts: 12, Calls: 19, Paid: 16, RateLimited: 2, Unavailable: 1, BadAnswers: 1, LeasesLost: 1,
		Usage: pipeline.Usage{PromptTokens: 100, TotalTokens: 120}, CostUSD: 0.25, Cached: 4, SavedUSD: 0.75, CacheSavedUSD: 0.125,
		Tiers:       map[string]*pipeline.TierStats{"flex": {Calls: 5, CostUSD: 0.125}},
		DeadReasons: map[string]int{"blocked": 3}, LimitMin: 2, LimitMax: 9, LimitEnd: 4, InFlightMax: 7}
	if got := sum.Stages["classify"]; got == nil || !reflect.DeepEqual(*got, want) {
		t.Errorf("classify =\n%+v\nwant\n%+v", got, want)
	}
	if got := sum.Stages["sanitize"]; got == nil || got.Done != 10 {
		t.Errorf("sanitize = %+v, want its 10 done", got)
	}
}

// TestBatchPhase_addToEndsAtTheLastRun: a stage the runs before a batched
// stage drove and the run after them drove again ends the summary at the
// limit the later run ended at; its lowest and highest are over both.
func TestBatchPhase_addToEndsAtTheLastRun(t *testing.T) {
	var p batchPhase
	p.addBefore(pipeline.RunSummary{Stages: map[string]*pipeline.StageStats{"triage": {Done: 4, LimitMin: 2, LimitMax: 9, LimitEnd: 6, InFlightMax: 8}}})
	sum := pipeline.RunSummary{Stages: map[string]*pipeline.StageStats{"triage": {Done: 1, LimitMin: 5, LimitMax: 12, LimitEnd: 11, InFlightMax: 3}}}
	p.addTo(&sum)
	want := pipeline.StageStats{Done: 5, LimitMin: 2, LimitMax: 12, LimitEnd: 11, InFlightMax: 8}
	if got := sum.Stages["triage"]; got == nil || !reflect.DeepEqual(*got, want) {
		t.Errorf("triage =\n%+v\nwant\n%+v", got, want)
	}
}
